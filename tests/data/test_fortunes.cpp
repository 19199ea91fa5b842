// Fortunes text: the real corpus, the record split rule on a hand-made
// directory, and the random / sequential LM batch gatherers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "data/fortunes.h"
#include "tensor/rng.h"

namespace ndt {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(
            fs::temp_directory_path() /
            ("ndt_test_fortunes_" + std::to_string(getpid()) + "_" + name)) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string str() const {
    return path_.string();
  }
  fs::path path() const {
    return path_;
  }

 private:
  fs::path path_;
};

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good());
}

std::vector<uint8_t> bytes(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

// Number of lines that are exactly "%".
int64_t separator_lines(const std::vector<uint8_t>& text) {
  int64_t count = 0;
  size_t begin = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == '\n') {
      count += (i - begin == 1 && text[begin] == '%');
      begin = i + 1;
    }
  }
  return count;
}

TEST(Fortunes, RealCorpusIsLargeSplitAndClean) {
  TextDataset ds = load_fortunes(kFortunesDir);
  EXPECT_GT(ds.train.size(), 1000000u);
  EXPECT_GT(ds.val.size(), 0u);
  // Every tenth record is validation: val is ~10% of the text.
  const double frac =
      double(ds.val.size()) / double(ds.train.size() + ds.val.size());
  EXPECT_GT(frac, 0.05);
  EXPECT_LT(frac, 0.15);
  EXPECT_EQ(separator_lines(ds.train), 0);
  EXPECT_EQ(separator_lines(ds.val), 0);
  // Binary index files (*.dat) would bring NUL bytes into the text.
  EXPECT_EQ(std::count(ds.train.begin(), ds.train.end(), 0), 0);
}

TEST(Fortunes, SplitIsTheSameAcrossCalls) {
  TextDataset a = load_fortunes(kFortunesDir);
  TextDataset b = load_fortunes(kFortunesDir);
  EXPECT_EQ(a.train, b.train);
  EXPECT_EQ(a.val, b.val);
}

// Record k of the hand-made corpus: a tag line plus 60 KB of filler.
std::string record(int k) {
  return "R" + std::to_string(k) + "\n" +
         std::string(60000, static_cast<char>('a' + k % 26)) + "\n";
}

TEST(Fortunes, RecordsGoToValWhenIndexModTenIsNine) {
  TempDir dir("rule");
  // File "a" (first by name) holds records 0..11; "b" holds 12..19 with
  // an empty record (two "%" in a row) and no final "%" or newline.
  std::string a, b;
  for (int k = 0; k < 12; ++k)
    a += record(k) + "%\n";
  for (int k = 12; k < 20; ++k) {
    std::string r = record(k);
    if (k == 19)
      r.pop_back();  // last record ends without "\n"
    b += r + (k == 14 ? "%\n%\n" : k == 19 ? "" : "%\n");
  }
  write_text(dir.path() / "b", b);
  write_text(dir.path() / "a", a);
  // Everything below must be ignored.
  write_text(dir.path() / "a.dat", std::string(500000, '%'));
  write_text(dir.path() / "notes.u8", record(99));
  fs::create_symlink(dir.path() / "a", dir.path() / "c-link");
  fs::create_directories(dir.path() / "sub");
  write_text(dir.path() / "sub" / "d", record(98));

  std::string train, val;
  for (int k = 0; k < 20; ++k) {
    std::string r = record(k);
    if (k == 19)
      r.pop_back();
    std::string& dst = k % 10 == 9 ? val : train;
    dst += (dst.empty() ? "" : "\n") + r;
  }
  TextDataset ds = load_fortunes(dir.str());
  EXPECT_EQ(ds.train, bytes(train));
  EXPECT_EQ(ds.val, bytes(val));
}

TEST(Fortunes, PercentInsideTextIsNotASeparator) {
  TempDir dir("pct");
  std::string text = "100%\n%%\n %\nend\n%\n" + std::string(1000000, 'x');
  write_text(dir.path() / "f", text);
  TextDataset ds = load_fortunes(dir.str());
  EXPECT_EQ(
      ds.train, bytes("100%\n%%\n %\nend\n\n" + std::string(1000000, 'x')));
  EXPECT_TRUE(ds.val.empty());
}

