// libFuzzer harness for the config loader: YAML text and key=value
// overrides. Input: the YAML file's bytes, then NUL-separated overrides.
// A config that loads must also survive the JSON round trip that
// checkpoints use (config_to_json -> config_from_json), unchanged.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "io/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t nul = in.find('\0');
  std::string_view yaml = in.substr(0, nul);
  std::vector<std::string> overrides;
  while (nul != std::string_view::npos) {
    in = in.substr(nul + 1);
    nul = in.find('\0');
    overrides.emplace_back(in.substr(0, nul));
  }
  const std::string path = ndt::fuzz::scratch_dir() + "/config.yaml";
  ndt::fuzz::write_file(path, yaml);
  ndt::fuzz::expect_clean([&] {
    ndt::Config c = ndt::load_config(path, overrides);
    nlohmann::json j = ndt::config_to_json(c);
    if (ndt::config_to_json(ndt::config_from_json(j)) != j)
      __builtin_trap();  // the round trip changed the config
  });
  return 0;
}
