#include "parallel/tp2d_linear.h"

#include <array>
#include <memory>

#include "base/check.h"
#include "ops/ops.h"
#include "parallel/tp2d_grid.h"

namespace ndt {
namespace {

int divided(const std::string& name, const char* what, int n, int parts) {
  NDT_CHECK(
      n % parts == 0,
      ConfigError,
      name,
      ": ",
      what,
      " ",
      n,
      " is not divisible by ",
      parts,
      " (2D tensor parallelism)");
  return n / parts;
}

// C [M, N] += A [M, K] op(B) with B [N, K] (trans_b) or [K, N].
void gemm_acc(Tensor& c, const Tensor& a, const Tensor& b, bool trans_b) {
  const int M = static_cast<int>(c.dim(0)), N = static_cast<int>(c.dim(1));
  const int K = static_cast<int>(a.dim(1));
  ops::gemm(
      false,
      trans_b,
      M,
      N,
      K,
      1.0f,
      a.data(),
      K,
      b.data(),
      trans_b ? K : N,
      1.0f,
      c.data(),
      N);
}

// The q broadcast steps of one SUMMA product, double-buffered: step t's
// block comes from group rank t (mine when my rank is t); the broadcast of
// step t+1 is posted before step t is used.
class BroadcastSteps {
 public:
  BroadcastSteps(ProcessGroup& g, const Tensor& mine) : g_(g), mine_(mine) {
    for (Tensor& b : buf_)
      b = Tensor(mine.shape(), MemTag::kComm);
    post(0);
  }
  // Block t, after posting t + 1.
  const Tensor& take(int t) {
    if (t + 1 < g_.size())
      post(t + 1);
    work_[t % 2]->wait();
    return buf_[t % 2];
  }

 private:
  void post(int t) {
    Tensor& b = buf_[t % 2];
    if (g_.rank() == t)
      b.copy_(mine_);
    work_[t % 2] = g_.broadcast_async(b.data(), b.numel(), t);
  }
  ProcessGroup& g_;
  const Tensor& mine_;
  std::array<Tensor, 2> buf_;
  std::array<std::unique_ptr<Work>, 2> work_;
};

}  // namespace

Linear2d::Linear2d(
    const std::string& name,
    int in_features,
    int out_features,
    bool bias,
    Act act,
    float init_std,
    Mesh& mesh,
    int blocks)
    : row_(mesh.group("tp_col")),
      col_(mesh.group("tp_row")),
      q_(row_.size()),
      in_local_(divided(name, "in_features", in_features, row_.size())),
      out_local_(
          divided(name, "out_features", out_features, blocks * row_.size()) *
          blocks),
      has_bias_(bias),
      act_(act),
      weight_(
          name + ".weight",
          {out_features / q_, in_features / q_},
          true,
          {Init::kNormal, init_std}),
      bias_(
          name + ".bias",
          {bias
               ? divided(name, "out_features", out_features, blocks * q_ * q_) *
                     blocks
               : 0},
          false,
          {}) {
  NDT_CHECK(
      col_.size() == q_,
      ConfigError,
      name,
      ": 2D tensor parallelism needs a square grid, got tp_row ",
      col_.size(),
      " x tp_col ",
      q_);
  NDT_ASSERT(act == Act::kNone || (act == Act::kGelu && bias));
  weight_.layout =
      grid_matrix_layout(out_features, in_features, row_, col_, blocks);
  if (bias)
    bias_.layout = grid_vector_layout(out_features, row_, col_, blocks);
}

// saved: {x, pre} (pre: the product before bias and activation, only
// with GELU).
Tensor Linear2d::forward(const Tensor& x_in, Context& ctx) {
  NDT_ASSERT(x_in.dim(-1) == in_local_, shape_str(x_in.shape()));
  const Tensor x = x_in.view({x_in.numel() / in_local_, in_local_});
  Shape out_shape = x_in.shape();
  out_shape.back() = out_local_;
  Tensor y = Tensor::zeros(out_shape, MemTag::kActs);
  Tensor y2 = y.view({x.dim(0), out_local_});
  BroadcastSteps xs(row_, x), ws(col_, weight_.value);
  for (int t = 0; t < q_; ++t) {
    const Tensor& xt = xs.take(t);
    gemm_acc(y2, xt, ws.take(t), true);
  }
  ctx.saved = {x};
  if (!has_bias_)
    return y;
  Tensor b = gather_column_slice(bias_.value, col_);
  if (act_ == Act::kGelu) {
    Tensor out(y.shape(), MemTag::kActs);
    ops::bias_gelu_forward(out, y, b);
    ctx.saved.push_back(y);  // y now holds GELU's slope
    return out;
  }
  ops::bias_add_forward(y, b);
  return y;
}

Tensor Linear2d::backward(const Tensor& dy_nd, Context& ctx) {
  const Tensor& x_in = ctx.saved.at(0);
  const Tensor x = x_in.view({x_in.numel() / in_local_, in_local_});
  const Tensor dy_in = dy_nd.view({x.dim(0), out_local_});
  Tensor dy = dy_in;
  Tensor db_slice;
  if (has_bias_) {
    db_slice = Tensor::zeros({out_local_}, MemTag::kComm);
    if (act_ == Act::kGelu) {
      dy = Tensor(dy_in.shape(), MemTag::kActs);
      ops::bias_gelu_backward(
          dy, db_slice, dy_in, ctx.saved.at(1).view(dy_in.shape()));
    } else {
      ops::bias_add_backward(db_slice, dy);
    }
    add_column_piece_grad(bias_, db_slice, col_);
  }
  const int n = static_cast<int>(dy.dim(0));
  // dw_(t,j) = sum_i dy_ij^T x_(i,t): x blocks along my row, partials
  // reduced down my column to (t, j).
  BroadcastSteps xs(row_, x);
  Tensor part({out_local_, in_local_}, MemTag::kActs);
  for (int t = 0; t < q_; ++t) {
    const Tensor& xt = xs.take(t);
    ops::gemm(
        true,
        false,
        out_local_,
        in_local_,
        n,
        1.0f,
        dy.data(),
        out_local_,
        xt.data(),
        in_local_,
        0.0f,
        part.data(),
        in_local_);
    Tensor sum({out_local_, in_local_}, MemTag::kComm);
    col_.reduce(part.data(), sum.data(), part.numel(), t);
    if (col_.rank() == t)
      ops::add_(weight_.grad, sum);
  }
  if (!ctx.need_input_grad) {
    ctx.saved.clear();
    return Tensor();
  }
  // dx_(i,t) = sum_j dy_ij w_(t,j): weight blocks down my column, partials
  // reduced along my row to (i, t).
  Tensor dx(x_in.shape(), MemTag::kActs);
  BroadcastSteps ws(col_, weight_.value);
  Tensor pdx({n, in_local_}, MemTag::kActs);
  for (int t = 0; t < q_; ++t) {
    const Tensor& wt = ws.take(t);
    ops::gemm(
        false,
        false,
        n,
        in_local_,
        out_local_,
        1.0f,
        dy.data(),
        out_local_,
        wt.data(),
        in_local_,
        0.0f,
        pdx.data(),
        in_local_);
    row_.reduce(
        pdx.data(), row_.rank() == t ? dx.data() : nullptr, pdx.numel(), t);
  }
  ctx.saved.clear();
  return dx;
}

void Linear2d::collect_parameters(std::vector<Parameter*>& out) {
  out.push_back(&weight_);
  if (has_bias_)
    out.push_back(&bias_);
}

}  // namespace ndt
