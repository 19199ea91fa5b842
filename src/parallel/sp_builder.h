// SpBuilder: the model builder of sequence parallelism, so that the serial
// model definitions (nn/model.h) build their sequence-parallel form
// unchanged. Activations between layers are my tokens [B, T_local, C] of
// the split (nn/seq_split.h) the attention core runs on. Every parameter
// is replicated over sp, and since each rank sees only its tokens, the
// engine sums the gradients over sp (with dp).
//
// With 1D tensor parallelism (tp > 1; sequence_parallel.h checks the
// config) the per-token layers are Tp1dBuilder's on my tokens, the
// attention core (any of the three) runs on heads / tp heads and the token
// embedding is vocabulary-parallel at global positions. With its
// sequence-split regions as well (parallel.tp_seq) the activations outside
// attention and MLP are block tp-rank of my B T_local tokens,
// [B T_local / tp, C] (parallel/regions.h): the linears gather and scatter
// them over tp as alone, dropout draws the serial mask of that block, the
// patch embedding keeps it, and the classifier head gathers it over tp
// before its gather over sp.
//
// With 2D, 2.5D or 3D tensor parallelism the per-token layers are the
// grid's builder's (Tp2dBuilder, Tp3dBuilder), made with my tokens: the
// activations are [B', T_local, C'] (the mode's samples and feature
// block), its token embedding adds global positions, its dropout draws
// the serial mask of my tokens' feature block; the attention core runs
// on the mode's heads (heads / q, heads / p), the patch embedding keeps
// my tokens of the grid's, and the classifier head is the grid's on sp
// rank 0 (every rank of that grid has sp rank 0, so its collectives run).
//
//   layer              built                                comm
//   linear, layernorm  serial, Tp1dBuilder's (tp > 1) or    tp: the
//                      the grid's                           mode's
//   attention_core     RingSelfAttention | RingAttention |  sp: per
//                      UlyssesAttention (parallel.sp_attention) algorithm
//   dropout            SpDropout (the serial mask of my      -
//                      tokens, or of my tp block of them)
//   token_embedding    SpTokenEmbedding (global positions;  tp: 1D's
//                      the data path gives my tokens), or
//                      VocabParallelEmbedding at them (tp > 1)
//   patch_embedding    SpTokensOf(serial): my tokens (and    -
//                      SplitOutput over tp: tp_seq)
//   lm_head            serial, or VocabParallelLmHead (tp), tp: 1D's
//                      on my tokens (loss over my tokens;
//                      the engine sums over sp)
//   classifier_head    serial on sp rank 0, fed every token sp: fwd all-
//                      (pooling needs them); the others     gather of my
//                      add no loss and no gradient          tokens; bwd
//                                                           broadcast of dx
#pragma once

#include <memory>
#include <string>

#include "comm/process_group.h"
#include "io/config.h"
#include "nn/builder.h"
#include "nn/seq_split.h"

namespace ndt {

class SpBuilder final : public Builder {
 public:
  // shard: my tokens of every sample (rank and size of `sp`); tp: the 1D
  // tensor-parallel group (one rank: none); token_split: its sequence-split
  // regions (parallel.tp_seq; needs tp > 1).
  SpBuilder(
      ProcessGroup& sp,
      SpAttention attention,
      const SeqShard& shard,
      ProcessGroup& tp,
      bool token_split = false);
  // 2D, 2.5D, 3D: grid, the mode's builder made with `shard`; its
  // attention cores hold heads / head_split heads.
  SpBuilder(
      ProcessGroup& sp,
      SpAttention attention,
      const SeqShard& shard,
      std::unique_ptr<Builder> grid,
      int head_split);

  std::unique_ptr<Module> linear(
      const std::string& name,
      int in_features,
      int out_features,
      bool bias,
      Act act,
      LinearRole role,
      float init_std) override;
  std::unique_ptr<Module> layernorm(const std::string& name, int C) override;
  std::unique_ptr<LossHead> lm_head(const LmHeadOptions& options) override;
  std::unique_ptr<Module> attention_core(int heads, bool causal) override;
  std::unique_ptr<Module> dropout(const std::string& name, float p) override;
  std::unique_ptr<LossHead> classifier_head(
      const ClassifierHeadOptions& options) override;
  std::unique_ptr<Module> token_embedding(
      const std::string& name,
      int vocab,
      int seq_len,
      int C,
      float init_std) override;
  std::unique_ptr<Module> patch_embedding(
      const PatchEmbeddingOptions& options) override;

 private:
  ProcessGroup& sp_;
  SpAttention attention_;
  SeqShard shard_;
  ProcessGroup* tp_;  // 1D (one rank: none); null with a grid
  bool token_split_ = false;
  int head_split_;
  SerialBuilder serial_;
  // linear, layernorm, lm_head; with a grid (tp_ null) all but the
  // attention core.
  std::unique_ptr<Builder> per_token_;
};

}  // namespace ndt
