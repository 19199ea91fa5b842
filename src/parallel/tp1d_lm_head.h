// Vocabulary-parallel language-model head of 1D tensor parallelism:
// LayerNorm, a projection to the vocabulary split by vocabulary rows over
// tp (column-parallel), and a vocabulary-parallel cross-entropy (Megatron's
// vocab_parallel_cross_entropy). Same parameters, names and init as the
// serial LmHead (nn/head.h), its oracle.
//
// No rank ever holds logits for the whole vocabulary: each keeps its
// [N, V/tp] block, and the softmax statistics are combined with
// all-reductions of [N] vectors (row max; sum of exp and the target's
// logit; for `correct`, the argmax as (max probability, lowest index)).
// Every rank ends with every token's loss: LossStats (loss_sum, count,
// correct) are the serial ones on each tp rank, so a caller must not sum
// them over tp.
//
// V = vocabulary, C = channels, T = tokens per sample, N = B x T,
// r = tp rank, tp = tp size.
//
//                        no token split           token split
//   x (input)            [B, T, C] replicated     [N/tp, C] my tokens
//   targets              int32 [B, T] (N ids), all tokens, both modes
//   ln.weight, ln.bias   [C] replicated           [C] replicated (grads
//                                                 all-reduced over tp)
//   out.weight           [V/tp, C]: rows [r V/tp, (r+1) V/tp), Shard(0)
//   logits (internal)    [N, V/tp]                [N, V/tp]
//   forward              all-reduce max [N], sum  all-gather LN output
//                        [2N] (fp64); for correct [N, C], then the same
//                        max [N] twice
//   backward             all-reduce dx [N, C]     reduce-scatter dx, all-
//                                                 reduce LN grads [2C]
//   dx (returned)        [B, T, C] replicated     [N/tp, C] my tokens
#pragma once

#include <cstdint>

#include "comm/process_group.h"
#include "nn/head.h"
#include "nn/layernorm.h"
#include "parallel/regions.h"

namespace ndt {

class VocabParallelLmHead final : public LossHead {
 public:
  // "<name>.ln.weight" / "<name>.ln.bias" [C] (ones / zeros, replicated),
  // "<name>.out.weight" [V, C] (local [V/tp, C], normal(init_std), no
  // bias). options.vocab must be divisible by tp.size() (ConfigError).
  // tokens_per_sample (T) shapes the all-gathered LN output in token-split
  // mode.
  VocabParallelLmHead(
      const LmHeadOptions& options,
      ProcessGroup& tp,
      bool token_split,
      int64_t tokens_per_sample);
  void forward(
      const Tensor& x,
      const Tensor& targets,
      Context& ctx,
      LossStats& stats) override;
  // d(scale * summed loss)/dx; accumulates every parameter gradient (+=).
  Tensor backward(Context& ctx, float scale) override;
  void collect_parameters(std::vector<Parameter*>& out) override;

 private:
  LmHeadOptions options_;
  ProcessGroup& tp_;
  bool token_split_;
  int64_t V_local_;
  int64_t v_begin_;  // first vocabulary row held here
  // LayerNorm; with token split wrapped in GroupGradSum (its parameter
  // gradients from my tokens are partial sums over tp).
  std::unique_ptr<Module> ln_;
  Parameter weight_;
  CopyToTp copy_;        // no token split
  GatherTokens gather_;  // token split (gradient is partial: reduce-scatter)
};

}  // namespace ndt
