#include "parallel/tp3d_norm.h"

#include <vector>

#include "base/fault.h"
#include "ops/ops.h"
#include "parallel/tp3d_cube.h"

namespace ndt {

LayerNorm3d::LayerNorm3d(const std::string& name, int C, Mesh& mesh)
    : features_(mesh.group(kTp3dOut)),
      samples_(cube_sample_group(mesh, kSideA)),
      C_(C),
      weight_(
          name + ".weight",
          {cube_divided(name, "width", C, features_.size())},
          false,
          {Init::kOnes, 0}),
      bias_(
          name + ".bias",
          {cube_divided(name, "width", C, features_.size())},
          false,
          {Init::kZeros, 0}) {
  weight_.layout = cube_layout({C}, 0, mesh, kTp3dOut);
  bias_.layout = cube_layout({C}, 0, mesh, kTp3dOut);
}

// saved: {x, mean, rstd}.
Tensor LayerNorm3d::forward(const Tensor& x, Context& ctx) {
  const int64_t N = x.numel() / x.dim(-1);
  std::vector<double> sums(2 * N);
  ops::layernorm_split_stats(sums.data(), x);
  features_.all_reduce(sums.data(), static_cast<int64_t>(sums.size()));
  Tensor y(x.shape(), MemTag::kActs), mean({N}, MemTag::kActs),
      rstd({N}, MemTag::kActs);
  ops::layernorm_split_forward(
      y, mean, rstd, x, sums.data(), C_, weight_.value, bias_.value, kEps);
  ctx.saved = {x, mean, rstd};
  return y;
}

Tensor LayerNorm3d::backward(const Tensor& dy, Context& ctx) {
  const Tensor& x = ctx.saved.at(0);
  const Tensor& mean = ctx.saved.at(1);
  const Tensor& rstd = ctx.saved.at(2);
  const Tensor& w = weight_.value;
  const int64_t N = x.numel() / x.dim(-1);
  std::vector<double> sums(2 * N);
  ops::layernorm_split_grad_stats(sums.data(), dy, x, w, mean, rstd);
  features_.all_reduce(sums.data(), static_cast<int64_t>(sums.size()));
  Tensor dx(x.shape(), MemTag::kActs);
  // [dw; db] of my rows, summed over the other samples in one call.
  const int64_t C_local = w.numel();
  Tensor dwb = Tensor::zeros({2 * C_local}, MemTag::kComm);
  Tensor dw = dwb.slice(0, {C_local});
  Tensor db = dwb.slice(C_local, {C_local});
  ops::layernorm_split_backward(
      dx, dw, db, dy, x, w, mean, rstd, sums.data(), C_);
  if (!NDT_FAULT(kTp3dSkipSampleReduce))
    samples_.all_reduce(dwb.data(), dwb.numel());
  ops::add_(weight_.grad, dw);
  ops::add_(bias_.grad, db);
  ctx.saved.clear();
  return dx;
}

void LayerNorm3d::collect_parameters(std::vector<Parameter*>& out) {
  out.push_back(&weight_);
  out.push_back(&bias_);
}

}  // namespace ndt
