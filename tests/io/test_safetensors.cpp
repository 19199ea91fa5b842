// safetensors reader/writer: bit-exact round trips, the byte layout of the
// spec (parsed by hand here), and one test per kind of corrupt file, each
// checking that the reader throws CheckpointError naming the file and the
// problem. All exact (bitwise) tests.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace ndt {
namespace {

namespace fs = std::filesystem;

using test::read_bytes;
using test::TempDir;
using test::write_bytes;

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i)
    s[i] = static_cast<char>(n >> (8 * i));
  return s;
}

// A file made of a header length, `header` and `buffer_bytes` zero bytes.
std::string raw_file(const std::string& header, size_t buffer_bytes) {
  return le64(header.size()) + header + std::string(buffer_bytes, '\0');
}

Tensor i32_tensor(Shape shape, const std::vector<int32_t>& values) {
  Tensor t(std::move(shape), MemTag::kOther, DType::kI32);
  EXPECT_EQ(static_cast<size_t>(t.numel()), values.size());
  std::copy(values.begin(), values.end(), t.data_i32());
  return t;
}

// Element bytes of `t` (4 per element, either dtype).
std::string tensor_bytes(const Tensor& t) {
  const void* p = t.dtype() == DType::kF32
                      ? static_cast<const void*>(t.data())
                      : static_cast<const void*>(t.data_i32());
  return std::string(static_cast<const char*>(p), t.numel() * 4);
}

void expect_same(const NamedTensor& a, const NamedTensor& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.tensor.dtype(), b.tensor.dtype()) << a.name;
  EXPECT_EQ(a.tensor.shape(), b.tensor.shape()) << a.name;
  EXPECT_EQ(tensor_bytes(a.tensor), tensor_bytes(b.tensor)) << a.name;
}

// Runs `fn`, which must throw CheckpointError whose message contains each
// of `parts`.
void expect_checkpoint_error(
    const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected CheckpointError";
  } catch (const CheckpointError& e) {
    std::string msg = e.what();
    for (const auto& part : parts) {
      EXPECT_NE(msg.find(part), std::string::npos)
          << "message lacks \"" << part << "\": " << msg;
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected CheckpointError, got: " << e.what();
  }
}

// Writes `header` + a zero buffer to a file and expects reading it to fail
// with a message containing the path and each of `parts`.
void expect_bad_header(
    const std::string& header,
    size_t buffer_bytes,
    std::initializer_list<std::string> parts) {
  TempDir dir;
  std::string path = dir.sub("bad.safetensors");
  write_bytes(path, raw_file(header, buffer_bytes));
  SCOPED_TRACE(header);
  expect_checkpoint_error([&] { read_safetensors(path); }, {path});
  expect_checkpoint_error([&] { read_safetensors(path); }, parts);
}

std::vector<NamedTensor> sample_tensors() {
  Tensor special({6}, MemTag::kOther);
  float* s = special.data();
  s[0] = -0.0f;
  s[1] = std::numeric_limits<float>::infinity();
  s[2] = -std::numeric_limits<float>::infinity();
  s[3] = std::numeric_limits<float>::denorm_min();
  uint32_t nan_bits = 0x7fc01234u;  // NaN with a payload
  std::memcpy(&s[4], &nan_bits, 4);
  s[5] = std::numeric_limits<float>::max();
  Tensor scalar({}, MemTag::kOther);
  scalar.data()[0] = 3.25f;
  return {
      {"w", test::randn({3, 4}, 7, "w")},
      {"ids", i32_tensor({2, 3}, {0, -1, 7, 2147483647, -2147483647 - 1, 42})},
      {"special", special},
      {"scalar", scalar},
      {"empty", Tensor({0, 5}, MemTag::kOther)},
      {"b.bias", test::randn({5}, 7, "b")},
  };
}

