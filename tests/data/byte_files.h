// Files of given bytes for the data readers' tests: written as they are or
// gzip-compressed, and read back whole. Failures are gtest assertions.
#pragma once

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace ndt::test {

// `bytes` gzip-compressed (zlib's default level) into `path`.
inline void write_gz(
    const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile gz = gzopen(path.c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  if (!bytes.empty()) {
    ASSERT_EQ(
        gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size())),
        static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(gz), Z_OK);
}

// `bytes` as they are into `path`, replacing what it held.
inline void write_raw(
    const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  ASSERT_TRUE(out.good());
}

// The whole file at `path` (empty when it cannot be read).
inline std::vector<uint8_t> read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(
      (std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace ndt::test
