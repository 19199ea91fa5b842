// IDX reader: exact decoding of a hand-written file and one DataError per
// kind of malformed input, each naming the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "base/error.h"
#include "data/byte_files.h"
#include "data/idx.h"

namespace ndt {
namespace {

namespace fs = std::filesystem;
using test::read_raw;
using test::write_gz;
using test::write_raw;

const std::string kRealLabels =
    "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";

class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(
            fs::temp_directory_path() /
            ("ndt_test_idx_" + std::to_string(getpid()) + "_" + name)) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const {
    return (path_ / name).string();
  }

 private:
  fs::path path_;
};

// IDX bytes: magic (0, 0, type, ndims), big-endian dims, then payload.
std::vector<uint8_t> idx_bytes(
    int type,
    const std::vector<uint32_t>& dims,
    const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out = {
      0, 0, static_cast<uint8_t>(type), static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    out.push_back(static_cast<uint8_t>(d >> 24));
    out.push_back(static_cast<uint8_t>(d >> 16));
    out.push_back(static_cast<uint8_t>(d >> 8));
    out.push_back(static_cast<uint8_t>(d));
  }
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

// Runs read_idx_gz expecting a DataError whose message names `path` and
// contains `what`.
void expect_data_error(
    const std::string& path, int ndims, const std::string& what) {
  try {
    read_idx_gz(path, kIdxUbyte, ndims);
    FAIL() << "no DataError for " << path;
  } catch (const DataError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
}

// The payload read, as a byte vector.
std::vector<uint8_t> bytes_of(const IdxArray& a) {
  const uint8_t* p = a.data.data_u8();
  return std::vector<uint8_t>(p, p + a.data.numel());
}

TEST(Idx, DecodesHandWrittenFileExactly) {
  TempDir dir("exact");
  std::vector<uint8_t> payload(2 * 3 * 4);
  for (size_t i = 0; i < payload.size(); ++i)
    payload[i] = uint8_t(i * 11);
  write_gz(dir.file("a.gz"), idx_bytes(0x08, {2, 3, 4}, payload));
  IdxArray a = read_idx_gz(dir.file("a.gz"), kIdxUbyte, 3);
  EXPECT_EQ(a.dims, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(bytes_of(a), payload);
}

TEST(Idx, LargeDimsUseAllFourHeaderBytes) {
  TempDir dir("large");
  std::vector<uint8_t> payload(70000, 7);  // 70000 = 0x00011170
  write_gz(dir.file("a.gz"), idx_bytes(0x08, {70000}, payload));
  IdxArray a = read_idx_gz(dir.file("a.gz"), kIdxUbyte, 1);
  EXPECT_EQ(a.dims, (std::vector<int64_t>{70000}));
  EXPECT_EQ(bytes_of(a), payload);
}

TEST(Idx, ConcatenatedGzipMembersReadAsOneStream) {
  // gzip allows several members back to back; they decompress to the
  // concatenation (here: the header and 5 bytes, then the other 19).
  TempDir dir("members");
  std::vector<uint8_t> payload(2 * 3 * 4);
  for (size_t i = 0; i < payload.size(); ++i)
    payload[i] = uint8_t(200 - i);
  const std::vector<uint8_t> bytes = idx_bytes(0x08, {2, 3, 4}, payload);
  const size_t cut = bytes.size() - 19;
  write_gz(dir.file("p1.gz"), {bytes.begin(), bytes.begin() + long(cut)});
  write_gz(dir.file("p2.gz"), {bytes.begin() + long(cut), bytes.end()});
  std::vector<uint8_t> both = read_raw(dir.file("p1.gz"));
  const std::vector<uint8_t> second = read_raw(dir.file("p2.gz"));
  both.insert(both.end(), second.begin(), second.end());
  write_raw(dir.file("a.gz"), both);
  IdxArray a = read_idx_gz(dir.file("a.gz"), kIdxUbyte, 3);
  EXPECT_EQ(a.dims, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(bytes_of(a), payload);
}

TEST(Idx, RealLabelFileHasTenThousandEntries) {
  IdxArray a = read_idx_gz(kRealLabels, kIdxUbyte, 1);
  EXPECT_EQ(a.dims, (std::vector<int64_t>{10000}));
  EXPECT_EQ(a.data.numel(), 10000);
  EXPECT_EQ(a.data.dtype(), DType::kU8);
  EXPECT_EQ(a.data.tag(), MemTag::kData);
}

TEST(Idx, MissingFileNamesIt) {
  TempDir dir("missing");
  expect_data_error(dir.file("nope.gz"), 1, "no such file");
}

TEST(Idx, PlainFileIsNotGzip) {
  TempDir dir("plain");
  write_raw(dir.file("a.gz"), idx_bytes(0x08, {3}, {1, 2, 3}));
  expect_data_error(dir.file("a.gz"), 1, "not a gzip file");
}

TEST(Idx, EmptyFileIsNotGzip) {
  TempDir dir("empty");
  write_raw(dir.file("e.gz"), {});
  expect_data_error(dir.file("e.gz"), 1, "not a gzip file");
}

TEST(Idx, DirectoryIsNotAFile) {
  TempDir dir("isdir");
  fs::create_directories(dir.file("d.gz"));
  expect_data_error(dir.file("d.gz"), 1, "not a regular file");
}

TEST(Idx, TruncatedGzipNamesIt) {
  TempDir dir("trunc");
  std::vector<uint8_t> bytes = read_raw(kRealLabels);
  ASSERT_GT(bytes.size(), 1000u);
  bytes.resize(bytes.size() / 2);
  write_raw(dir.file("t.gz"), bytes);
  expect_data_error(dir.file("t.gz"), 1, "truncated or corrupt gzip");
}

TEST(Idx, CorruptCrcIsDetected) {
  TempDir dir("crc");
  std::vector<uint8_t> bytes = read_raw(kRealLabels);
  bytes[bytes.size() - 8] ^= 0xff;  // first byte of the CRC-32 trailer
  write_raw(dir.file("c.gz"), bytes);
  expect_data_error(dir.file("c.gz"), 1, "truncated or corrupt gzip");
}

// A payload of 4 MB that does not compress: the header's bytes come long
// before the stream's end, so corruption there is found by the pass that
// inflates the whole file, not by the one that reads the header.
std::vector<uint8_t> large_idx() {
  std::vector<uint8_t> payload(4 << 20);
  uint32_t x = 12345;
  for (uint8_t& b : payload) {
    x = x * 1664525u + 1013904223u;
    b = uint8_t(x >> 24);
  }
  return idx_bytes(0x08, {uint32_t(payload.size())}, payload);
}

TEST(Idx, LargeFileReadsExactly) {
  TempDir dir("large_ok");
  const std::vector<uint8_t> bytes = large_idx();
  write_gz(dir.file("l.gz"), bytes);
  IdxArray a = read_idx_gz(dir.file("l.gz"), kIdxUbyte, 1);
  EXPECT_EQ(a.dims, (std::vector<int64_t>{int64_t(bytes.size()) - 8}));
  EXPECT_TRUE(std::equal(bytes.begin() + 8, bytes.end(), a.data.data_u8()));
}

TEST(Idx, LargeFileCorruptCrcOrCutShortIsDetected) {
  TempDir dir("large_bad");
  write_gz(dir.file("l.gz"), large_idx());
  std::vector<uint8_t> bytes = read_raw(dir.file("l.gz"));
  bytes[bytes.size() - 8] ^= 0xff;  // first byte of the CRC-32 trailer
  write_raw(dir.file("crc.gz"), bytes);
  expect_data_error(dir.file("crc.gz"), 1, "truncated or corrupt gzip");
  bytes.erase(bytes.end() - 1000, bytes.end());
  write_raw(dir.file("cut.gz"), bytes);
  expect_data_error(dir.file("cut.gz"), 1, "truncated or corrupt gzip");
}

TEST(Idx, WrongMagicTypeNamesIt) {
  TempDir dir("magic");
  write_gz(dir.file("m.gz"), idx_bytes(0x0D, {3}, std::vector<uint8_t>(12)));
  expect_data_error(dir.file("m.gz"), 1, "wrong magic");
}

TEST(Idx, NonZeroLeadingMagicBytesAreRejected) {
  TempDir dir("magic0");
  std::vector<uint8_t> bytes = idx_bytes(0x08, {3}, {1, 2, 3});
  bytes[0] = 0x1f;
  write_gz(dir.file("m.gz"), bytes);
  expect_data_error(dir.file("m.gz"), 1, "wrong magic");
}

TEST(Idx, WrongDimCountNamesIt) {
  // A real label file (1 dim) read where images (3 dims) are expected.
  expect_data_error(kRealLabels, 3, "expected 0 0 8 3");
}

TEST(Idx, ShortPayloadIsSizeMismatch) {
  TempDir dir("short");
  write_gz(dir.file("s.gz"), idx_bytes(0x08, {2, 5}, {1, 2, 3, 4, 5, 6}));
  expect_data_error(dir.file("s.gz"), 2, "size mismatch");
}

TEST(Idx, HeaderCutShortNamesIt) {
  TempDir dir("hdr");
  write_gz(dir.file("h.gz"), {0, 0, 8, 3, 0, 0, 0, 1});
  expect_data_error(dir.file("h.gz"), 3, "inside the header");
}

TEST(Idx, TrailingGarbageNamesIt) {
  TempDir dir("trail");
  write_gz(dir.file("g.gz"), idx_bytes(0x08, {3}, {1, 2, 3, 4}));
  expect_data_error(dir.file("g.gz"), 1, "trailing garbage");
}

// A header that promises more than its gzip file can inflate to (at most
// 1032 bytes per byte) is refused before the promised size is reserved:
// 60000 images of 28 x 28 (47 MB) from a file of a few dozen bytes.
TEST(Idx, PayloadBeyondWhatTheFileCanInflateToIsRefused) {
  TempDir dir("promise");
  write_gz(dir.file("p.gz"), idx_bytes(0x08, {60000, 28, 28}, {1, 2, 3}));
  expect_data_error(
      dir.file("p.gz"), 3, "47040000 payload bytes, more than a gzip file of");
}

TEST(Idx, DimsWhoseProductOverflowsAreImplausible) {
  // (2^32 - 1)^3 wraps int64; the product must be checked, not computed.
  TempDir dir("overflow");
  write_gz(
      dir.file("o.gz"),
      idx_bytes(0x08, {0xffffffffu, 0xffffffffu, 0xffffffffu}, {}));
  expect_data_error(dir.file("o.gz"), 3, "implausible payload");
}

}  // namespace
}  // namespace ndt
