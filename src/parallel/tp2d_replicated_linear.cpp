#include "parallel/tp2d_replicated_linear.h"

#include <cstring>

#include "base/check.h"
#include "base/fault.h"
#include "parallel/group_grad_sum.h"

namespace ndt {

ReplicatedLinear2d::ReplicatedLinear2d(
    const std::string& name,
    int in_features,
    int out_features,
    bool bias,
    Act act,
    float init_std,
    Mesh& mesh)
    : ReplicatedLinear2d(
          name,
          in_features,
          out_features,
          bias,
          act,
          init_std,
          mesh.group("tp_col"),
          mesh.group("tp_row"),
          Fault::kTp2dSkipColReduce) {}

ReplicatedLinear2d::ReplicatedLinear2d(
    const std::string& name,
    int in_features,
    int out_features,
    bool bias,
    Act act,
    float init_std,
    ProcessGroup& features,
    ProcessGroup& samples,
    Fault skip_fault)
    : row_(features), in_local_(in_features / row_.size()) {
  NDT_CHECK(
      in_features % row_.size() == 0,
      ConfigError,
      name,
      ": in_features ",
      in_features,
      " is not divisible by the ",
      row_.size(),
      " feature blocks of the tensor-parallel layout");
  linear_ = std::make_unique<GroupGradSum>(
      std::make_unique<Linear>(
          name, in_features, out_features, bias, act, init_std),
      samples,
      skip_fault);
}

// x [.., IC/q] -> whole rows [.., IC]: rank k of my row holds features
// [k IC/q, (k+1) IC/q) of every row. child(0): the Linear.
Tensor ReplicatedLinear2d::forward(const Tensor& x, Context& ctx) {
  NDT_ASSERT(x.dim(-1) == in_local_, shape_str(x.shape()));
  const int q = row_.size();
  const int64_t N = x.numel() / in_local_, w = in_local_;
  Tensor blocks({q * x.numel()}, MemTag::kComm);
  row_.all_gather(x.data(), blocks.data(), x.numel());
  Shape full_shape = x.shape();
  full_shape.back() = w * q;
  Tensor full(full_shape, MemTag::kActs);
  for (int k = 0; k < q; ++k) {
    const float* src = blocks.data() + k * x.numel();
    for (int64_t n = 0; n < N; ++n)
      std::memcpy(
          full.data() + (n * q + k) * w, src + n * w, sizeof(float) * w);
  }
  ctx.child(0).need_input_grad = ctx.need_input_grad;
  return linear_->forward(full, ctx.child(0));
}

// dy is the same on every rank of my row, so dx_full is too: keep my
// column block.
Tensor ReplicatedLinear2d::backward(const Tensor& dy, Context& ctx) {
  Tensor dfull = linear_->backward(dy, ctx.child(0));
  if (!ctx.need_input_grad)
    return Tensor();
  const int q = row_.size(), j = row_.rank();
  const int64_t w = in_local_, N = dfull.numel() / (w * q);
  Shape shape = dfull.shape();
  shape.back() = w;
  Tensor dx(shape, MemTag::kActs);
  for (int64_t n = 0; n < N; ++n)
    std::memcpy(
        dx.data() + n * w, dfull.data() + (n * q + j) * w, sizeof(float) * w);
  return dx;
}

void ReplicatedLinear2d::collect_parameters(std::vector<Parameter*>& out) {
  linear_->collect_parameters(out);
}

}  // namespace ndt
