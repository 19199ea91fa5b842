#include "parallel/tp1d_lm_head.h"

#include "base/check.h"
#include "ops/ops.h"
#include "parallel/group_grad_sum.h"
#include "parallel/tp1d_embedding.h"
#include "parallel/vocab_parallel_ce.h"

namespace ndt {
namespace {

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
    ln_ = std::make_unique<GroupGradSum>(
        std::move(ln_), tp, Fault::kTpSeqNormGrad);
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
  Tensor h2 = hall.view({N, C});
  Tensor probs({N, V_local_}, MemTag::kActs);  // logits, then probabilities
  Tensor none;
  ops::linear_forward(probs, h2, weight_.value, none);
  vocab_parallel_cross_entropy(probs, targets, v_begin_, tp_, stats);
  ctx.saved = {h2, probs, targets.view({N})};
  ctx.ints = x.shape();
}

Tensor VocabParallelLmHead::backward(Context& ctx, float scale) {
  const Tensor& h2 = ctx.saved.at(0);
  Tensor dlogits = ctx.saved.at(1);  // in place over probs
  const Tensor& t = ctx.saved.at(2);
  const int64_t N = dlogits.dim(0);
  vocab_parallel_cross_entropy_backward(dlogits, t, v_begin_, scale);
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
