// Mean over tokens (the ViT head's pooling).
//
//   x, dx  [B, T, C];  y, dy  [B, C]
// dx is assigned (dy / T broadcast over T).
#include <omp.h>

#include "base/check.h"
#include "ops/cpu/simd.h"
#include "ops/ops.h"

namespace ndt::ops {

void mean_tokens_forward(Tensor& y, const Tensor& x) {
  NDT_ASSERT(x.ndim() == 3, "mean_tokens x ", shape_str(x.shape()));
  const int64_t B = x.dim(0), T = x.dim(1), C = x.dim(2);
  NDT_ASSERT(
      y.numel() == B * C,
      "mean_tokens y ",
      shape_str(y.shape()),
      " for x ",
      shape_str(x.shape()));
  const float* xp = x.data();
  float* yp = y.data();
  const float fT = static_cast<float>(T);
  // Parallel over (batch, column stripe); each column sums over t in order.
  const int64_t W = detail::column_block_width(C, omp_get_max_threads());
  const int64_t blocks = (C + W - 1) / W;
  const bool threaded = x.numel() >= detail::kMinParallelWork;
#pragma omp parallel for collapse(2) schedule(static) if (threaded)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t c0 = blk * W;
      const int64_t w = C - c0 < W ? C - c0 : W;
      float acc[detail::kMaxColumnBlock] = {};
      for (int64_t t = 0; t < T; ++t) {
        const float* row = xp + (b * T + t) * C + c0;
        for (int64_t j = 0; j < w; ++j)
          acc[j] += row[j];
      }
      for (int64_t j = 0; j < w; ++j)
        yp[b * C + c0 + j] = acc[j] / fT;
    }
  }
}

void mean_tokens_backward(Tensor& dx, const Tensor& dy) {
  NDT_ASSERT(dx.ndim() == 3, "mean_tokens dx ", shape_str(dx.shape()));
  const int64_t B = dx.dim(0), T = dx.dim(1), C = dx.dim(2);
  NDT_ASSERT(
      dy.numel() == B * C,
      "mean_tokens dy ",
      shape_str(dy.shape()),
      " for dx ",
      shape_str(dx.shape()));
  const float* g = dy.data();
  float* dxp = dx.data();
  const float fT = static_cast<float>(T);
  const bool threaded = dx.numel() >= detail::kMinParallelWork;
#pragma omp parallel for collapse(2) schedule(static) if (threaded)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      float* row = dxp + (b * T + t) * C;
      const float* src = g + b * C;
      for (int64_t c = 0; c < C; ++c)
        row[c] = src[c] / fT;
    }
  }
}

}  // namespace ndt::ops
