// Vocabulary-parallel token embedding of 1D tensor parallelism (Megatron's
// VocabParallelEmbedding, ALGORITHMS.md 2.0): the token table is split by
// vocabulary rows over tp, the positional table is replicated. Each rank
// looks up the ids in its vocabulary range (zero rows elsewhere) and the
// partial rows are summed over tp. Same parameters, names and init as the
// serial TokenEmbedding (nn/embedding.h), its oracle. Does not split the
// batch: every rank receives all token ids.
//
// V = vocabulary, Tmax = positions, T = tokens per sample (<= Tmax),
// C = channels, N = B x T, r = tp rank, tp = tp size.
//
//                       no token split          token split
//   ids (input)         int32 [B, T], replicated on tp (both modes)
//   tokens.weight       [V/tp, C]: rows [r V/tp, (r+1) V/tp), Shard(0)
//   positions.weight    [Tmax, C], replicated
//   y (output)          [B, T, C] replicated    [N/tp, C] my tokens
//   forward             all-reduce [B, T, C]    reduce-scatter [B, T, C]
//   backward            none                    all-gather dy -> [B, T, C]
//   input gradient      none (undefined Tensor, like TokenEmbedding)
//
// The positions are added after the reduction, once; in token-split mode
// row j of rank r is global token g = r N/tp + j at position g mod T.
// Under sequence parallelism (sp_tokens) the ids are my tokens [B, T_local]
// of every sample (T = T_local above) and local token j sits at
// sp_tokens->global_position(j); a token split then cuts the B T_local
// tokens of the sequence-parallel rank.
#pragma once

#include <optional>
#include <string>

#include "comm/process_group.h"
#include "nn/layout.h"
#include "nn/module.h"
#include "nn/seq_split.h"
#include "parallel/regions.h"

namespace ndt {

// Layout of a [vocab, C] table split by vocabulary rows over tp: rank r
// holds rows [r vocab/tp, (r+1) vocab/tp) (Shard(0) on axis "tp").
Layout vocab_row_layout(int64_t vocab, int64_t C, const ProcessGroup& tp);

class VocabParallelEmbedding final : public Module {
 public:
  // "<name>.tokens.weight" [V, C] (local [V/tp, C]), decay, normal(std);
  // "<name>.positions.weight" [max_tokens, C], no decay, normal(std).
  // vocab must be divisible by tp.size() (ConfigError otherwise).
  VocabParallelEmbedding(
      const std::string& name,
      int vocab,
      int max_tokens,
      int C,
      float init_std,
      ProcessGroup& tp,
      bool token_split,
      std::optional<SeqShard> sp_tokens = std::nullopt);
  Tensor forward(const Tensor& ids, Context& ctx) override;
  // Accumulates both parameter gradients; returns an undefined Tensor.
  Tensor backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;

 private:
  // Position of row i (of `rows` per call; T tokens per sample).
  int64_t position(int64_t first, int64_t i, int64_t T) const;

  ProcessGroup& tp_;
  bool token_split_;
  std::optional<SeqShard> sp_tokens_;
  int C_;
  int64_t V_local_;
  int64_t v_begin_;  // first vocabulary row held here
  Parameter tokens_;
  Parameter positions_;
  ReduceFromTp reduce_;    // no token split
  ScatterTokens scatter_;  // token split
};

}  // namespace ndt