TEST(Safetensors, RoundTripIsBitExact) {
  TempDir dir;
  std::string path = dir.sub("t.safetensors");
  auto tensors = sample_tensors();
  std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"note", "quote \" slash \\ unicode \xc3\xa9"}};
  write_safetensors(path, tensors, metadata);

  SafetensorsFile f = read_safetensors(path);
  ASSERT_EQ(f.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    expect_same(f.tensors[i], tensors[i]);  // file order == write order
  }
  EXPECT_EQ(f.metadata, metadata);
  ASSERT_NE(f.find("ids"), nullptr);
  EXPECT_EQ(f.find("ids")->data_i32()[3], 2147483647);
  EXPECT_EQ(f.find("nope"), nullptr);
  EXPECT_EQ(f.find("w")->tag(), MemTag::kOther);
}

// tests/fixtures/reference.safetensors was written by an independent
// writer (check_safetensors.py --write-fixture) in the layout of
// huggingface/safetensors: header keys not in data order.
TEST(Safetensors, ReadsFileWrittenByPython) {
  SafetensorsFile f = read_safetensors(
      test::source_path("tests/fixtures/reference.safetensors"));
  ASSERT_EQ(f.tensors.size(), 4u);
  EXPECT_EQ(f.tensors[0].name, "a.weight");
  EXPECT_EQ(f.tensors[1].name, "b.ids");
  EXPECT_EQ(f.tensors[2].name, "c.empty");
  EXPECT_EQ(f.tensors[3].name, "d.scalar");
  const Tensor* a = f.find("a.weight");
  ASSERT_EQ(a->shape(), (Shape{2, 3}));
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(a->data()[i], 0.5f * i - 1) << i;
  const Tensor* ids = f.find("b.ids");
  ASSERT_EQ(ids->dtype(), DType::kI32);
  EXPECT_EQ(
      std::vector<int32_t>(ids->data_i32(), ids->data_i32() + 4),
      (std::vector<int32_t>{-2, 0, 7, 2147483647}));
  EXPECT_EQ(f.find("c.empty")->shape(), (Shape{0}));
  EXPECT_EQ(f.find("d.scalar")->shape(), Shape{});
  EXPECT_EQ(f.find("d.scalar")->data()[0], 1.25f);
  EXPECT_EQ(
      f.metadata,
      (std::map<std::string, std::string>{
          {"format", "pt"}, {"source", "check_safetensors.py"}}));
}

TEST(Safetensors, NoTensorsNoMetadata) {
  TempDir dir;
  std::string path = dir.sub("empty.safetensors");
  write_safetensors(path, {}, {});
  SafetensorsFile f = read_safetensors(path);
  EXPECT_TRUE(f.tensors.empty());
  EXPECT_TRUE(f.metadata.empty());
}

TEST(Safetensors, LargeTensorRoundTrip) {
  TempDir dir;
  std::string path = dir.sub("big.safetensors");
  std::vector<NamedTensor> tensors = {
      {"big", test::randn({1024, 1024}, 3, "big")}};
  write_safetensors(path, tensors, {});
  SafetensorsFile f = read_safetensors(path);
  ASSERT_EQ(f.tensors.size(), 1u);
  expect_same(f.tensors[0], tensors[0]);
}

TEST(Safetensors, ByteLayoutMatchesSpec) {
  TempDir dir;
  std::string path = dir.sub("layout.safetensors");
  Tensor a = test::randn({2, 3}, 1, "a");
  Tensor b = i32_tensor({2}, {5, -6});
  write_safetensors(path, {{"zeta", a}, {"alpha", b}}, {{"k", "v"}});

  std::string bytes = read_bytes(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) {
    n |= uint64_t{static_cast<unsigned char>(bytes[i])} << (8 * i);
  }
  ASSERT_LE(8 + n, bytes.size());
  EXPECT_EQ((8 + n) % 8, 0u) << "data buffer must start 8-byte aligned";
  std::string header_text = bytes.substr(8, n);
  EXPECT_EQ(header_text.front(), '{');
  auto header = nlohmann::ordered_json::parse(header_text);

  // Keys in write order, metadata first.
  std::vector<std::string> keys;
  for (const auto& [k, v] : header.items())
    keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"__metadata__", "zeta", "alpha"}));
  EXPECT_EQ(header["__metadata__"], nlohmann::ordered_json({{"k", "v"}}));
  EXPECT_EQ(header["zeta"]["dtype"], "F32");
  EXPECT_EQ(header["zeta"]["shape"], nlohmann::ordered_json({2, 3}));
  EXPECT_EQ(header["zeta"]["data_offsets"], nlohmann::ordered_json({0, 24}));
  EXPECT_EQ(header["alpha"]["dtype"], "I32");
  EXPECT_EQ(header["alpha"]["shape"], nlohmann::ordered_json({2}));
  EXPECT_EQ(header["alpha"]["data_offsets"], nlohmann::ordered_json({24, 32}));

  ASSERT_EQ(bytes.size(), 8 + n + 32);
  EXPECT_EQ(bytes.substr(8 + n, 24), tensor_bytes(a));
  EXPECT_EQ(bytes.substr(8 + n + 24, 8), tensor_bytes(b));
  // Little-endian int32 in the buffer.
  EXPECT_EQ(
      bytes.substr(8 + n + 24, 8),
      std::string("\x05\0\0\0\xfa\xff\xff\xff", 8));
}

