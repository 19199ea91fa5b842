#include "parallel/tp1d_linear.h"

#include "base/check.h"
#include "ops/ops.h"

namespace ndt {
namespace {

// `features` split into `blocks` parts, each over the tp ranks.
int local_features(
    const std::string& name,
    const char* what,
    int features,
    int blocks,
    const ProcessGroup& tp) {
  NDT_CHECK(
      blocks >= 1 && features % (blocks * tp.size()) == 0,
      ConfigError,
      name,
      ": ",
      what,
      " ",
      features,
      " is not divisible into ",
      blocks,
      " block(s) x ",
      tp.size(),
      " tensor-parallel ranks");
  return features / tp.size();
}

Placement tp_shard(const ProcessGroup& tp, int dim, int blocks) {
  Placement p;
  p.axis = "tp";
  p.kind = Placement::Kind::kShard;
  p.dim = dim;
  p.parts = tp.size();
  p.index = tp.rank();
  p.blocks = blocks;
  return p;
}

// Gives a parameter built with its local shape the sharded global layout.
void set_layout(Parameter& p, Shape global_shape, const Placement& shard) {
  p.layout = Layout{std::move(global_shape), {shard}};
  NDT_ASSERT(
      p.layout.local_shape() == p.value.shape(),
      p.name,
      ": local ",
      shape_str(p.value.shape()),
      " is not the layout's ",
      shape_str(p.layout.local_shape()));
}

}  // namespace

// ---- ColumnLinear1d
// -----------------------------------------------------------

ColumnLinear1d::ColumnLinear1d(
    const std::string& name,
    int in_features,
    int out_features_global,
    bool bias,
    Act act,
    float init_std,
    ProcessGroup& tp,
    bool token_split,
    int64_t tokens_per_sample,
    int blocks)
    : token_split_(token_split),
      copy_(tp),
      gather_(tp, tokens_per_sample, /*grad_partial=*/true),
      linear_(
          name,
          in_features,
          local_features(name, "out_features", out_features_global, blocks, tp),
          bias,
          act,
          init_std) {
  NDT_CHECK(
      !token_split || tokens_per_sample > 0,
      ConfigError,
      name,
      ": token_split needs tokens_per_sample > 0");
  const Placement shard = tp_shard(tp, 0, blocks);
  std::vector<Parameter*> params = linear_.parameters();
  set_layout(*params.at(0), {out_features_global, in_features}, shard);
  if (bias)
    set_layout(*params.at(1), {out_features_global}, shard);
}

// ctx.ints: {input shape}; child 0: the region, child 1: the local Linear.
Tensor ColumnLinear1d::forward(const Tensor& x, Context& ctx) {
  ctx.ints = x.shape();
  Context& region = ctx.child(0);
  Context& lin = ctx.child(1);
  lin.need_input_grad = ctx.need_input_grad;
  // replicated: x [.., IC]; token_split: x [N/tp, IC] -> [N/T, T, IC].
  Tensor full =
      token_split_ ? gather_.forward(x, region) : copy_.forward(x, region);
  return linear_.forward(full, lin);  // [.., OC/tp]
}

Tensor ColumnLinear1d::backward(const Tensor& dy, Context& ctx) {
  Context& region = ctx.child(0);
  Context& lin = ctx.child(1);
  // dfull is this rank's partial of the input gradient (its columns only).
  Tensor dfull = linear_.backward(dy, lin);
  if (!ctx.need_input_grad)
    return Tensor();
  Tensor dx = token_split_ ? gather_.backward(dfull, region)
                           : copy_.backward(dfull, region);
  return dx.view(ctx.ints);
}

void ColumnLinear1d::collect_parameters(std::vector<Parameter*>& out) {
  linear_.collect_parameters(out);
}

// ---- RowLinear1d
// ------------------------------------------------------------------

RowLinear1d::RowLinear1d(
    const std::string& name,
    int in_features_global,
    int out_features,
    bool bias,
    float init_std,
    ProcessGroup& tp,
    bool token_split)
    : tp_(tp),
      token_split_(token_split),
      has_bias_(bias),
      reduce_(tp),
      scatter_(tp),
      linear_(
          name,
          local_features(name, "in_features", in_features_global, 1, tp),
          out_features,
          /*bias=*/false,
          Act::kNone,
          init_std),
      // As serial Linear's bias: zeros, no decay; replicated over tp.
      bias_(name + ".bias", {bias ? out_features : 0}, false, {}) {
  set_layout(
      linear_.weight(), {out_features, in_features_global}, tp_shard(tp, 1, 1));
}

// child 0: the local Linear, child 1: the region.
Tensor RowLinear1d::forward(const Tensor& x, Context& ctx) {
  Context& lin = ctx.child(0);
  Context& region = ctx.child(1);
  lin.need_input_grad = ctx.need_input_grad;
  Tensor partial = linear_.forward(x, lin);  // [.., OC], partial over tp
  // Both regions return fresh storage, so the bias is added in place.
  Tensor y = token_split_ ? scatter_.forward(partial, region)  // [N/tp, OC]
                          : reduce_.forward(partial, region);  // [.., OC]
  if (has_bias_)
    ops::bias_add_forward(y, bias_.value);
  return y;
}

Tensor RowLinear1d::backward(const Tensor& dy, Context& ctx) {
  Context& lin = ctx.child(0);
  Context& region = ctx.child(1);
  if (has_bias_) {
    if (token_split_) {
      // My tokens' column sums are a partial of db: sum them over tp and
      // accumulate (grads also accumulate over micro-batches).
      Tensor contribution = Tensor::zeros(bias_.grad.shape(), MemTag::kActs);
      ops::bias_add_backward(contribution, dy);
      tp_.all_reduce(contribution.data(), contribution.numel());
      ops::add_(bias_.grad, contribution);
    } else {
      ops::bias_add_backward(bias_.grad, dy);  // dy is replicated: full db
    }
  }
  Tensor dpartial = token_split_ ? scatter_.backward(dy, region)
                                 : reduce_.backward(dy, region);
  return linear_.backward(dpartial, lin);  // [.., IC/tp]; dW += dy^T x
}

void RowLinear1d::collect_parameters(std::vector<Parameter*>& out) {
  linear_.collect_parameters(out);
  if (has_bias_)
    out.push_back(&bias_);
}

}  // namespace ndt
