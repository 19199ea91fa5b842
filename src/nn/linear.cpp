#include "nn/linear.h"

#include "base/check.h"
#include "ops/ops.h"

namespace ndt {
namespace {

Shape with_last(const Shape& s, int64_t last) {
  Shape out = s;
  out.back() = last;
  return out;
}

}  // namespace

Linear::Linear(
    const std::string& name,
    int in_features,
    int out_features,
    bool bias,
    Act act,
    float init_std)
    : in_(in_features),
      out_(out_features),
      has_bias_(bias),
      act_(act),
      weight_(
          name + ".weight",
          {out_features, in_features},
          true,
          {Init::kNormal, init_std}),
      bias_(name + ".bias", {bias ? out_features : 0}, false, {}) {
  NDT_ASSERT(act == Act::kNone || bias, "fused activation needs a bias");
}

// saved: {x, y} for kNone/kRelu (y = output), {x, pre} for kGelu.
Tensor Linear::forward(const Tensor& x, Context& ctx) {
  NDT_ASSERT(
      x.dim(-1) == in_,
      "Linear expects last dim ",
      in_,
      ", got ",
      shape_str(x.shape()));
  Tensor y(with_last(x.shape(), out_), MemTag::kActs);
  Tensor none;
  switch (act_) {
    case Act::kNone:
      ops::linear_forward(y, x, weight_.value, has_bias_ ? bias_.value : none);
      ctx.saved = {x};
      return y;
    case Act::kRelu:
      ops::linear_forward(y, x, weight_.value, bias_.value);
      ops::relu_forward(y, y);
      ctx.saved = {x, y};
      return y;
    case Act::kGelu: {
      Tensor pre(y.shape(), MemTag::kActs);
      ops::linear_forward(pre, x, weight_.value, none);
      ops::bias_gelu_forward(y, pre, bias_.value);
      ctx.saved = {x, pre};  // pre now holds GELU's slope
      return y;
    }
  }
  return y;
}

Tensor Linear::backward(const Tensor& dy, Context& ctx) {
  const Tensor& x = ctx.saved.at(0);
  Tensor dx;
  if (ctx.need_input_grad)
    dx = Tensor(x.shape(), MemTag::kActs);
  Tensor none;
  switch (act_) {
    case Act::kNone:
      ops::linear_backward(
          dx,
          weight_.grad,
          has_bias_ ? bias_.grad : none,
          dy,
          x,
          weight_.value);
      break;
    case Act::kRelu: {
      Tensor dpre(dy.shape(), MemTag::kActs);
      ops::relu_backward(dpre, dy, ctx.saved.at(1));
      ops::linear_backward(
          dx, weight_.grad, bias_.grad, dpre, x, weight_.value);
      break;
    }
    case Act::kGelu: {
      Tensor dpre(dy.shape(), MemTag::kActs);
      ops::bias_gelu_backward(dpre, bias_.grad, dy, ctx.saved.at(1));
      ops::linear_backward(dx, weight_.grad, none, dpre, x, weight_.value);
      break;
    }
  }
  ctx.saved.clear();
  return dx;
}

void Linear::collect_parameters(std::vector<Parameter*>& out) {
  out.push_back(&weight_);
  if (has_bias_)
    out.push_back(&bias_);
}

}  // namespace ndt
