#include "parallel/vocab_parallel_ce.h"

#include <cmath>
#include <vector>

#include "base/check.h"
#include "ops/ops.h"

namespace ndt {
namespace {

constexpr int64_t kMinParallelWork = 1 << 14;

}  // namespace

void vocab_parallel_cross_entropy(
    Tensor& logits,
    const Tensor& target_ids,
    int64_t v_begin,
    ProcessGroup& group,
    LossStats& stats) {
  const int64_t N = logits.dim(0), V_local = logits.dim(1);
  const int64_t V = V_local * group.size();
  NDT_ASSERT(
      target_ids.numel() == N,
      "targets ",
      shape_str(target_ids.shape()),
      " for ",
      N,
      " rows of logits");
  const Tensor targets = target_ids.view({N});
  ops::cross_entropy_check_targets(targets, V);
  const int32_t* t = targets.data_i32();
  float* lp = logits.data();
  const bool threaded = N * V_local >= kMinParallelWork;

  std::vector<float> m(N);
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t n = 0; n < N; ++n) {
    const float* row = lp + n * V_local;
    float best = row[0];
    for (int64_t v = 1; v < V_local; ++v)
      best = row[v] > best ? row[v] : best;
    m[n] = best;
  }
  group.all_reduce(m.data(), N, ReduceOp::kMax);

  // [0, N): sum of exp; [N, 2N): the target's logit (0 off its owner).
  std::vector<double> zt(2 * N);
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t n = 0; n < N; ++n) {
    float* row = lp + n * V_local;
    const int64_t col = t[n] - v_begin;
    zt[N + n] = col >= 0 && col < V_local ? double(row[col]) : 0.0;
    double z = 0;
    for (int64_t v = 0; v < V_local; ++v) {
      const float e = std::exp(row[v] - m[n]);
      row[v] = e;
      z += e;
    }
    zt[n] = z;
  }
  group.all_reduce(zt.data(), 2 * N, ReduceOp::kSum);

  std::vector<float> losses(N), best(N);
  std::vector<int64_t> col_best(N);  // my first column of largest p
  std::vector<double> arg(N);        // -(its global index), for a max
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t n = 0; n < N; ++n) {
    float* row = lp + n * V_local;
    const double z = zt[n];
    const float inv = static_cast<float>(1.0 / z);
    int64_t b = 0;
    for (int64_t v = 0; v < V_local; ++v) {
      row[v] *= inv;
      if (row[v] > row[b])
        b = v;
    }
    losses[n] = static_cast<float>(std::log(z) - (zt[N + n] - m[n]));
    best[n] = row[b];
    col_best[n] = b;
    arg[n] = -static_cast<double>(v_begin + b);
  }
  group.all_reduce(best.data(), N, ReduceOp::kMax);
  for (int64_t n = 0; n < N; ++n) {
    if (lp[n * V_local + col_best[n]] != best[n])
      arg[n] = -static_cast<double>(V);  // not the argmax: loses the max
  }
  group.all_reduce(arg.data(), N, ReduceOp::kMax);

  double total = 0;  // in row order: deterministic, as the serial kernel
  for (int64_t n = 0; n < N; ++n) {
    total += losses[n];
    stats.correct += static_cast<int64_t>(-arg[n]) == t[n];
  }
  stats.loss_sum += total;
  stats.count += N;
}

void vocab_parallel_cross_entropy_backward(
    Tensor& probs, const Tensor& targets, int64_t v_begin, float scale) {
  const int64_t N = probs.dim(0), V_local = probs.dim(1);
  const int32_t* tg = targets.data_i32();
  float* dp = probs.data();
#pragma omp parallel for schedule(static) if (N * V_local >= kMinParallelWork)
  for (int64_t n = 0; n < N; ++n) {
    float* row = dp + n * V_local;
    const int64_t col = tg[n] - v_begin;
    const bool mine = col >= 0 && col < V_local;
    const float pt = mine ? row[col] : 0.0f;
    for (int64_t v = 0; v < V_local; ++v)
      row[v] *= scale;
    if (mine)
      row[col] = (pt - 1.0f) * scale;
  }
}

}  // namespace ndt
