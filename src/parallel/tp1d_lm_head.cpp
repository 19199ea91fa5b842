#include "parallel/tp1d_lm_head.h"

#include <cmath>
#include <vector>

#include "base/check.h"
#include "ops/ops.h"
#include "parallel/tp1d_embedding.h"
#include "parallel/tp1d_norm.h"

namespace ndt {
namespace {

constexpr int64_t kMinParallelWork = 1 << 14;

Parameter vocab_projection(const LmHeadOptions& o, const ProcessGroup& tp) {
  Layout layout = vocab_row_layout(o.vocab, o.dim, tp);
  Parameter p(
      o.name + ".out.weight",
      layout.local_shape(),
      true,
      {Init::kNormal, o.init_std});
  p.layout = std::move(layout);
  return p;
}

// Note [Vocabulary-parallel cross-entropy]
// logits [N, V/tp] holds columns [v_begin, v_begin + V/tp) of the global
// [N, V] logits; targets int32 [N] are global ids. With m_n the global row
// max and z_n = sum over all V of exp(l - m_n) (each rank sums its columns,
// then all-reduce):
//   loss_n = log z_n - (l_{n, target} - m_n)    (as ops::cross_entropy)
//   p_{n, v} = exp(l_{n, v} - m_n) / z_n        (my columns only)
// Replaces logits by my block of probabilities, returns the summed loss
// (double, in row order) and adds the argmax == target count to `correct`:
// the argmax is the lowest index with the largest probability, as in the
// serial head, found with a max of the values and then of -index.
double vocab_parallel_cross_entropy(
    Tensor& logits,
    const Tensor& targets,
    int64_t v_begin,
    ProcessGroup& tp,
    int64_t& correct) {
  const int64_t N = logits.dim(0), V_local = logits.dim(1);
  const int64_t V = V_local * tp.size();
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
  tp.all_reduce(m.data(), N, ReduceOp::kMax);

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
  tp.all_reduce(zt.data(), 2 * N, ReduceOp::kSum);

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
  tp.all_reduce(best.data(), N, ReduceOp::kMax);
  for (int64_t n = 0; n < N; ++n) {
    if (lp[n * V_local + col_best[n]] != best[n])
      arg[n] = -static_cast<double>(V);  // not the argmax: loses the max
  }
  tp.all_reduce(arg.data(), N, ReduceOp::kMax);

  double total = 0;  // in row order: deterministic, as the serial kernel
  for (int64_t n = 0; n < N; ++n) {
    total += losses[n];
    correct += static_cast<int64_t>(-arg[n]) == t[n];
  }
  return total;
}

}  // namespace

VocabParallelLmHead::VocabParallelLmHead(
    const LmHeadOptions& options,
    ProcessGroup& tp,
    bool token_split,
    int64_t tokens_per_sample)
    : options_(options),
      tp_(tp),
      token_split_(token_split),
      V_local_(options.vocab / tp.size()),
      v_begin_(static_cast<int64_t>(tp.rank()) * (options.vocab / tp.size())),
      ln_(std::make_unique<LayerNorm>(options.name + ".ln", options.dim)),
      weight_(vocab_projection(options, tp)),
      copy_(tp),
      gather_(tp, tokens_per_sample, /*grad_partial=*/true) {
  if (token_split_)
    ln_ = std::make_unique<TpGradSum>(std::move(ln_), tp);
}

// x [B, T, C] or [N/tp, C] (token split), targets [B, T]. child(0): the
// LayerNorm, child(1): the copy / gather region. saved {h [N, C] (all
// tokens' LN output), probs [N, V/tp], targets [N]}; ints: x's shape.
void VocabParallelLmHead::forward(
    const Tensor& x, const Tensor& targets, Context& ctx, LossStats& stats) {
  const int64_t C = options_.dim;
  if (token_split_) {
    NDT_CHECK(
        x.ndim() == 2,
        ConfigError,
        "token-split LM head expects my tokens [N/tp, C], got ",
        shape_str(x.shape()));
  }
  Tensor h = ln_->forward(x, ctx.child(0));
  Tensor hall = token_split_ ? gather_.forward(h, ctx.child(1))
                             : copy_.forward(h, ctx.child(1));
  const int64_t N = hall.numel() / C;
  NDT_ASSERT(
      targets.numel() == N,
      "targets ",
      shape_str(targets.shape()),
      " for ",
      N,
      " tokens");
  Tensor h2 = hall.view({N, C});
  Tensor t = targets.view({N});
  Tensor probs({N, V_local_}, MemTag::kActs);  // logits, then probabilities
  Tensor none;
  ops::linear_forward(probs, h2, weight_.value, none);
  stats.loss_sum +=
      vocab_parallel_cross_entropy(probs, t, v_begin_, tp_, stats.correct);
  stats.count += N;
  ctx.saved = {h2, probs, t};
  ctx.ints = x.shape();
}

Tensor VocabParallelLmHead::backward(Context& ctx, float scale) {
  const Tensor& h2 = ctx.saved.at(0);
  Tensor dlogits = ctx.saved.at(1);  // in place over probs
  const Tensor& t = ctx.saved.at(2);
  const int64_t N = dlogits.dim(0), V_local = V_local_;
  // (softmax - onehot) * scale on my columns; onehot only on the owner.
  const int32_t* tg = t.data_i32();
  float* dp = dlogits.data();
#pragma omp parallel for schedule(static) if (N * V_local >= kMinParallelWork)
  for (int64_t n = 0; n < N; ++n) {
    float* row = dp + n * V_local;
    const int64_t col = tg[n] - v_begin_;
    const bool mine = col >= 0 && col < V_local;
    const float pt = mine ? row[col] : 0.0f;
    for (int64_t v = 0; v < V_local; ++v)
      row[v] *= scale;
    if (mine)
      row[col] = (pt - 1.0f) * scale;
  }
  // dh is this vocabulary shard's part of the input gradient: partial.
  Tensor dh({N, options_.dim}, MemTag::kActs);
  Tensor none;
  ops::linear_backward(dh, weight_.grad, none, dlogits, h2, weight_.value);
  const Shape x_shape = ctx.ints;
  ctx.saved.clear();
  Tensor dhx =
      token_split_
          ? gather_.backward(dh, ctx.child(1))               // reduce-scatter
          : copy_.backward(dh.view(x_shape), ctx.child(1));  // all-reduce
  return ln_->backward(dhx.view(x_shape), ctx.child(0));
}

void VocabParallelLmHead::collect_parameters(std::vector<Parameter*>& out) {
  ln_->collect_parameters(out);
  out.push_back(&weight_);
}

}  // namespace ndt
