// Dropout with a mask recomputed from the counter RNG instead of stored.
//
//   x, y, dy, dx  any shape, same numel; y may alias x, dx may alias dy.
// keep_i = rng_uniform(key, offset + i) >= p; y_i = keep_i ? x_i * (1 / (1 -
// p)) : 0. With a row stride, x is a column block [rows, cols] of a wider
// tensor and element (r, c) takes mask index offset + r * stride + c. The
// backward regenerates the same mask from (key, i), so nothing is saved.
//
// rng_uniform is a scalar call per element (a Philox block per four
// values); here the same Philox4x32-10 is evaluated for 32 blocks at once in
// plain loops that the compiler vectorises, giving the 128 values of one
// aligned group. It must stay bit-identical to rng.cpp (the dropout test
// compares every element against rng_uniform).
#include <cstdint>

#include "base/check.h"
#include "ops/cpu/simd.h"
#include "ops/ops.h"

namespace ndt::ops {
namespace {

constexpr int kBlocks = 32;          // Philox blocks per group
constexpr int kGroup = 4 * kBlocks;  // values per group (rng.h's layout)
constexpr int64_t kChunk = 4096;     // elements per parallel work item
static_assert(kChunk % kGroup == 0);
constexpr uint64_t kM0 = 0xD2511F53u;  // Philox constants, as in rng.cpp
constexpr uint64_t kM1 = 0xCD9E8D57u;
constexpr uint64_t kW0 = 0x9E3779B9u;
constexpr uint64_t kW1 = 0xBB67AE85u;

// u[j] = rng_uniform(key, base + j) for j < kGroup, base a multiple of
// kGroup: word w of block base / 4 + b is value 32 w + b. The 32-bit Philox
// words live in 64-bit lanes so the 32x32->64 products vectorise.
inline void uniform_group(uint64_t key, uint64_t base, float* u) {
  constexpr uint64_t kLow = 0xFFFFFFFFu;
  uint64_t c0[kBlocks], c1[kBlocks], c2[kBlocks], c3[kBlocks];
  // The first block, base / 4, is a multiple of kBlocks, so the low counter
  // word cannot carry into the high one inside a group.
  const uint64_t first = base >> 2;
  const uint64_t lo = first & kLow, hi = first >> 32;
  for (int j = 0; j < kBlocks; ++j) {
    c0[j] = lo + static_cast<uint64_t>(j);
    c1[j] = hi;
    c2[j] = 0;
    c3[j] = 0;
  }
  uint64_t k0 = key & kLow, k1 = key >> 32;
  for (int round = 0; round < 10; ++round) {
#pragma omp simd
    for (int j = 0; j < kBlocks; ++j) {
      const uint64_t p0 = kM0 * c0[j];
      const uint64_t p1 = kM1 * c2[j];
      const uint64_t n0 = (p1 >> 32) ^ c1[j] ^ k0;
      const uint64_t n2 = (p0 >> 32) ^ c3[j] ^ k1;
      c1[j] = p1 & kLow;
      c3[j] = p0 & kLow;
      c0[j] = n0;
      c2[j] = n2;
    }
    k0 = (k0 + kW0) & kLow;
    k1 = (k1 + kW1) & kLow;
  }
  // 24 random bits -> [0, 1), exactly as rng.cpp's to_unit.
  constexpr float kUnit = 1.0f / 16777216.0f;
  const uint64_t* words[4] = {c0, c1, c2, c3};
  for (int w = 0; w < 4; ++w) {
    for (int j = 0; j < kBlocks; ++j) {
      u[w * kBlocks + j] =
          static_cast<float>(static_cast<int32_t>(words[w][j] >> 8)) * kUnit;
    }
  }
}

// dst_i = src_i * (keep_i ? scale : 0) for the mask indices [first,
// first + count), drawn in whole kGroup-aligned groups (a group that the
// span only partly covers is drawn whole and partly used).
void mask_span(
    float* dst,
    const float* src,
    uint64_t first,
    int64_t count,
    float p,
    float scale,
    uint64_t key) {
  const uint64_t end = first + static_cast<uint64_t>(count);
  float u[kGroup];
  for (uint64_t base = first - first % kGroup; base < end; base += kGroup) {
    uniform_group(key, base, u);
    if (base >= first && base + kGroup <= end) {  // fixed trip count
      const int64_t at = static_cast<int64_t>(base - first);
      for (int j = 0; j < kGroup; ++j) {
        dst[at + j] = u[j] >= p ? src[at + j] * scale : 0.0f;
      }
      continue;
    }
    const uint64_t lo = base > first ? base : first;
    const uint64_t hi = base + kGroup < end ? base + kGroup : end;
    for (uint64_t g = lo; g < hi; ++g) {
      const int64_t i = static_cast<int64_t>(g - first);
      dst[i] = u[g - base] >= p ? src[i] * scale : 0.0f;
    }
  }
}

// out_i = in_i * (keep_i ? scale : 0) for mask indices offset + i, in
// work items of kChunk mask indices aligned in the mask's index space.
void apply_mask(
    float* out,
    const float* in,
    int64_t n,
    float p,
    uint64_t key,
    uint64_t offset) {
  NDT_ASSERT(p >= 0.0f && p < 1.0f, "dropout p ", p, " outside [0, 1)");
  if (n == 0)
    return;
  const float scale = 1.0f / (1.0f - p);
  const uint64_t end = offset + static_cast<uint64_t>(n);
  const uint64_t first_chunk = offset / kChunk;
  const int64_t chunks =
      static_cast<int64_t>((end - 1) / kChunk - first_chunk) + 1;
  const bool threaded = n >= detail::kMinParallelWork;
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const uint64_t c0 = (first_chunk + static_cast<uint64_t>(ch)) * kChunk;
    const uint64_t g0 = c0 > offset ? c0 : offset;
    const uint64_t g1 = c0 + kChunk < end ? c0 + kChunk : end;
    const int64_t at = static_cast<int64_t>(g0 - offset);
    mask_span(
        out + at, in + at, g0, static_cast<int64_t>(g1 - g0), p, scale, key);
  }
}

// The same for rows of `cols` elements whose mask indices start `stride`
// apart.
void apply_mask_rows(
    float* out,
    const float* in,
    int64_t n,
    int64_t cols,
    int64_t stride,
    float p,
    uint64_t key,
    uint64_t offset) {
  NDT_ASSERT(p >= 0.0f && p < 1.0f, "dropout p ", p, " outside [0, 1)");
  NDT_ASSERT(cols > 0 && n % cols == 0 && stride >= cols);
  const float scale = 1.0f / (1.0f - p);
  const int64_t rows = n / cols;
  const bool threaded = n >= detail::kMinParallelWork;
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t r = 0; r < rows; ++r) {
    const uint64_t first = offset + static_cast<uint64_t>(r * stride);
    mask_span(out + r * cols, in + r * cols, first, cols, p, scale, key);
  }
}

