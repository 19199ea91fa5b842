// Softmax cross-entropy over classes, fused: one kernel produces the
// probabilities and the per-row losses, and backward is a single pass.
//
//   logits, probs, dlogits  [N, V] (leading dims flattened)
//   targets                 int32 [N], each in [0, V)
//   losses                  [N], -log softmax(logits)[target]
// dlogits is assigned and may alias probs.
#include <cmath>

#include "base/check.h"
#include "ops/cpu/simd.h"
#include "ops/ops.h"

namespace ndt::ops {
// A target outside [0, V) comes from the data, so it is a DataError,
// checked before any thread starts (exceptions cannot leave an OpenMP
// region).
void cross_entropy_check_targets(const Tensor& targets, int64_t V) {
  const int32_t* t = targets.data_i32();
  for (int64_t n = 0; n < targets.numel(); ++n) {
    NDT_CHECK(
        t[n] >= 0 && t[n] < V,
        DataError,
        "cross_entropy: target ",
        t[n],
        " at index ",
        n,
        " is outside the class range [0, ",
        V,
        ")");
  }
}

double cross_entropy_forward(
    Tensor& losses,
    Tensor& probs,
    const Tensor& logits,
    const Tensor& targets) {
  const int64_t V = logits.dim(-1), N = logits.numel() / V;
  NDT_ASSERT(
      probs.numel() == logits.numel(),
      "cross_entropy probs ",
      shape_str(probs.shape()),
      " logits ",
      shape_str(logits.shape()));
  NDT_ASSERT(
      losses.numel() == N && targets.numel() == N,
      "cross_entropy losses ",
      shape_str(losses.shape()),
      " targets ",
      shape_str(targets.shape()),
      " for ",
      N,
      " rows");
  const int32_t* tp = targets.data_i32();
  cross_entropy_check_targets(targets, V);
  const float* xp = logits.data();
  float* pp = probs.data();
  float* lp = losses.data();
  const bool threaded = N * V >= detail::kMinParallelWork;
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = xp + n * V;
    float* pr = pp + n * V;
    const float m = detail::max_lanes(xr, V);
    const float z = detail::exp_sub_sum(pr, xr, m, V);
    const float inv = 1.0f / z;
    for (int64_t v = 0; v < V; ++v)
      pr[v] *= inv;
    // -log p_t = log z - (x_t - m): exact even when p_t underflows.
    lp[n] = static_cast<float>(
        std::log(static_cast<double>(z)) -
        (static_cast<double>(xr[tp[n]]) - m));
  }
  double total = 0.0;  // in row order: deterministic
  for (int64_t n = 0; n < N; ++n)
    total += lp[n];
  return total;
}

void cross_entropy_backward(
    Tensor& dlogits, const Tensor& probs, const Tensor& targets, float scale) {
  const int64_t V = probs.dim(-1), N = probs.numel() / V;
  NDT_ASSERT(
      dlogits.numel() == probs.numel() && targets.numel() == N,
      "cross_entropy_backward dlogits ",
      shape_str(dlogits.shape()),
      " probs ",
      shape_str(probs.shape()),
      " targets ",
      shape_str(targets.shape()));
  const int32_t* tp = targets.data_i32();
  cross_entropy_check_targets(targets, V);
  const float* pp = probs.data();
  float* dp = dlogits.data();
  const bool threaded = N * V >= detail::kMinParallelWork;
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t n = 0; n < N; ++n) {
    const float* pr = pp + n * V;
    float* dr = dp + n * V;
    const float pt = pr[tp[n]];  // read before dr (maybe pr) is written
    for (int64_t v = 0; v < V; ++v)
      dr[v] = pr[v] * scale;
    dr[tp[n]] = (pt - 1.0f) * scale;
  }
}

}  // namespace ndt::ops
