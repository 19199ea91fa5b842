// Dropout with a mask recomputed from the counter RNG instead of stored.
//
//   x, y, dy, dx  any shape, same numel; y may alias x, dx may alias dy.
// keep_i = rng_uniform(key, offset + i) >= p; y_i = keep_i ? x_i * (1 / (1 -
// p)) : 0. With a row stride, x is a column block [rows, cols] of a wider
// tensor and element (r, c) takes mask index offset + r * stride + c. The
// backward regenerates the same mask from (key, i), so nothing is saved.
//
// rng_uniform is a scalar call per element (~10 Philox rounds); here the
// same Philox4x32-10 is evaluated for 32 indices at once in plain loops
// that the compiler vectorises. It must stay bit-identical to rng.cpp (the
// dropout test compares every element against rng_uniform).
#include <cstdint>

#include "base/check.h"
#include "ops/cpu/simd.h"
#include "ops/ops.h"

namespace ndt::ops {
namespace {

constexpr int kGroup = 32;        // measured ~3x faster than 16 (full vectors)
constexpr int64_t kChunk = 4096;  // elements per parallel work item
static_assert(kChunk % kGroup == 0);
constexpr uint64_t kM0 = 0xD2511F53u;  // Philox constants, as in rng.cpp
constexpr uint64_t kM1 = 0xCD9E8D57u;
constexpr uint64_t kW0 = 0x9E3779B9u;
constexpr uint64_t kW1 = 0xBB67AE85u;

// u[j] = rng_uniform(key, base + j) for j < kGroup (stream 0). The 32-bit
// Philox words live in 64-bit lanes so the 32x32->64 products vectorise.
inline void uniform_group(uint64_t key, uint64_t base, float* u) {
  constexpr uint64_t kLow = 0xFFFFFFFFu;
  uint64_t c0[kGroup], c1[kGroup], c2[kGroup], c3[kGroup];
  // base is a multiple of kGroup (groups start at chunk starts, and
  // kChunk % kGroup == 0), so the low counter word cannot carry into the
  // high one inside a group.
  const uint64_t lo = base & kLow, hi = base >> 32;
  for (int j = 0; j < kGroup; ++j) {
    c0[j] = lo + static_cast<uint64_t>(j);
    c1[j] = hi;
    c2[j] = 0;
    c3[j] = 0;
  }
  uint64_t k0 = key & kLow, k1 = key >> 32;
  for (int round = 0; round < 10; ++round) {
#pragma omp simd
    for (int j = 0; j < kGroup; ++j) {
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
  for (int j = 0; j < kGroup; ++j) {
    // 24 random bits -> [0, 1), exactly as rng.cpp's to_unit.
    u[j] = static_cast<float>(static_cast<int32_t>(c0[j] >> 8)) *
           (1.0f / 16777216.0f);
  }
}

// out_i = in_i * (keep_i ? scale : 0) over all elements.
void apply_mask(
    float* out,
    const float* in,
    int64_t n,
    float p,
    uint64_t key,
    uint64_t offset) {
  NDT_ASSERT(p >= 0.0f && p < 1.0f, "dropout p ", p, " outside [0, 1)");
  const float scale = 1.0f / (1.0f - p);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const bool threaded = n >= detail::kMinParallelWork;
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t end = (ch + 1) * kChunk < n ? (ch + 1) * kChunk : n;
    float u[kGroup];
    int64_t i = ch * kChunk;
    for (; i + kGroup <= end; i += kGroup) {  // fixed trip count: vectorised
      uniform_group(key, offset + static_cast<uint64_t>(i), u);
      for (int j = 0; j < kGroup; ++j) {
        out[i + j] = u[j] >= p ? in[i + j] * scale : 0.0f;
      }
    }
    if (i < end) {
      uniform_group(key, offset + static_cast<uint64_t>(i), u);
      for (int64_t j = 0; i + j < end; ++j) {
        out[i + j] = u[j] >= p ? in[i + j] * scale : 0.0f;
      }
    }
  }
}

// The same for rows of `cols` elements whose mask indices start `stride`
// apart. Each row is drawn in kGroup-aligned groups of mask indices (the
// low counter word never carries inside a group), using the part of each
// group that falls in the row.
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
    const uint64_t end = first + static_cast<uint64_t>(cols);
    const float* src = in + r * cols;
    float* dst = out + r * cols;
    float u[kGroup];
    for (uint64_t base = first - first % kGroup; base < end; base += kGroup) {
      uniform_group(key, base, u);
      const uint64_t lo = base > first ? base : first;
      const uint64_t hi = base + kGroup < end ? base + kGroup : end;
      for (uint64_t g = lo; g < hi; ++g) {
        const int64_t i = static_cast<int64_t>(g - first);
        dst[i] = u[g - base] >= p ? src[i] * scale : 0.0f;
      }
    }
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
