// LayerNorm whose rows are split across ranks (2D tensor parallelism,
// ALGORITHMS.md 2.1, LayerNorm2D): each rank holds a block of columns of
// every row; the caller sums the per-row partial statistics over the ranks
// that hold the rest of each row, in double precision.
//
//   x, y, dy, dx  [N, Cl]  my columns of N rows of C (global) columns
//   w, b, dw, db  [Cl]     my columns of the affine parameters
//   mean, rstd    [N]      saved for backward
//   sums          [N, 2]   doubles: partial, then summed by the caller
// dx is assigned; dw, db are accumulated (+=). Variance = E[x^2] - E[x]^2
// (biased, like torch), from double sums.
#include <cmath>

#include "base/check.h"
#include "ops/ops.h"

namespace ndt::ops {

void layernorm_split_stats(double* sums, const Tensor& x) {
  const int64_t C = x.dim(-1), N = x.numel() / C;
  const float* px = x.data();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    double s = 0, s2 = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double v = px[n * C + c];
      s += v;
      s2 += v * v;
    }
    sums[2 * n] = s;
    sums[2 * n + 1] = s2;
  }
}

void layernorm_split_forward(
    Tensor& y,
    Tensor& mean,
    Tensor& rstd,
    const Tensor& x,
    const double* sums,
    int64_t C_global,
    const Tensor& w,
    const Tensor& b,
    float eps) {
  const int64_t C = x.dim(-1), N = x.numel() / C;
  NDT_ASSERT(y.numel() == x.numel() && w.numel() == C && b.numel() == C);
  NDT_ASSERT(mean.numel() == N && rstd.numel() == N);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const double m = sums[2 * n] / double(C_global);
    const double var =
        std::max(0.0, sums[2 * n + 1] / double(C_global) - m * m);
    const float s = static_cast<float>(1.0 / std::sqrt(var + eps));
    const float mf = static_cast<float>(m);
    mean.data()[n] = mf;
    rstd.data()[n] = s;
    const float* px = x.data() + n * C;
    float* py = y.data() + n * C;
    for (int64_t c = 0; c < C; ++c)
      py[c] = (px[c] - mf) * s * w.data()[c] + b.data()[c];
  }
}

void layernorm_split_grad_stats(
    double* sums,
    const Tensor& dy,
    const Tensor& x,
    const Tensor& w,
    const Tensor& mean,
    const Tensor& rstd) {
  const int64_t C = x.dim(-1), N = x.numel() / C;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float m = mean.data()[n], s = rstd.data()[n];
    double g1 = 0, g2 = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double g = double(dy.data()[n * C + c]) * w.data()[c];
      g1 += g;
      g2 += g * ((x.data()[n * C + c] - m) * s);
    }
    sums[2 * n] = g1;
    sums[2 * n + 1] = g2;
  }
}

void layernorm_split_backward(
    Tensor& dx,
    Tensor& dw,
    Tensor& db,
    const Tensor& dy,
    const Tensor& x,
    const Tensor& w,
    const Tensor& mean,
    const Tensor& rstd,
    const double* sums,
    int64_t C_global) {
  const int64_t C = x.dim(-1), N = x.numel() / C;
  NDT_ASSERT(dx.numel() == x.numel() && dw.numel() == C && db.numel() == C);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float m = mean.data()[n], s = rstd.data()[n];
    const float g1 = static_cast<float>(sums[2 * n] / double(C_global));
    const float g2 = static_cast<float>(sums[2 * n + 1] / double(C_global));
    for (int64_t c = 0; c < C; ++c) {
      const float xhat = (x.data()[n * C + c] - m) * s;
      const float g = dy.data()[n * C + c] * w.data()[c];
      dx.data()[n * C + c] = s * (g - g1 - xhat * g2);
    }
  }
  // Parameter gradients: over rows, column by column (no write races).
  for (int64_t n = 0; n < N; ++n) {
    const float m = mean.data()[n], s = rstd.data()[n];
    for (int64_t c = 0; c < C; ++c) {
      const float d = dy.data()[n * C + c];
      dw.data()[c] += d * ((x.data()[n * C + c] - m) * s);
      db.data()[c] += d;
    }
  }
}

}  // namespace ndt::ops
