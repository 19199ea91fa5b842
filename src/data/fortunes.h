// Byte-level text corpus from Debian's `fortunes` package, for small
// language-model runs.
//
// Tokens are raw bytes (vocabulary 256); there is no tokenizer. The split
// into train and validation is fixed by record position, not by a seed.
// Batches come either from random windows (training; the window of global
// sample s depends only on (key, s)) or from consecutive non-overlapping
// windows (evaluation). Dimension letters: B batch, T sequence length.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace ndt {

// Default location of the fortune files.
constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

// Train and validation text as bytes.
struct TextDataset {
  std::vector<uint8_t> train;
  std::vector<uint8_t> val;
};

// Reads every plain fortune file directly in `dir`, in file-name order,
// skipping *.dat, *.u8 and anything that is not a regular file (symlinks
// included). Each file is split into records at lines that are exactly "%";
// empty records are dropped. Non-empty record k, counted over all files,
// goes to val when k % 10 == 9, else to train. Each record keeps its lines
// with their newlines, and records are joined with a "\n", so a blank line
// separates them. Throws DataError naming the path when `dir` is missing or
// unreadable, or when it yields less than 1 MB (1e6 bytes) of text.
TextDataset load_fortunes(const std::string& dir);

// Language-model batch of random windows. For batch row b the global sample
// is s = first_sample + b and the window starts at
// rng_u64(key, s) % (text.size() - T - 1); tokens [B, T] int32 are the
// window's bytes and targets [B, T] int32 the bytes one position later.
// Throws ConfigError when text.size() < T + 2.
void gather_text_random(
    const std::vector<uint8_t>& text,
    int64_t T,
    uint64_t key,
    int64_t first_sample,
    int64_t B,
    Tensor& tokens,
    Tensor& targets);

// Number of non-overlapping evaluation windows: (text.size() - 1) / T.
int64_t num_text_windows(const std::vector<uint8_t>& text, int64_t T);

// Evaluation batch: row b holds window k = first_window + b, i.e. tokens
// text[k*T, (k+1)*T) and targets text[k*T + 1, (k+1)*T + 1). Requires
// first_window + B <= num_text_windows(text, T).
void gather_text_windows(
    const std::vector<uint8_t>& text,
    int64_t T,
    int64_t first_window,
    int64_t B,
    Tensor& tokens,
    Tensor& targets);

}  // namespace ndt
