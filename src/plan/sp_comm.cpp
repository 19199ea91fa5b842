#include "plan/sp_comm.h"

#include "base/check.h"
#include "plan/sp_attention_cost.h"

namespace ndt {

GroupPasses sp_module_comm(
    const ModelShape& shape,
    int m,
    const ParallelConfig& parallel,
    int heads,
    int head_split,
    int64_t samples) {
  const int N = parallel.sp;
  const int64_t T = shape.tokens_per_sample, C = shape.dim;
  NDT_CHECK(
      N > 1 && T % N == 0,
      ConfigError,
      "sequence-parallel plan: ",
      T,
      " tokens over parallel.sp=",
      N);
  PassVolume v;
  switch (shape.modules.at(m).kind) {
    case ModuleKind::kTransformerBlock: {
      // My tensor-parallel share of the heads and their width.
      const SpAttentionShape s{
          N, samples, T, C / head_split, heads / head_split};
      switch (parallel.sp_attention) {
        case SpAttention::kRsa:
          v = rsa_attention_comm(s);
          break;
        case SpAttention::kRing:
          v = ring_attention_comm(s);
          break;
        case SpAttention::kUlysses:
          v = ulysses_attention_comm(s);
          break;
      }
      break;
    }
    case ModuleKind::kClassifierHead: {
      // My feature block of my samples' tokens (2D, 2.5D, 3D; 1D's
      // activations hold the whole width).
      const int64_t w = parallel.tp_mode == TpMode::k1d ? C : C / head_split;
      v.fwd.add(OpType::kAllGather, 1, samples * (T / N) * w);
      v.bwd.add(OpType::kBroadcast, 1, samples * T * w);
      break;
    }
    case ModuleKind::kFlatten:
    case ModuleKind::kLinear:
    case ModuleKind::kDropout:
    case ModuleKind::kPatchEmbedding:
    case ModuleKind::kTokenEmbedding:
    case ModuleKind::kLmHead:
      return {};
  }
  return {{"sp", v}};
}

}  // namespace ndt
