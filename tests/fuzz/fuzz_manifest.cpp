// libFuzzer harness for checkpoint loading through its manifest: the input
// is manifest.json of a step directory whose model.safetensors and
// optimizer.safetensors are the real ones of tests/fuzz/checkpoint/ (so the
// seed manifest, which lists their sizes and crc32s, loads completely).
// The stored config is then validated as resuming does.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "io/checkpoint.h"
#include "io/config.h"
#include "io/untrusted.h"

namespace {

const std::string& step_dir() {
  static const std::string dir = [] {
    namespace fs = std::filesystem;
    std::string d = ndt::fuzz::scratch_dir() + "/step-2";
    fs::create_directories(d);
    for (const char* name : {"model.safetensors", "optimizer.safetensors"}) {
      fs::copy_file(
          std::string(NDT_SOURCE_DIR) + "/tests/fuzz/checkpoint/" + name,
          d + "/" + name,
          fs::copy_options::overwrite_existing);
    }
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = step_dir();
  ndt::fuzz::write_file(
      dir + "/manifest.json",
      std::string_view(reinterpret_cast<const char*>(data), size));
  ndt::fuzz::expect_clean([&] {
    ndt::Checkpoint ck = ndt::load_checkpoint(dir);
    (void)ndt::json_excerpt(ck.manifest);
    if (ck.manifest.contains("config"))
      (void)ndt::config_from_json(ck.manifest["config"]);
  });
  return 0;
}
