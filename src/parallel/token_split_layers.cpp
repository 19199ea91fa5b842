#include "parallel/token_split_layers.h"

namespace ndt {

// child(0): the inner layer, child(1): the split.
Tensor SplitOutput::forward(const Tensor& x, Context& ctx) {
  ctx.child(0).need_input_grad = ctx.need_input_grad;
  return split_.forward(inner_->forward(x, ctx.child(0)), ctx.child(1));
}

Tensor SplitOutput::backward(const Tensor& dy, Context& ctx) {
  return inner_->backward(split_.backward(dy, ctx.child(1)), ctx.child(0));
}

// child(0): the inner head, child(1): the gather.
void GatheredHead::forward(
    const Tensor& x, const Tensor& targets, Context& ctx, LossStats& stats) {
  inner_->forward(
      gather_.forward(x, ctx.child(1)), targets, ctx.child(0), stats);
}

Tensor GatheredHead::backward(Context& ctx, float scale) {
  return gather_.backward(inner_->backward(ctx.child(0), scale), ctx.child(1));
}

}  // namespace ndt
