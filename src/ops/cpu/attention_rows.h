// The row passes of attention (attention.cpp) between its head products:
// a softmax over the keys a query sees, and its gradient; and the masked
// dot product they and head_scores' last columns (attention_products.cpp)
// share. Internal to src/ops/cpu.
//
// A row holds T floats, of which the first `len` (the keys the query sees)
// are read. With AVX-512 each pass runs on 16-float vectors, the last one
// masked, and reduces its vectors in a fixed shuffle tree; elsewhere on the
// kLanes loops of simd.h. Either way a row's result depends only on its
// values and len, never on the thread count. Whole vectors past len are
// written while they stay inside the row (with the zeros the caller wants
// there), so no pass runs a scalar tail: in causal attention len differs
// from row to row, and the scalar tails and the serial sums over 32 lanes
// were where these passes spent their time (docs/performance.md,
// "Attention's row passes").
#pragma once

#include <cstdint>

#include "ops/cpu/simd.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace ndt::ops::detail {

// GCC 12's reduce and mask intrinsics start from an "undefined" register it
// then warns about (as in attention_products.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#if defined(__AVX512F__)
// Lanes [0, n) of a vector, n >= 0 (all 16 from n = 16 on).
inline __mmask16 first_lanes(int n) {
  return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
}

// exp_fast (simd.h) on 16 floats: the same clamp, reduction and
// polynomial, so the same values.
inline __m512 exp_fast16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.0f);
  const __m512 magic = _mm512_set1_ps(12582912.0f);
  // max(lo, x) and min(hi, .) return x where x is NaN.
  const __m512 xc = _mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_max_ps(lo, x));
  const __m512 n = _mm512_sub_ps(
      _mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), magic), magic);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(
      _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  const __m512i e = _mm512_slli_epi32(
      _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  const __m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ), y);
}

// row[j, j + 16) where it is before len, 0 elsewhere; nothing past len is
// read.
inline __m512 row_at(const float* row, int j, int len) {
  return _mm512_maskz_loadu_ps(first_lanes(len - j), row + j);
}

// Stores v's lanes [0, min(16, T - j)) at row + j: the whole vector while
// it stays inside the row.
inline void store_in_row(float* row, int j, int T, __m512 v) {
  if (j + 16 <= T)
    _mm512_storeu_ps(row + j, v);
  else
    _mm512_mask_storeu_ps(row + j, first_lanes(T - j), v);
}
#endif

// Sum of a[i] b[i] over i < n: with AVX-512 in 16 lanes (a masked last
// vector) reduced by a fixed shuffle tree; elsewhere dot_lanes.
inline float dot_row(const float* a, const float* b, int n) {
#if defined(__AVX512F__)
  __m512 s = _mm512_setzero_ps();
  for (int j = 0; j < n; j += 16)
    s = _mm512_fmadd_ps(row_at(a, j, n), row_at(b, j, n), s);
  return _mm512_reduce_add_ps(s);
#else
  return dot_lanes(a, b, n);
#endif
}

// row[0, len) <- softmax(row[0, len)), row[len, T) <- 0; 1 <= len <= T.
inline void softmax_row(float* row, int len, int T) {
#if defined(__AVX512F__)
  // NaNs are skipped by the max; they reach the row through the exp.
  __m512 mv = _mm512_set1_ps(row[0]);
  for (int j = 0; j < len; j += 16) {
    const __mmask16 k = first_lanes(len - j);
    mv = _mm512_mask_max_ps(mv, k, row_at(row, j, len), mv);
  }
  const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mv));
  __m512 sv = _mm512_setzero_ps();
  for (int j = 0; j < len; j += 16) {
    const __mmask16 k = first_lanes(len - j);
    const __m512 e = _mm512_maskz_mov_ps(
        k, exp_fast16(_mm512_sub_ps(row_at(row, j, len), m)));
    sv = _mm512_add_ps(sv, e);
    store_in_row(row, j, T, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sv));
  int j = 0;
  for (; j < len; j += 16) {
    const __mmask16 k = first_lanes(len - j);
    store_in_row(row, j, T, _mm512_maskz_mul_ps(k, row_at(row, j, len), inv));
  }
  for (; j < T; j += 16)
    store_in_row(row, j, T, _mm512_setzero_ps());
#else
  const float m = max_lanes(row, len);
  const float inv = 1.0f / exp_sub_sum(row, row, m, len);
  for (int j = 0; j < len; ++j)
    row[j] *= inv;
  for (int j = len; j < T; ++j)
    row[j] = 0.0f;
#endif
}

// The softmax gradient of one row: d[j] <- scale a[j] (d[j] - sum_i d[i]
// a[i]) for j < len (sums over i < len), d[j] <- 0 for j in [len, end);
// entries from end to T may be zeroed too. 1 <= len <= end <= T.
inline void softmax_grad_row(
    float* d, const float* a, int len, int end, int T, float scale) {
  const float sum = dot_row(d, a, len);
#if defined(__AVX512F__)
  const __m512 s = _mm512_set1_ps(sum);
  const __m512 sc = _mm512_set1_ps(scale);
  int j = 0;
  for (; j < len; j += 16) {
    const __mmask16 k = first_lanes(len - j);
    const __m512 av = _mm512_mul_ps(sc, row_at(a, j, len));
    store_in_row(
        d,
        j,
        T,
        _mm512_maskz_mul_ps(k, av, _mm512_sub_ps(row_at(d, j, len), s)));
  }
  for (; j < end; j += 16)
    store_in_row(d, j, T, _mm512_setzero_ps());
#else
  (void)T;
  for (int j = 0; j < len; ++j)
    d[j] = scale * a[j] * (d[j] - sum);
  for (int j = len; j < end; ++j)
    d[j] = 0.0f;
#endif
}

#pragma GCC diagnostic pop

}  // namespace ndt::ops::detail
