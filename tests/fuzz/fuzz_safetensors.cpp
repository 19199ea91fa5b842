// libFuzzer harness for the safetensors reader: the input is the file.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ndt::fuzz::scratch_dir() + "/t.safetensors";
  ndt::fuzz::write_file(
      path, std::string_view(reinterpret_cast<const char*>(data), size));
  ndt::fuzz::expect_clean([&] {
    ndt::SafetensorsFile f = ndt::read_safetensors(path);
    for (const ndt::NamedTensor& t : f.tensors)
      (void)t.tensor.numel();
  });
  return 0;
}
