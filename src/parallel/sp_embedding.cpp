#include "parallel/sp_embedding.h"

#include "base/check.h"
#include "base/fault.h"
#include "ops/ops.h"

namespace ndt {

SpTokenEmbedding::SpTokenEmbedding(
    const std::string& name,
    int vocab,
    int max_tokens,
    int C,
    float init_std,
    const SeqShard& shard)
    : C_(C),
      shard_(shard),
      table_(name, vocab, max_tokens, C, init_std),
      tokens_(*table_.parameters().at(0)),
      positions_(*table_.parameters().at(1)) {
  NDT_CHECK(
      shard.T_global() <= max_tokens,
      ConfigError,
      "sequence of ",
      shard.T_global(),
      " tokens is longer than the ",
      max_tokens,
      " positions of ",
      name);
}

// ids [B, T_local]; saved {ids, position ids}.
Tensor SpTokenEmbedding::forward(const Tensor& ids, Context& ctx) {
  const int64_t B = ids.dim(0), Tl = ids.dim(1);
  NDT_ASSERT(
      ids.ndim() == 2 && Tl == shard_.T_local(),
      "sequence-parallel embedding ids ",
      shape_str(ids.shape()),
      " for ",
      shard_.T_local(),
      " tokens");
  if (!position_ids_.defined() || position_ids_.dim(0) != B * Tl) {
    position_ids_ = Tensor({B * Tl}, MemTag::kData, DType::kI32);
    int32_t* pos = position_ids_.data_i32();
    for (int64_t i = 0; i < B * Tl; ++i)
      pos[i] = static_cast<int32_t>(
          NDT_FAULT(kSpLocalPositions) ? i % Tl
                                       : shard_.global_position(i % Tl));
  }
  Tensor y({B, Tl, C_}, MemTag::kActs);
  Tensor flat = y.view({B * Tl, C_});
  ops::embedding_forward(flat, ids.view({B * Tl}), tokens_.value);
  Tensor pos({B * Tl, C_}, MemTag::kActs);
  ops::embedding_forward(pos, position_ids_, positions_.value);
  ops::add_(flat, pos);
  ctx.saved = {ids, position_ids_};
  return y;
}

Tensor SpTokenEmbedding::backward(const Tensor& dy, Context& ctx) {
  const Tensor& ids = ctx.saved.at(0);
  const int64_t N = ids.numel();
  const Tensor rows = dy.view({N, C_});
  ops::embedding_backward(tokens_.grad, rows, ids.view({N}));
  ops::embedding_backward(positions_.grad, rows, ctx.saved.at(1));
  ctx.saved.clear();
  return Tensor();
}

void SpTokenEmbedding::collect_parameters(std::vector<Parameter*>& out) {
  table_.collect_parameters(out);
}

// saved: {B, T} of the inner output in ints.
Tensor SpTokensOf::forward(const Tensor& x, Context& ctx) {
  const Tensor all = inner_->forward(x, ctx.child(0));
  ctx.ints = {all.dim(0), all.dim(1), all.dim(2)};
  return take_tokens(all, shard_);
}

Tensor SpTokensOf::backward(const Tensor& dy, Context& ctx) {
  Tensor all = Tensor::zeros(
      {ctx.ints.at(0), ctx.ints.at(1), ctx.ints.at(2)}, MemTag::kActs);
  put_tokens(dy, all, shard_);
  return inner_->backward(all, ctx.child(0));
}

}  // namespace ndt
