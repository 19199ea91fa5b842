#include "nn/layernorm.h"

#include "base/check.h"
#include "ops/ops.h"

namespace ndt {

LayerNorm::LayerNorm(const std::string& name, int C)
    : C_(C),
      weight_(name + ".weight", {C}, false, {Init::kOnes}),
      bias_(name + ".bias", {C}, false, {Init::kZeros}) {}

// saved: {x, mean, rstd}.
Tensor LayerNorm::forward(const Tensor& x, Context& ctx) {
  NDT_ASSERT(x.dim(-1) == C_, "LayerNorm expects last dim ", C_);
  int64_t N = x.numel() / C_;
  Tensor y(x.shape(), MemTag::kActs);
  Tensor mean({N}, MemTag::kActs);
  Tensor rstd({N}, MemTag::kActs);
  ops::layernorm_forward(y, mean, rstd, x, weight_.value, bias_.value, kEps);
  ctx.saved = {x, mean, rstd};
  return y;
}

Tensor LayerNorm::backward(const Tensor& dy, Context& ctx) {
  const Tensor& x = ctx.saved.at(0);
  Tensor dx(x.shape(), MemTag::kActs);
  ops::layernorm_backward(
      dx,
      weight_.grad,
      bias_.grad,
      dy,
      x,
      weight_.value,
      ctx.saved.at(1),
      ctx.saved.at(2));
  ctx.saved.clear();
  return dx;
}

void LayerNorm::collect_parameters(std::vector<Parameter*>& out) {
  out.push_back(&weight_);
  out.push_back(&bias_);
}

}  // namespace ndt
