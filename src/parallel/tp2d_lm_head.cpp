#include "parallel/tp2d_lm_head.h"

#include "parallel/tp2d_linear.h"
#include "parallel/tp2d_norm.h"
#include "parallel/vocab_parallel_ce.h"

namespace ndt {

LmHead2d::LmHead2d(const LmHeadOptions& options, Mesh& mesh)
    : row_(mesh.group("tp_col")),
      V_local_(options.vocab / row_.size()),
      v_begin_(int64_t(row_.rank()) * V_local_),
      ln_(std::make_unique<LayerNorm2d>(
          options.name + ".ln", options.dim, mesh)),
      out_(std::make_unique<Linear2d>(
          options.name + ".out",
          options.dim,
          options.vocab,
          false,
          Act::kNone,
          options.init_std,
          mesh)) {}

// child(0): the LayerNorm, child(1): the projection. saved {probs [N,
// V/q], targets [N]}; ints: the logits' shape.
void LmHead2d::forward(
    const Tensor& x, const Tensor& targets, Context& ctx, LossStats& stats) {
  Tensor h = ln_->forward(x, ctx.child(0));
  Tensor logits = out_->forward(h, ctx.child(1));
  const int64_t N = logits.numel() / V_local_;
  Tensor probs = logits.view({N, V_local_});  // in place: probabilities
  vocab_parallel_cross_entropy(probs, targets, v_begin_, row_, stats);
  ctx.saved = {probs, targets.view({N})};
  ctx.ints = logits.shape();
}

Tensor LmHead2d::backward(Context& ctx, float scale) {
  Tensor dlogits = ctx.saved.at(0);  // in place over probs
  vocab_parallel_cross_entropy_backward(
      dlogits, ctx.saved.at(1), v_begin_, scale);
  ctx.saved.clear();
  const Shape shape = ctx.ints;
  Tensor dh = out_->backward(dlogits.view(shape), ctx.child(1));
  return ln_->backward(dh, ctx.child(0));
}

void LmHead2d::collect_parameters(std::vector<Parameter*>& out) {
  ln_->collect_parameters(out);
  out_->collect_parameters(out);
}

}  // namespace ndt