TEST(Safetensors, OverwriteIsAtomicAndLeavesNoTempFiles) {
  TempDir dir;
  std::string path = dir.sub("t.safetensors");
  write_safetensors(path, {{"a", test::randn({4}, 1, "a")}}, {});
  std::vector<NamedTensor> second = {{"b", i32_tensor({1}, {9})}};
  write_safetensors(path, second, {{"v", "2"}});
  SafetensorsFile f = read_safetensors(path);
  ASSERT_EQ(f.tensors.size(), 1u);
  expect_same(f.tensors[0], second[0]);
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    ++entries;
    EXPECT_EQ(e.path().filename(), "t.safetensors");
  }
  EXPECT_EQ(entries, 1);
}

TEST(Safetensors, WriteRejectsBadNamesAndLeavesNothing) {
  TempDir dir;
  std::string path = dir.sub("t.safetensors");
  Tensor t = test::randn({2}, 1, "t");
  expect_checkpoint_error(
      [&] {
        write_safetensors(path, {{"a", t}, {"a", t}}, {});
      },
      {path, "duplicate tensor name 'a'"});
  expect_checkpoint_error(
      [&] {
        write_safetensors(path, {{"__metadata__", t}}, {});
      },
      {"invalid tensor name '__metadata__'"});
  expect_checkpoint_error(
      [&] {
        write_safetensors(path, {{"", t}}, {});
      },
      {"invalid tensor name ''"});
  expect_checkpoint_error(
      [&] {
        write_safetensors(path, {{"u", Tensor()}}, {});
      },
      {"tensor 'u' is undefined"});
  expect_checkpoint_error(
      [&] {
        write_safetensors(path, {{"bad\xff", t}}, {});
      },
      {"not valid UTF-8"});
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(Safetensors, WriteToMissingDirectoryFails) {
  TempDir dir;
  std::string path = dir.sub("no/such/dir/t.safetensors");
  EXPECT_THROW(write_safetensors(path, {}, {}), Error);
}

TEST(SafetensorsCorrupt, MissingFile) {
  TempDir dir;
  std::string path = dir.sub("absent.safetensors");
  expect_checkpoint_error(
      [&] { read_safetensors(path); }, {path, "does not exist"});
}

TEST(SafetensorsCorrupt, DirectoryInsteadOfFile) {
  TempDir dir;
  expect_checkpoint_error(
      [&] { read_safetensors(dir.path().string()); }, {"not a regular file"});
}

TEST(SafetensorsCorrupt, ShorterThanLengthField) {
  TempDir dir;
  std::string path = dir.sub("short.safetensors");
  for (size_t n : {0, 1, 7}) {
    write_bytes(path, std::string(n, '\x01'));
    expect_checkpoint_error(
        [&] { read_safetensors(path); },
        {path,
         "the file has " + std::to_string(n) + " bytes",
         "shorter than the 8-byte header length"});
  }
}

TEST(SafetensorsCorrupt, HeaderLengthLargerThanFile) {
  TempDir dir;
  std::string path = dir.sub("long.safetensors");
  write_bytes(path, le64(100) + "{}");
  expect_checkpoint_error(
      [&] { read_safetensors(path); },
      {path, "header length 100 is larger than the file (10 bytes)"});
  write_bytes(path, le64(~uint64_t{0}) + "{}");
  expect_checkpoint_error(
      [&] { read_safetensors(path); }, {"is larger than the file"});
}

TEST(SafetensorsCorrupt, HeaderNotJson) {
  expect_bad_header("{\"a\": ", 0, {"header is not valid JSON"});
  expect_bad_header("", 0, {"header is not valid JSON"});
  expect_bad_header(
      std::string("{}\0{\"a\": 1}", 11),
      0,
      {"header holds a NUL byte at offset 2"});
  expect_bad_header("{\"\xff\": 1}", 0, {"not valid JSON"});
  expect_bad_header("[1, 2]", 0, {"header is not a JSON object but array"});
}

TEST(SafetensorsCorrupt, EntryMissingFields) {
  expect_bad_header(
      R"({"a": {"shape": [1], "data_offsets": [0, 4]}})",
      4,
      {"tensor 'a' has no \"dtype\""});
  expect_bad_header(
      R"({"a": {"dtype": "F32", "data_offsets": [0, 4]}})",
      4,
      {"tensor 'a' has no \"shape\""});
  expect_bad_header(
      R"({"a": {"dtype": "F32", "shape": [1]}})",
      4,
      {"tensor 'a' has no \"data_offsets\""});
  expect_bad_header(R"({"a": 5})", 0, {"tensor 'a': entry is number"});
}

TEST(SafetensorsCorrupt, BadFieldTypes) {
  expect_bad_header(
      R"({"a": {"dtype": 1, "shape": [1], "data_offsets": [0, 4]}})",
      4,
      {"dtype is number, expected a string"});
  expect_bad_header(
      R"({"a": {"dtype": "F32", "shape": 1, "data_offsets": [0, 4]}})",
      4,
      {"shape is number"});
  expect_bad_header(
      R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})",
      4,
      {"holds -1, not a non-negative integer"});
  expect_bad_header(
      R"({"a": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})",
      4,
      {"not a non-negative integer"});
  expect_bad_header(
      R"({"a": {"dtype": "F32", "shape": ["1"], "data_offsets": [0, 4]}})",
      4,
      {"not a non-negative integer"});
  expect_bad_header(
      R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})",
      4,
      {"data_offsets [0] is not a pair"});
  expect_bad_header(
      R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, -4]}})",
      4,
      {"is not a pair [begin, end] of non-negative integers"});
  expect_bad_header(
      R"({"__metadata__": {"k": 1}})",
      0,
      {"__metadata__ value for 'k' is number, expected a string"});
  expect_bad_header(R"({"__metadata__": []})", 0, {"__metadata__ is array"});
}

