#include "parallel/tp3d_lm_head.h"

#include "parallel/tp3d_linear.h"
#include "parallel/tp3d_norm.h"
#include "parallel/vocab_parallel_ce.h"

namespace ndt {

LmHead3d::LmHead3d(const LmHeadOptions& options, Mesh& mesh)
    : in_(mesh.group(kTp3dIn)),
      out_group_(mesh.group(kTp3dOut)),
      V_local_(options.vocab / in_.size()),
      v_begin_(int64_t(in_.rank()) * V_local_),
      keep_stats_(mesh.coord(kTp3dOut) == mesh.coord(kTp3dIn)),
      ln_(std::make_unique<LayerNorm3d>(
          options.name + ".ln", options.dim, mesh)),
      out_(std::make_unique<Linear3d>(
          options.name + ".out",
          options.dim,
          options.vocab,
          false,
          Act::kNone,
          options.init_std,
          mesh,
          kSideA)) {}

// child(0): the LayerNorm, child(1): the projection. saved {probs [n T,
// V/p], side-B targets [n T]}; ints: the logits' shape.
void LmHead3d::forward(
    const Tensor& x, const Tensor& targets, Context& ctx, LossStats& stats) {
  Tensor h = ln_->forward(x, ctx.child(0));
  Tensor logits = out_->forward(h, ctx.child(1));
  const int64_t N = logits.numel() / V_local_;
  Tensor probs = logits.view({N, V_local_});  // in place: probabilities
  // Side B's samples are sub-block coord("tp_out") of the p blocks that
  // "tp_in" holds of block wt: gather the ids (exact as floats below
  // 2^24), keep that sub-block.
  const int p = in_.size();
  Tensor mine({N}, MemTag::kComm), all({p * N}, MemTag::kComm);
  const int32_t* t = targets.data_i32();
  for (int64_t k = 0; k < N; ++k)
    mine.data()[k] = static_cast<float>(t[k]);
  in_.all_gather(mine.data(), all.data(), N);
  Tensor side_b({N}, MemTag::kActs, DType::kI32);
  const float* src = all.data() + out_group_.rank() * N;
  for (int64_t k = 0; k < N; ++k)
    side_b.data_i32()[k] = static_cast<int32_t>(src[k]);
  LossStats b;
  vocab_parallel_cross_entropy(probs, side_b, v_begin_, in_, b);
  double v[3] = {0, 0, 0};
  if (keep_stats_)
    v[0] = b.loss_sum, v[1] = double(b.count), v[2] = double(b.correct);
  out_group_.all_reduce(v, 3);
  stats.loss_sum += v[0];
  stats.count += static_cast<int64_t>(v[1]);
  stats.correct += static_cast<int64_t>(v[2]);
  ctx.saved = {probs, side_b};
  ctx.ints = logits.shape();
}

Tensor LmHead3d::backward(Context& ctx, float scale) {
  Tensor dlogits = ctx.saved.at(0);  // in place over probs
  vocab_parallel_cross_entropy_backward(
      dlogits, ctx.saved.at(1), v_begin_, scale);
  ctx.saved.clear();
  const Shape shape = ctx.ints;
  Tensor dh = out_->backward(dlogits.view(shape), ctx.child(1));
  return ln_->backward(dh, ctx.child(0));
}

void LmHead3d::collect_parameters(std::vector<Parameter*>& out) {
  ln_->collect_parameters(out);
  out_->collect_parameters(out);
}

}  // namespace ndt
