#include "parallel/tp2d_norm.h"

#include <vector>

#include "base/check.h"
#include "ops/ops.h"
#include "parallel/tp2d_grid.h"

namespace ndt {
namespace {

int quarter(const std::string& name, int C, int q) {
  NDT_CHECK(
      C % (q * q) == 0,
      ConfigError,
      name,
      ": width ",
      C,
      " is not divisible by ",
      q * q,
      " (2D tensor parallelism on a ",
      q,
      " x ",
      q,
      " grid)");
  return C / (q * q);
}

}  // namespace

LayerNorm2d::LayerNorm2d(const std::string& name, int C, Mesh& mesh)
    : row_(mesh.group("tp_col")),
      col_(mesh.group("tp_row")),
      C_(C),
      weight_(
          name + ".weight",
          {quarter(name, C, row_.size())},
          false,
          {Init::kOnes, 0}),
      bias_(
          name + ".bias",
          {quarter(name, C, row_.size())},
          false,
          {Init::kZeros, 0}) {
  weight_.layout = grid_vector_layout(C, row_, col_);
  bias_.layout = grid_vector_layout(C, row_, col_);
}

// saved: {x, mean, rstd, w slice}.
Tensor LayerNorm2d::forward(const Tensor& x, Context& ctx) {
  const int64_t N = x.numel() / x.dim(-1);
  std::vector<double> sums(2 * N);
  ops::layernorm_split_stats(sums.data(), x);
  row_.all_reduce(sums.data(), static_cast<int64_t>(sums.size()));
  Tensor w = gather_column_slice(weight_.value, col_);
  Tensor b = gather_column_slice(bias_.value, col_);
  Tensor y(x.shape(), MemTag::kActs), mean({N}, MemTag::kActs),
      rstd({N}, MemTag::kActs);
  ops::layernorm_split_forward(y, mean, rstd, x, sums.data(), C_, w, b, kEps);
  ctx.saved = {x, mean, rstd, w};
  return y;
}

Tensor LayerNorm2d::backward(const Tensor& dy, Context& ctx) {
  const Tensor& x = ctx.saved.at(0);
  const Tensor& mean = ctx.saved.at(1);
  const Tensor& rstd = ctx.saved.at(2);
  const Tensor& w = ctx.saved.at(3);
  const int64_t N = x.numel() / x.dim(-1);
  std::vector<double> sums(2 * N);
  ops::layernorm_split_grad_stats(sums.data(), dy, x, w, mean, rstd);
  row_.all_reduce(sums.data(), static_cast<int64_t>(sums.size()));
  Tensor dx(x.shape(), MemTag::kActs);
  Tensor dw = Tensor::zeros({w.numel()}, MemTag::kComm);
  Tensor db = Tensor::zeros({w.numel()}, MemTag::kComm);
  ops::layernorm_split_backward(
      dx, dw, db, dy, x, w, mean, rstd, sums.data(), C_);
  // My pieces of the slice's gradients, summed over the row blocks.
  add_column_piece_grad(weight_, dw, col_);
  add_column_piece_grad(bias_, db, col_);
  ctx.saved.clear();
  return dx;
}

void LayerNorm2d::collect_parameters(std::vector<Parameter*>& out) {
  out.push_back(&weight_);
  out.push_back(&bias_);
}

}  // namespace ndt
