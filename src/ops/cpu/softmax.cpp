// Row softmax over the last dim.
//
//   x, y, dy, dx  [N, C] (leading dims flattened); dx assigned.
// y may alias x, dx may alias dy.
#include "base/check.h"
#include "ops/cpu/simd.h"
#include "ops/ops.h"

namespace ndt::ops {

void softmax_forward(Tensor& y, const Tensor& x) {
  NDT_ASSERT(
      y.numel() == x.numel(),
      "softmax y ",
      shape_str(y.shape()),
      " x ",
      shape_str(x.shape()));
  const int64_t C = x.dim(-1), N = x.numel() / C;
  if (C == 0)
    return;
  const float* xp = x.data();
  float* yp = y.data();
  const bool threaded = N * C >= detail::kMinParallelWork;
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = xp + n * C;
    float* yr = yp + n * C;
    const float m = detail::max_lanes(xr, C);
    const float inv = 1.0f / detail::exp_sub_sum(yr, xr, m, C);
    for (int64_t c = 0; c < C; ++c)
      yr[c] *= inv;
  }
}

void softmax_backward(Tensor& dx, const Tensor& dy, const Tensor& y) {
  NDT_ASSERT(
      dx.numel() == y.numel() && dy.numel() == y.numel(),
      "softmax_backward dx ",
      shape_str(dx.shape()),
      " dy ",
      shape_str(dy.shape()),
      " y ",
      shape_str(y.shape()));
  const int64_t C = y.dim(-1), N = y.numel() / C;
  const float* yp = y.data();
  const float* g = dy.data();
  float* dxp = dx.data();
  // dx = y (dy - sum(dy y)).
  const bool threaded = N * C >= detail::kMinParallelWork;
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t n = 0; n < N; ++n) {
    const float* yr = yp + n * C;
    const float* gr = g + n * C;
    float* dr = dxp + n * C;
    const float s = detail::dot_lanes(gr, yr, C);
    for (int64_t c = 0; c < C; ++c)
      dr[c] = yr[c] * (gr[c] - s);
  }
}

}  // namespace ndt::ops
