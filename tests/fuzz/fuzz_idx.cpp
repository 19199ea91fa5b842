// libFuzzer harness for the IDX reader. The first input byte picks the
// mode: bit 0 set, the rest is written as is (exercising the gzip layer);
// clear, the rest is gzip-compressed first, so mutations reach the IDX
// header and payload checks. Bit 1 picks 1 or 3 expected dims (labels or
// images).
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "data/idx.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0)
    return 0;
  const uint8_t mode = data[0];
  std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::string path = ndt::fuzz::scratch_dir() + "/data-idx.gz";
  if (mode & 1) {
    ndt::fuzz::write_file(path, body);
  } else {
    gzFile gz = gzopen(path.c_str(), "wb1");
    if (gz == nullptr)
      __builtin_trap();
    if (!body.empty() &&
        gzwrite(gz, body.data(), static_cast<unsigned>(body.size())) <= 0) {
      __builtin_trap();
    }
    gzclose(gz);
  }
  ndt::fuzz::expect_clean(
      [&] { (void)ndt::read_idx_gz(path, ndt::kIdxUbyte, mode & 2 ? 3 : 1); });
  return 0;
}