TEST(SafetensorsCorrupt, UnsupportedDtype) {
  expect_bad_header(
      R"({"a": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}})",
      4,
      {"tensor 'a' has unsupported dtype 'F16'", "supported: F32, I32"});
}

TEST(SafetensorsCorrupt, ShapeDoesNotMatchSpan) {
  expect_bad_header(
      R"({"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})",
      20,
      {"tensor 'a'", "shape [2, 3] of F32 needs 24 bytes", "span 20"});
  expect_bad_header(
      R"({"a": {"dtype": "I32", "shape": [0, 3], "data_offsets": [0, 4]}})",
      4,
      {"needs 0 bytes"});
  // numel * 4 overflows 64 bits.
  expect_bad_header(
      R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296],
                "data_offsets": [0, 0]}})",
      0,
      {"tensor 'a'", "is too large"});
  expect_bad_header(
      R"({"a": {"dtype": "F32", "shape": [18446744073709551615],
                "data_offsets": [0, 0]}})",
      0,
      {"not a non-negative integer"});
}

TEST(SafetensorsCorrupt, OffsetsOutOfRange) {
  expect_bad_header(
      R"({"a": {"dtype": "F32", "shape": [250], "data_offsets": [0, 1000]}})",
      16,
      {"tensor 'a'", "out of range: the data buffer has 16 bytes"});
  expect_bad_header(
      R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}})",
      16,
      {"has begin after end"});
}

