// Bias add and the MLP activations (GELU tanh approximation, ReLU), plus the
// fused bias + GELU pair.
//
//   y, x, pre, dy, dx, dpre  [N, C] (leading dims flattened)
//   b, db                    [C]
// Activation grads (dx, dpre) are assigned; db is accumulated (+=).
//
// GELU uses 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = k (x + 0.044715 x^3),
// k = sqrt(2/pi): the same function as torch's approximate="tanh", but
// without the cancellation of 1 + tanh(u) for negative u, and with an exp
// that vectorises (detail::exp_fast).
#include <omp.h>

#include "base/check.h"
#include "ops/cpu/simd.h"
#include "ops/ops.h"

namespace ndt::ops {
namespace {

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

// sigmoid(2u). exp's argument is capped at 80 so s stays a normal float.
inline float gelu_sigmoid(float x) {
  float u = kGeluK * (x + kGeluA * x * x * x);
  float t = -2.0f * u;
  return 1.0f / (1.0f + detail::exp_fast(t < 80.0f ? t : 80.0f));
}

inline float gelu(float x) {
  return x * gelu_sigmoid(x);
}

// d gelu / dx = s + 2 x s (1 - s) u'.
inline float gelu_grad(float x) {
  float s = gelu_sigmoid(x);
  float du = kGeluK * (1.0f + 3.0f * kGeluA * x * x);
  return s + 2.0f * x * s * (1.0f - s) * du;
}

void check_same(const Tensor& a, const Tensor& b, const char* what) {
  NDT_ASSERT(
      a.numel() == b.numel(),
      what,
      ": ",
      shape_str(a.shape()),
      " vs ",
      shape_str(b.shape()));
}

}  // namespace

void bias_add_forward(Tensor& y, const Tensor& b) {
  const int64_t C = b.numel();
  NDT_ASSERT(
      y.dim(-1) == C,
      "bias_add y ",
      shape_str(y.shape()),
      " b ",
      shape_str(b.shape()));
  const int64_t N = y.numel() / C;
  float* yp = y.data();
  const float* bp = b.data();
  const bool threaded = N * C >= detail::kMinParallelWork;
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t n = 0; n < N; ++n) {
    float* row = yp + n * C;
    for (int64_t c = 0; c < C; ++c)
      row[c] += bp[c];
  }
}

void bias_add_backward(Tensor& db, const Tensor& dy) {
  const int64_t C = db.numel();
  NDT_ASSERT(
      dy.dim(-1) == C,
      "bias_add dy ",
      shape_str(dy.shape()),
      " db ",
      shape_str(db.shape()));
  const int64_t N = dy.numel() / C;
  const float* g = dy.data();
  float* dbp = db.data();
  const int64_t W = detail::column_block_width(C, omp_get_max_threads());
  const int64_t blocks = (C + W - 1) / W;
  const bool threaded = N * C >= detail::kMinParallelWork;
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * W;
    const int64_t w = C - c0 < W ? C - c0 : W;
    float acc[detail::kMaxColumnBlock] = {};
    for (int64_t n = 0; n < N; ++n) {
      const float* row = g + n * C + c0;
      for (int64_t j = 0; j < w; ++j)
        acc[j] += row[j];
    }
    for (int64_t j = 0; j < w; ++j)
      dbp[c0 + j] += acc[j];
  }
}

void gelu_forward(Tensor& y, const Tensor& x) {
  check_same(y, x, "gelu");
  const int64_t n = x.numel();
  const float* xp = x.data();
  float* yp = y.data();
  const bool threaded = n >= detail::kMinParallelWork;
#pragma omp parallel for simd schedule(static) if (threaded)
  for (int64_t i = 0; i < n; ++i)
    yp[i] = gelu(xp[i]);
}

void gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x) {
  check_same(dx, x, "gelu dx");
  check_same(dy, x, "gelu dy");
  const int64_t n = x.numel();
  const float* xp = x.data();
  const float* g = dy.data();
  float* dxp = dx.data();
  const bool threaded = n >= detail::kMinParallelWork;
#pragma omp parallel for simd schedule(static) if (threaded)
  for (int64_t i = 0; i < n; ++i)
    dxp[i] = g[i] * gelu_grad(xp[i]);
}

void bias_gelu_forward(Tensor& y, Tensor& pre, const Tensor& b) {
  const int64_t C = b.numel();
  NDT_ASSERT(
      pre.dim(-1) == C,
      "bias_gelu pre ",
      shape_str(pre.shape()),
      " b ",
      shape_str(b.shape()));
  check_same(y, pre, "bias_gelu y");
  const int64_t N = pre.numel() / C;
  const float* bp = b.data();
  float* pp = pre.data();
  float* yp = y.data();
  const bool threaded = N * C >= detail::kMinParallelWork;
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t n = 0; n < N; ++n) {
    float* prow = pp + n * C;
    float* yrow = yp + n * C;
    for (int64_t c = 0; c < C; ++c) {
      float v = prow[c] + bp[c];
      prow[c] = v;
      yrow[c] = gelu(v);
    }
  }
}

void bias_gelu_backward(
    Tensor& dpre, Tensor& db, const Tensor& dy, const Tensor& pre) {
  check_same(dpre, pre, "bias_gelu dpre");
  check_same(dy, pre, "bias_gelu dy");
  const int64_t C = pre.dim(-1);
  const int64_t N = pre.numel() / C;
  const float* pp = pre.data();
  const float* g = dy.data();
  float* dp = dpre.data();
  if (!db.defined()) {
    const int64_t n = pre.numel();
    const bool threaded = n >= detail::kMinParallelWork;
#pragma omp parallel for simd schedule(static) if (threaded)
    for (int64_t i = 0; i < n; ++i)
      dp[i] = g[i] * gelu_grad(pp[i]);
    return;
  }
  NDT_ASSERT(db.numel() == C, "bias_gelu db ", shape_str(db.shape()));
  // One pass: each thread owns a stripe of columns, writes dpre there and
  // sums it over rows in row order (deterministic for any thread count).
  float* dbp = db.data();
  const int64_t W = detail::column_block_width(C, omp_get_max_threads());
  const int64_t blocks = (C + W - 1) / W;
  const bool threaded = N * C >= detail::kMinParallelWork;
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * W;
    const int64_t w = C - c0 < W ? C - c0 : W;
    float acc[detail::kMaxColumnBlock] = {};
    for (int64_t n = 0; n < N; ++n) {
      const int64_t off = n * C + c0;
      for (int64_t j = 0; j < w; ++j) {
        float d = g[off + j] * gelu_grad(pp[off + j]);
        dp[off + j] = d;
        acc[j] += d;
      }
    }
    for (int64_t j = 0; j < w; ++j)
      dbp[c0 + j] += acc[j];
  }
}

void relu_forward(Tensor& y, const Tensor& x) {
  check_same(y, x, "relu");
  const int64_t n = x.numel();
  const float* xp = x.data();
  float* yp = y.data();
  const bool threaded = n >= detail::kMinParallelWork;
#pragma omp parallel for simd schedule(static) if (threaded)
  for (int64_t i = 0; i < n; ++i)
    yp[i] = xp[i] < 0.0f ? 0.0f : xp[i];  // NaN passes
}

void relu_backward(Tensor& dx, const Tensor& dy, const Tensor& y) {
  check_same(dx, y, "relu dx");
  check_same(dy, y, "relu dy");
  const int64_t n = y.numel();
  const float* yp = y.data();
  const float* g = dy.data();
  float* dxp = dx.data();
  const bool threaded = n >= detail::kMinParallelWork;
#pragma omp parallel for simd schedule(static) if (threaded)
  for (int64_t i = 0; i < n; ++i)
    dxp[i] = yp[i] > 0.0f ? g[i] : 0.0f;
}

}  // namespace ndt::ops
