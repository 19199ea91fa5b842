// Deterministic synthetic batches for benchmarks and smoke tests.
//
// Inputs come from the counter RNG under (seed, step), so a benchmark
// measures the same work on every run without reading files. The data has
// no learnable structure; use the real datasets to check learning.
// Dimension letters: B batch, C channels, H, W image size, T sequence
// length, V vocabulary size.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace ndt {

// Fills images [B, C, H, W] fp32 with normal(0, 1) values and labels [B]
// int32 with values in [0, classes), as a function of (seed, step) only.
void synthetic_images(
    uint64_t seed,
    int64_t step,
    int64_t B,
    int C,
    int H,
    int W,
    int classes,
    Tensor& images,
    Tensor& labels);

// Fills tokens and targets [B, T] int32 with values in [0, V) as a function
// of (seed, step) only. Row b is one random sequence of T + 1 tokens:
// tokens are its first T and targets its last T, as in a language model.
void synthetic_tokens(
    uint64_t seed,
    int64_t step,
    int64_t B,
    int64_t T,
    int V,
    Tensor& tokens,
    Tensor& targets);

}  // namespace ndt
