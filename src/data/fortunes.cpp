#include "data/fortunes.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string_view>

#include "base/check.h"
#include "tensor/rng.h"

namespace ndt {
namespace {

constexpr size_t kMinTextBytes = 1000000;
constexpr int kValEvery = 10;  // record k is validation when k % 10 == 9

namespace fs = std::filesystem;

bool has_suffix(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  NDT_CHECK(in, DataError, "fortune file ", path.string(), ": cannot open");
  std::string text(
      (std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  NDT_CHECK(
      !in.bad(), DataError, "fortune file ", path.string(), ": read error");
  return text;
}

// Appends `record` to `out`, preceded by the "\n" separator unless first.
void append_record(std::vector<uint8_t>& out, std::string_view record) {
  if (!out.empty())
    out.push_back('\n');
  out.insert(out.end(), record.begin(), record.end());
}

void check_batch(int64_t B, int64_t T, Tensor& tokens, Tensor& targets) {
  NDT_ASSERT(
      tokens.dtype() == DType::kI32 && tokens.shape() == Shape({B, T}),
      "tokens ",
      shape_str(tokens.shape()),
      " for B=",
      B,
      " T=",
      T);
  NDT_ASSERT(
      targets.dtype() == DType::kI32 && targets.shape() == Shape({B, T}),
      "targets ",
      shape_str(targets.shape()),
      " for B=",
      B,
      " T=",
      T);
}

// tokens[0..T) = text[start..start+T), targets one byte later.
void copy_window(
    const std::vector<uint8_t>& text,
    int64_t start,
    int64_t T,
    int32_t* tokens,
    int32_t* targets) {
  const uint8_t* p = text.data() + start;
  for (int64_t t = 0; t < T; ++t) {
    tokens[t] = p[t];
    targets[t] = p[t + 1];
  }
}

}  // namespace

TextDataset load_fortunes(const std::string& dir) {
  std::error_code ec;
  NDT_CHECK(
      fs::is_directory(dir, ec),
      DataError,
      "fortunes directory ",
      dir,
      ": no such directory (install Debian's `fortunes` package)");
  std::vector<fs::path> files;
  fs::directory_iterator it(dir, ec);
  NDT_CHECK(!ec, DataError, "fortunes directory ", dir, ": ", ec.message());
  for (const fs::directory_entry& entry : it) {
    const std::string name = entry.path().filename().string();
    // symlink_status: the *.u8 names are symlinks to the plain files.
    if (!fs::is_regular_file(entry.symlink_status()))
      continue;
    if (has_suffix(name, ".dat") || has_suffix(name, ".u8"))
      continue;
    files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) {
    return a.filename().string() < b.filename().string();
  });

  TextDataset out;
  int64_t k = 0;  // non-empty records seen so far, over all files
  for (const fs::path& path : files) {
    const std::string text = read_file(path);
    size_t record_begin = 0;
    size_t pos = 0;
    // A record ends at a line that is exactly "%" (or "%\r"), or at EOF.
    while (record_begin < text.size()) {
      size_t eol = text.find('\n', pos);
      size_t line_end = eol == std::string::npos ? text.size() : eol;
      std::string_view line(text.data() + pos, line_end - pos);
      bool sep = line == "%" || line == "%\r";
      bool last = eol == std::string::npos;
      if (sep || last) {
        size_t record_end = sep ? pos : text.size();
        if (record_end > record_begin) {
          std::string_view record(
              text.data() + record_begin, record_end - record_begin);
          append_record(
              k % kValEvery == kValEvery - 1 ? out.val : out.train, record);
          ++k;
        }
        record_begin = last ? text.size() : eol + 1;
      }
      pos = last ? text.size() : eol + 1;
    }
  }
  const size_t total = out.train.size() + out.val.size();
  NDT_CHECK(
      total >= kMinTextBytes,
      DataError,
      "fortunes directory ",
      dir,
      ": only ",
      total,
      " bytes of text in ",
      files.size(),
      " files, expected at least ",
      kMinTextBytes);
  return out;
}

void gather_text_random(
    const std::vector<uint8_t>& text,
    int64_t T,
    uint64_t key,
    int64_t first_sample,
    int64_t B,
    Tensor& tokens,
    Tensor& targets) {
  NDT_CHECK(
      T >= 1 && static_cast<int64_t>(text.size()) >= T + 2,
      ConfigError,
      "sequence length ",
      T,
      " needs a text of at least T + 2 bytes, have ",
      text.size());
  check_batch(B, T, tokens, targets);
  const uint64_t range = text.size() - static_cast<uint64_t>(T) - 1;
  int32_t* tok = tokens.data_i32();
  int32_t* tgt = targets.data_i32();
  for (int64_t b = 0; b < B; ++b) {
    const uint64_t s = static_cast<uint64_t>(first_sample + b);
    const int64_t start = static_cast<int64_t>(rng_u64(key, s) % range);
    copy_window(text, start, T, tok + b * T, tgt + b * T);
  }
}

int64_t num_text_windows(const std::vector<uint8_t>& text, int64_t T) {
  NDT_ASSERT(T >= 1, "sequence length ", T);
  if (text.empty())
    return 0;
  return (static_cast<int64_t>(text.size()) - 1) / T;
}

void gather_text_windows(
    const std::vector<uint8_t>& text,
    int64_t T,
    int64_t first_window,
    int64_t B,
    Tensor& tokens,
    Tensor& targets) {
  const int64_t windows = num_text_windows(text, T);
  NDT_ASSERT(
      first_window >= 0 && first_window + B <= windows,
      "windows [",
      first_window,
      ", ",
      first_window + B,
      ") of ",
      windows);
  check_batch(B, T, tokens, targets);
  int32_t* tok = tokens.data_i32();
  int32_t* tgt = targets.data_i32();
  for (int64_t b = 0; b < B; ++b) {
    copy_window(text, (first_window + b) * T, T, tok + b * T, tgt + b * T);
  }
}

}  // namespace ndt
