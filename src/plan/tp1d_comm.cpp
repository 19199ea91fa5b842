#include "plan/tp1d_comm.h"

#include "base/check.h"

namespace ndt {
namespace {

constexpr OpType kAR = OpType::kAllReduce;
constexpr OpType kRS = OpType::kReduceScatter;
constexpr OpType kAG = OpType::kAllGather;

// My tokens' block of an [N, C] activation.
int64_t token_block(const Tp1dLayout& l, int64_t N, int64_t C) {
  NDT_CHECK(
      N % l.tp == 0,
      ConfigError,
      N,
      " tokens of a micro-batch do not split over parallel.tp (",
      l.tp,
      ")");
  return N / l.tp * C;
}

}  // namespace

PassVolume column_linear_comm(const Tp1dLayout& l, int64_t N, int64_t C) {
  PassVolume p;
  if (l.tp <= 1)
    return p;
  if (!l.token_split) {
    p.bwd.add(kAR, 1, N * C);
  } else {
    p.fwd.add(kAG, 1, token_block(l, N, C));
    p.bwd.add(kRS, 1, token_block(l, N, C));
  }
  return p;
}

PassVolume row_linear_comm(
    const Tp1dLayout& l, int64_t N, int64_t C, bool bias) {
  PassVolume p;
  if (l.tp <= 1)
    return p;
  if (!l.token_split) {
    p.fwd.add(kAR, 1, N * C);
  } else {
    p.fwd.add(kRS, 1, token_block(l, N, C));
    // The bias gradient first (RowLinear1d::backward), then dY.
    if (bias)
      p.bwd.add(kAR, 1, C);
    p.bwd.add(kAG, 1, token_block(l, N, C));
  }
  return p;
}

PassVolume layernorm_comm(const Tp1dLayout& l, int64_t C) {
  PassVolume p;
  if (l.tp > 1 && l.token_split)
    p.bwd.add(kAR, 1, 2 * C);
  return p;
}

PassVolume attention_comm(const Tp1dLayout& l, int64_t N, int64_t C) {
  return column_linear_comm(l, N, C) + row_linear_comm(l, N, C, true);
}

PassVolume mlp_comm(const Tp1dLayout& l, int64_t N, int64_t C) {
  return column_linear_comm(l, N, C) + row_linear_comm(l, N, C, true);
}

PassVolume transformer_block_comm(const Tp1dLayout& l, int64_t N, int64_t C) {
  return layernorm_comm(l, C) + attention_comm(l, N, C) + layernorm_comm(l, C) +
         mlp_comm(l, N, C);
}

// The partial rows leave through the same region as a row-parallel
// output (without a bias).
PassVolume vocab_embedding_comm(const Tp1dLayout& l, int64_t N, int64_t C) {
  return row_linear_comm(l, N, C, false);
}

PassVolume vocab_lm_head_comm(const Tp1dLayout& l, int64_t N, int64_t C) {
  PassVolume p;
  if (l.tp <= 1)
    return p;
  p = layernorm_comm(l, C) + column_linear_comm(l, N, C);
  p.fwd += vocab_parallel_ce_comm(N);
  return p;
}

CommVolume vocab_parallel_ce_comm(int64_t N) {
  CommVolume v;
  v.add(kAR, 1, N, kFp32Bytes);      // row max
  v.add(kAR, 1, 2 * N, kFp64Bytes);  // sum of exp, target logit
  v.add(kAR, 1, N, kFp32Bytes);      // best probability
  v.add(kAR, 1, N, kFp64Bytes);      // -argmax index
  return v;
}

PassVolume patch_embedding_comm(const Tp1dLayout& l, int64_t N, int64_t C) {
  PassVolume p;
  if (l.tp > 1 && l.token_split)
    p.bwd.add(kAG, 1, token_block(l, N, C));
  return p;
}

PassVolume classifier_head_comm(const Tp1dLayout& l, int64_t N, int64_t C) {
  PassVolume p;
  if (l.tp > 1 && l.token_split)
    p.fwd.add(kAG, 1, token_block(l, N, C));
  return p;
}

PassVolume module_comm(
    const ModelShape& shape, int m, const Tp1dLayout& l, int64_t samples) {
  NDT_ASSERT(
      shape.tp == l.tp, "model shape for tp ", shape.tp, ", layout tp ", l.tp);
  const int64_t N = samples * shape.tokens_per_sample, C = shape.dim;
  switch (shape.modules.at(m).kind) {
    case ModuleKind::kFlatten:
    case ModuleKind::kLinear:
    case ModuleKind::kDropout:
      return {};
    case ModuleKind::kPatchEmbedding:
      return patch_embedding_comm(l, N, C);
    case ModuleKind::kTokenEmbedding:
      return vocab_embedding_comm(l, N, C);
    case ModuleKind::kTransformerBlock:
      return transformer_block_comm(l, N, C);
    case ModuleKind::kClassifierHead:
      // The MLP's head never sees a tp group (tp is 1 for the MLP).
      return classifier_head_comm(l, N, C);
    case ModuleKind::kLmHead:
      return vocab_lm_head_comm(l, N, C);
  }
  NDT_ASSERT(false, "invalid ModuleKind");
  return {};
}

}  // namespace ndt