TEST(Fortunes, MissingDirectoryNamesIt) {
  TempDir dir("missing");
  const std::string path = dir.str() + "/nope";
  try {
    load_fortunes(path);
    FAIL() << "no DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(Fortunes, TooLittleTextNamesTheDirectory) {
  TempDir dir("small");
  write_text(dir.path() / "f", "one\n%\ntwo\n%\n");
  try {
    load_fortunes(dir.str());
    FAIL() << "no DataError";
  } catch (const DataError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(dir.str()), std::string::npos) << msg;
    EXPECT_NE(msg.find("only 9 bytes"), std::string::npos) << msg;
  }
}

std::vector<uint8_t> digits_text(int64_t n) {
  std::vector<uint8_t> t(n);
  for (int64_t i = 0; i < n; ++i)
    t[i] = static_cast<uint8_t>(i * 37 % 251);
  return t;
}

TEST(TextBatches, RandomWindowsFollowTheStatedRule) {
  const std::vector<uint8_t> text = digits_text(5000);
  const int64_t B = 6, T = 16;
  Tensor tokens({B, T}, MemTag::kData, DType::kI32);
  Tensor targets({B, T}, MemTag::kData, DType::kI32);
  gather_text_random(text, T, 77, 1000, B, tokens, targets);
  for (int64_t b = 0; b < B; ++b) {
    const uint64_t start = rng_u64(77, 1000 + b) % (5000 - T - 1);
    for (int64_t t = 0; t < T; ++t) {
      EXPECT_EQ(tokens.data_i32()[b * T + t], text[start + t]);
      EXPECT_EQ(targets.data_i32()[b * T + t], text[start + t + 1]);
    }
  }
}

TEST(TextBatches, RandomWindowsAreLayoutIndependent) {
  const std::vector<uint8_t> text = digits_text(5000);
  const int64_t T = 8;
  Tensor full({8, T}, MemTag::kData, DType::kI32);
  Tensor full_y({8, T}, MemTag::kData, DType::kI32);
  gather_text_random(text, T, 5, 40, 8, full, full_y);
  for (int r = 0; r < 4; ++r) {
    Tensor part({2, T}, MemTag::kData, DType::kI32);
    Tensor part_y({2, T}, MemTag::kData, DType::kI32);
    gather_text_random(text, T, 5, 40 + 2 * r, 2, part, part_y);
    EXPECT_TRUE(std::equal(
        part.data_i32(), part.data_i32() + 2 * T, full.data_i32() + 2 * r * T));
    EXPECT_TRUE(std::equal(
        part_y.data_i32(),
        part_y.data_i32() + 2 * T,
        full_y.data_i32() + 2 * r * T));
  }
}

TEST(TextBatches, SequenceLongerThanTextIsConfigError) {
  const std::vector<uint8_t> text = digits_text(10);
  Tensor tokens({1, 9}, MemTag::kData, DType::kI32);
  Tensor targets({1, 9}, MemTag::kData, DType::kI32);
  EXPECT_THROW(
      gather_text_random(text, 9, 1, 0, 1, tokens, targets), ConfigError);
}

TEST(TextBatches, EvaluationWindowsTileTheText) {
  const std::vector<uint8_t> text = bytes("0123456789");
  EXPECT_EQ(num_text_windows(text, 3), 3);
  EXPECT_EQ(num_text_windows(text, 9), 1);
  EXPECT_EQ(num_text_windows(text, 10), 0);
  Tensor tokens({2, 3}, MemTag::kData, DType::kI32);
  Tensor targets({2, 3}, MemTag::kData, DType::kI32);
  gather_text_windows(text, 3, 1, 2, tokens, targets);
  const std::vector<int32_t> want_x = {'3', '4', '5', '6', '7', '8'};
  const std::vector<int32_t> want_y = {'4', '5', '6', '7', '8', '9'};
  EXPECT_TRUE(std::equal(want_x.begin(), want_x.end(), tokens.data_i32()));
  EXPECT_TRUE(std::equal(want_y.begin(), want_y.end(), targets.data_i32()));
}

}  // namespace
}  // namespace ndt