TEST(SafetensorsCorrupt, OffsetsOverlap) {
  expect_bad_header(
      R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
          "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
      24,
      {"tensor 'b'", "overlap tensor 'a'"});
  // An empty tensor inside another one also overlaps.
  expect_bad_header(
      R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
          "b": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]}})",
      16,
      {"tensor 'b'", "overlap"});
}

TEST(SafetensorsCorrupt, OffsetsDoNotCoverBuffer) {
  expect_bad_header(
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
          "b": {"dtype": "F32", "shape": [2], "data_offsets": [12, 20]}})",
      20,
      {"gap of 4 unused bytes", "before tensor 'b'"});
  expect_bad_header(
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
      16,
      {"tensors cover 8 bytes but the data buffer has 16 bytes"});
  expect_bad_header(R"({})", 4, {"tensors cover 0 bytes"});
}

TEST(SafetensorsCorrupt, DuplicateNames) {
  expect_bad_header(
      R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
          "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
      8,
      {"duplicate tensor name 'a'"});
  expect_bad_header(
      R"({"a": {"dtype": "F32", "dtype": "I32", "shape": [1],
                "data_offsets": [0, 4]}})",
      4,
      {"duplicate key 'dtype'"});
}

// Every cut of a valid file is rejected, whatever part it falls in.
TEST(SafetensorsCorrupt, TruncatedAtSeveralOffsets) {
  TempDir dir;
  std::string path = dir.sub("t.safetensors");
  write_safetensors(path, sample_tensors(), {{"k", "v"}});
  std::string bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) {
    n |= uint64_t{static_cast<unsigned char>(bytes[i])} << (8 * i);
  }
  std::string cut_path = dir.sub("cut.safetensors");
  for (size_t cut :
       {size_t{0},
        size_t{4},
        size_t{7},
        size_t{8},
        size_t{9},
        size_t{8 + n / 2},
        size_t{8 + n - 1},
        size_t{8 + n},
        size_t{8 + n + 1},
        size_t{8 + n + 3},
        bytes.size() - 4,
        bytes.size() - 1}) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    ASSERT_LT(cut, bytes.size());
    write_bytes(cut_path, bytes.substr(0, cut));
    expect_checkpoint_error([&] { read_safetensors(cut_path); }, {cut_path});
  }
  // Trailing bytes are rejected too.
  write_bytes(cut_path, bytes + "x");
  expect_checkpoint_error(
      [&] { read_safetensors(cut_path); }, {"tensors cover"});
}

// Random damage to the header, or random files: the reader either succeeds
// or throws CheckpointError; never anything else (run under ASan to also
// check for out-of-bounds reads).
TEST(SafetensorsCorrupt, RandomDamageNeverCrashes) {
  TempDir dir;
  std::string path = dir.sub("t.safetensors");
  write_safetensors(path, sample_tensors(), {{"k", "v"}});
  std::string good = read_bytes(path);
  std::string bad_path = dir.sub("bad.safetensors");
  std::mt19937_64 rng(12345);
  int ok = 0, rejected = 0;
  for (int iter = 0; iter < 600; ++iter) {
    std::string bytes = good;
    if (iter % 3 == 2) {
      bytes.resize(rng() % 64);
      for (auto& c : bytes)
        c = static_cast<char>(rng());
      if (iter % 2 == 0 && bytes.size() >= 8) {
        std::string len = le64(bytes.size() - 8);
        std::copy(len.begin(), len.end(), bytes.begin());
      }
    } else {
      int flips = 1 + static_cast<int>(rng() % 3);
      size_t header_end = std::min<size_t>(bytes.size(), 8 + 200);
      for (int f = 0; f < flips; ++f) {
        size_t at = rng() % header_end;
        bytes[at] = static_cast<char>(bytes[at] ^ (1 << (rng() % 8)));
      }
    }
    fs::remove(bad_path);  // not truncate: ext4 flushes on truncate+close
    write_bytes(bad_path, bytes);
    try {
      read_safetensors(bad_path);
      ++ok;
    } catch (const CheckpointError&) {
      ++rejected;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "iteration " << iter << ": unexpected " << e.what();
    }
  }
  EXPECT_GT(rejected, 300);
  (void)ok;
}

}  // namespace
}  // namespace ndt
