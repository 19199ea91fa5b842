#include "parallel/tp3d_linear.h"

#include "base/check.h"
#include "base/fault.h"
#include "ops/ops.h"

namespace ndt {

Linear3d::Linear3d(
    const std::string& name,
    int in_features,
    int out_features,
    bool bias,
    Act act,
    float init_std,
    Mesh& mesh,
    CubeSide side,
    int blocks)
    : gather_(mesh.group(side.gather)),
      reduce_(mesh.group(side.features)),
      weight_g_(mesh.group(kTp3dWt)),
      bias_g_(cube_sample_group(mesh, other_side(side))),
      p_(gather_.size()),
      in_local_(cube_divided(name, "in_features", in_features, p_)),
      out_local_(
          cube_divided(name, "out_features", out_features, blocks * p_ * p_) *
          blocks * p_),
      has_bias_(bias),
      act_(act),
      weight_(
          name + ".weight",
          {out_local_ / p_, in_local_},
          true,
          {Init::kNormal, init_std}),
      bias_(name + ".bias", {bias ? out_local_ : 0}, false, {}) {
  NDT_CHECK(
      reduce_.size() == p_ && weight_g_.size() == p_,
      ConfigError,
      name,
      ": 3D tensor parallelism needs a cube, got ",
      kTp3dOut,
      " ",
      mesh.size(kTp3dOut),
      " x ",
      kTp3dIn,
      " ",
      mesh.size(kTp3dIn),
      " x ",
      kTp3dWt,
      " ",
      mesh.size(kTp3dWt));
  NDT_ASSERT(act == Act::kNone || (act == Act::kGelu && bias));
  weight_.layout = cube_layout(
      {out_features, in_features}, 0, mesh, side.gather, blocks, kTp3dWt);
  weight_.layout.placements.push_back(
      cube_layout({out_features, in_features}, 1, mesh, side.features)
          .placements[0]);
  if (bias)
    bias_.layout = cube_layout({out_features}, 0, mesh, side.gather, blocks);
}

// saved: {X', W'[, pre]} (pre: the output before the activation, with
// GELU).
Tensor Linear3d::forward(const Tensor& x_in, Context& ctx) {
  NDT_ASSERT(x_in.dim(-1) == in_local_, shape_str(x_in.shape()));
  const int64_t n = x_in.numel() / in_local_;
  Tensor xg({p_ * n, in_local_}, MemTag::kActs);
  auto x_work = gather_.all_gather_async(x_in.data(), xg.data(), x_in.numel());
  Tensor wg({out_local_, in_local_}, MemTag::kActs);
  weight_g_.all_gather(weight_.value.data(), wg.data(), weight_.value.numel());
  x_work->wait();
  Tensor z({p_ * n, out_local_}, MemTag::kComm);
  ops::gemm(
      false,
      true,
      static_cast<int>(p_ * n),
      out_local_,
      in_local_,
      1.0f,
      xg.data(),
      in_local_,
      wg.data(),
      in_local_,
      0.0f,
      z.data(),
      out_local_);
  Shape out_shape = x_in.shape();
  out_shape.back() = out_local_;
  Tensor y(out_shape, MemTag::kActs);
  reduce_.reduce_scatter(z.data(), y.data(), y.numel());
  ctx.saved = {xg, wg};
  if (!has_bias_)
    return y;
  if (act_ == Act::kGelu) {
    Tensor out(y.shape(), MemTag::kActs);
    ops::bias_gelu_forward(out, y, bias_.value);
    ctx.saved.push_back(y);  // y now holds GELU's slope
    return out;
  }
  ops::bias_add_forward(y, bias_.value);
  return y;
}

Tensor Linear3d::backward(const Tensor& dy_nd, Context& ctx) {
  const Tensor& xg = ctx.saved.at(0);
  const Tensor& wg = ctx.saved.at(1);
  const int64_t n = dy_nd.numel() / out_local_;
  Tensor dy = dy_nd.view({n, out_local_});
  if (has_bias_) {
    Tensor db = Tensor::zeros({out_local_}, MemTag::kComm);
    if (act_ == Act::kGelu) {
      Tensor dpre({n, out_local_}, MemTag::kActs);
      ops::bias_gelu_backward(
          dpre, db, dy, ctx.saved.at(2).view({n, out_local_}));
      dy = dpre;
    } else {
      ops::bias_add_backward(db, dy);
    }
    if (!NDT_FAULT(kTp3dBiasNoReduce))
      bias_g_.all_reduce(db.data(), db.numel());
    ops::add_(bias_.grad, db);
  }
  Tensor dz({p_ * n, out_local_}, MemTag::kComm);
  reduce_.all_gather(dy.data(), dz.data(), dy.numel());
  // dW' = dZ^T X' [OC/p, IC/p], summed over W into my sub-block, while dx
  // is formed.
  Tensor dwg({out_local_, in_local_}, MemTag::kComm);
  ops::gemm(
      true,
      false,
      out_local_,
      in_local_,
      static_cast<int>(p_ * n),
      1.0f,
      dz.data(),
      out_local_,
      xg.data(),
      in_local_,
      0.0f,
      dwg.data(),
      in_local_);
  Tensor dw(weight_.grad.shape(), MemTag::kComm);
  auto dw_work =
      weight_g_.reduce_scatter_async(dwg.data(), dw.data(), dw.numel());
  Tensor dx;
  if (ctx.need_input_grad) {
    Tensor dxg({p_ * n, in_local_}, MemTag::kComm);
    ops::gemm(
        false,
        false,
        static_cast<int>(p_ * n),
        in_local_,
        out_local_,
        1.0f,
        dz.data(),
        out_local_,
        wg.data(),
        in_local_,
        0.0f,
        dxg.data(),
        in_local_);
    Shape in_shape = dy_nd.shape();
    in_shape.back() = in_local_;
    dx = Tensor(in_shape, MemTag::kActs);
    gather_.reduce_scatter(dxg.data(), dx.data(), dx.numel());
  }
  dw_work->wait();
  ops::add_(weight_.grad, dw);
  ctx.saved.clear();
  return dx;
}

void Linear3d::collect_parameters(std::vector<Parameter*>& out) {
  out.push_back(&weight_);
  if (has_bias_)
    out.push_back(&bias_);
}

}  // namespace ndt
