// Bias add and the MLP activations (GELU tanh approximation, ReLU), plus the
// fused bias + GELU pair.
//
//   y, x, pre, slope, dy, dx, dpre  [N, C] (leading dims flattened)
//   b, db                    [C]
// Activation grads (dx, dpre) are assigned; db is accumulated (+=).
//
// GELU uses 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = k (x + 0.044715 x^3),
// k = sqrt(2/pi): the same function as torch's approximate="tanh", but
// without the cancellation of 1 + tanh(u) for negative u, and with an exp
// that vectorises (detail::exp_fast).
#include <algorithm>
#include <vector>

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

// d gelu / dx = s + 2 x s (1 - s) u', given s = gelu_sigmoid(x).
inline float gelu_slope(float x, float s) {
  float du = kGeluK * (1.0f + 3.0f * kGeluA * x * x);
  return s + 2.0f * x * s * (1.0f - s) * du;
}

inline float gelu_grad(float x) {
  return gelu_slope(x, gelu_sigmoid(x));
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

// Bias gradients (column sums of an [N, C] gradient) go over fixed chunks
// of kSumRows rows: each chunk sums its rows in order into a [C] partial of
// its own, and the partials are then added in chunk order. The chunks
// depend only on N, so results do not depend on the thread count, and the
// threads stream whole rows, split evenly.
constexpr int64_t kSumRows = 64;

// Calls row(n, acc) for every row n, acc being its chunk's partial (zeroed
// first), then adds the partials into db.
template <class RowFn>
void sum_rows_by_chunks(float* db, int64_t N, int64_t C, RowFn row) {
  const int64_t chunks = (N + kSumRows - 1) / kSumRows;
  // The calling thread's buffer, grown only: steady state allocates nothing.
  thread_local std::vector<float> partials;
  if (partials.size() < static_cast<size_t>(chunks * C))
    partials.resize(static_cast<size_t>(chunks * C));
  float* part = partials.data();
  const bool threaded = N * C >= detail::kMinParallelWork;
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    float* acc = part + ch * C;
    for (int64_t c = 0; c < C; ++c)
      acc[c] = 0.0f;
    const int64_t n1 = std::min(N, (ch + 1) * kSumRows);
    for (int64_t n = ch * kSumRows; n < n1; ++n)
      row(n, acc);
  }
  const bool threaded_sum = chunks * C >= detail::kMinParallelWork;
#pragma omp parallel for simd schedule(static) if (threaded_sum)
  for (int64_t c = 0; c < C; ++c) {
    float s = 0.0f;
    for (int64_t ch = 0; ch < chunks; ++ch)
      s += part[ch * C + c];
    db[c] += s;
  }
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
  sum_rows_by_chunks(db.data(), N, C, [&](int64_t n, float* acc) {
    const float* row = g + n * C;
    for (int64_t c = 0; c < C; ++c)
      acc[c] += row[c];
  });
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
      const float v = prow[c] + bp[c];
      const float sig = gelu_sigmoid(v);
      yrow[c] = v * sig;
      prow[c] = gelu_slope(v, sig);
    }
  }
}

void bias_gelu_backward(
    Tensor& dpre, Tensor& db, const Tensor& dy, const Tensor& slope) {
  check_same(dpre, slope, "bias_gelu dpre");
  check_same(dy, slope, "bias_gelu dy");
  const int64_t C = slope.dim(-1);
  const int64_t N = slope.numel() / C;
  const float* sp = slope.data();
  const float* g = dy.data();
  float* dp = dpre.data();
  if (!db.defined()) {
    const int64_t n = slope.numel();
    const bool threaded = n >= detail::kMinParallelWork;
#pragma omp parallel for simd schedule(static) if (threaded)
    for (int64_t i = 0; i < n; ++i)
      dp[i] = g[i] * sp[i];
    return;
  }
  NDT_ASSERT(db.numel() == C, "bias_gelu db ", shape_str(db.shape()));
  // One pass: dpre of each row, summed into its chunk's partial of db.
  sum_rows_by_chunks(db.data(), N, C, [&](int64_t n, float* acc) {
    const float* srow = sp + n * C;
    const float* grow = g + n * C;
    float* drow = dp + n * C;
    for (int64_t c = 0; c < C; ++c) {
      const float d = grow[c] * srow[c];
      drow[c] = d;
      acc[c] += d;
    }
  });
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
