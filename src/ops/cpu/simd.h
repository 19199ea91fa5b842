// Helpers shared by the CPU kernels, written so that GCC/Clang turn them
// into SIMD code at -O3 without -ffast-math: a polynomial fp32 exp, and row
// reductions split over kLanes independent accumulators (plain loops would
// stay scalar, since reassociating a float sum changes its result). The
// exp's range clamp vectorises only with -fno-trapping-math, which
// CMakeLists.txt sets for every target.
//
// Internal to src/ops/cpu; not part of the ops contract. The lane split is
// fixed, so every result here is deterministic and independent of threads.
#pragma once

#include <bit>
#include <cstdint>

namespace ndt::ops::detail {

// Accumulators per reduction: two AVX-512 (or four AVX2) registers, enough
// to hide the add latency of one dependency chain.
constexpr int kLanes = 32;

// Below this many elements an `omp parallel` fork/join (~1-2 us) costs more
// than the loop it would split; used in `if()` clauses. Row results do not
// depend on the thread count, so this changes speed only.
constexpr int64_t kMinParallelWork = 1 << 14;

// Column reductions (bias grads, embedding scatter) are split over blocks
// of columns, each summed over rows in row order, so their results do not
// depend on the block width or the thread count. Widest block: stack
// accumulators of this many floats.
constexpr int64_t kMaxColumnBlock = 256;

// Column block width giving each of `threads` threads about one block.
inline int64_t column_block_width(int64_t C, int threads) {
  int64_t w = (C + threads - 1) / threads;
  w = (w + 15) / 16 * 16;
  return w < 16 ? 16 : (w > kMaxColumnBlock ? kMaxColumnBlock : w);
}

// exp(x) in fp32 with the Cephes expf polynomial and range reduction:
// within 1 ulp of the correctly rounded result on [-87, 88] (checked for
// every float there). Returns 0 below -87 so results never go subnormal;
// saturates at exp(88). NaN propagates.
inline float exp_fast(float x) {
  float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  // n = round(x / ln 2) with the 1.5 * 2^23 trick (round to nearest even).
  float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return x < -87.0f ? 0.0f : p * scale;
}

// Sum of x[0..n).
inline float sum_lanes(const float* x, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j)
      acc[j] += x[i + j];
  }
  for (int j = 0; i + j < n; ++j)
    acc[j] += x[i + j];
  float s = 0;
  for (int j = 0; j < kLanes; ++j)
    s += acc[j];
  return s;
}

// Sum of a[i] * b[i].
inline float dot_lanes(const float* a, const float* b, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j)
      acc[j] += a[i + j] * b[i + j];
  }
  for (int j = 0; i + j < n; ++j)
    acc[j] += a[i + j] * b[i + j];
  float s = 0;
  for (int j = 0; j < kLanes; ++j)
    s += acc[j];
  return s;
}

// Sum of (x[i] - m)^2.
inline float sq_dev_lanes(const float* x, float m, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      float d = x[i + j] - m;
      acc[j] += d * d;
    }
  }
  for (int j = 0; i + j < n; ++j) {
    float d = x[i + j] - m;
    acc[j] += d * d;
  }
  float s = 0;
  for (int j = 0; j < kLanes; ++j)
    s += acc[j];
  return s;
}

// Max of x[0..n), n >= 1. NaNs are skipped (they reach the result through
// the exp that follows every use here).
inline float max_lanes(const float* x, int64_t n) {
  float acc[kLanes];
  for (int j = 0; j < kLanes; ++j)
    acc[j] = x[0];
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
    }
  }
  for (int j = 0; i + j < n; ++j) {
    acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
  }
  float m = acc[0];
  for (int j = 1; j < kLanes; ++j)
    m = acc[j] > m ? acc[j] : m;
  return m;
}

// y[i] = exp(x[i] - m) for i < n; returns the sum of y. y may alias x.
inline float exp_sub_sum(float* y, const float* x, float m, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      float e = exp_fast(x[i + j] - m);
      y[i + j] = e;
      acc[j] += e;
    }
  }
  for (int j = 0; i + j < n; ++j) {
    float e = exp_fast(x[i + j] - m);
    y[i + j] = e;
    acc[j] += e;
  }
  float s = 0;
  for (int j = 0; j < kLanes; ++j)
    s += acc[j];
  return s;
}

}  // namespace ndt::ops::detail