void mask(
    float* out,
    const float* in,
    int64_t n,
    int64_t cols,
    int64_t row_stride,
    float p,
    uint64_t key,
    uint64_t offset) {
  if (row_stride > 0)
    apply_mask_rows(out, in, n, cols, row_stride, p, key, offset);
  else
    apply_mask(out, in, n, p, key, offset);
}

}  // namespace

void dropout_forward(
    Tensor& y,
    const Tensor& x,
    float p,
    uint64_t key,
    uint64_t offset,
    int64_t row_stride) {
  NDT_ASSERT(
      y.numel() == x.numel(),
      "dropout y ",
      shape_str(y.shape()),
      " x ",
      shape_str(x.shape()));
  mask(y.data(), x.data(), x.numel(), x.dim(-1), row_stride, p, key, offset);
}

void dropout_backward(
    Tensor& dx,
    const Tensor& dy,
    float p,
    uint64_t key,
    uint64_t offset,
    int64_t row_stride) {
  NDT_ASSERT(
      dx.numel() == dy.numel(),
      "dropout dx ",
      shape_str(dx.shape()),
      " dy ",
      shape_str(dy.shape()));
  mask(
      dx.data(), dy.data(), dy.numel(), dy.dim(-1), row_stride, p, key, offset);
}

}  // namespace ndt::ops
