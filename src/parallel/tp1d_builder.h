// Tp1dBuilder: the model builder of 1D tensor parallelism (Megatron), so
// that the serial model definitions (nn/model.h) build their tensor-
// parallel form unchanged:
//
//   role / layer         layer built                        shard
//   linear kFirst        ColumnLinear1d                     out features
//   linear kFirstQkv     ColumnLinear1d, blocks = 3         heads of q, k, v
//   linear kSecond       RowLinear1d (+ all-reduce)         in features
//   linear kReplicated   Linear                             replicated
//   attention_core       AttentionCore over heads / tp      (local heads)
//   token_embedding      VocabParallelEmbedding             vocabulary rows
//   lm_head              VocabParallelLmHead (parallel CE)  vocabulary rows
//   layernorm, dropout, patch_embedding, classifier_head    replicated
//
// With token_split (parallel.tp_seq, Megatron sequence parallelism) the
// activations outside attention and MLP are my tokens [N / tp, C] (see
// parallel/regions.h): column-parallel layers all-gather their input and
// row-parallel layers reduce-scatter their output instead of all-reducing;
// LayerNorm sums its parameter gradients over tp (each rank saw only its
// tokens), dropout draws the serial mask of my tokens, the patch embedding
// keeps my tokens and the classifier head gathers them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/process_group.h"
#include "nn/builder.h"

namespace ndt {

class Tp1dBuilder final : public Builder {
 public:
  // tokens_per_sample: T of the model's [B, T, C] activations (token split
  // needs it to reassemble samples).
  Tp1dBuilder(ProcessGroup& tp, bool token_split, int64_t tokens_per_sample);

  std::unique_ptr<Module> linear(
      const std::string& name,
      int in_features,
      int out_features,
      bool bias,
      Act act,
      LinearRole role,
      float init_std) override;
  std::unique_ptr<Module> layernorm(const std::string& name, int C) override;
  std::unique_ptr<Module> attention_core(int heads, bool causal) override;
  std::unique_ptr<Module> dropout(const std::string& name, float p) override;
  std::unique_ptr<LossHead> classifier_head(
      const ClassifierHeadOptions& options) override;
  std::unique_ptr<LossHead> lm_head(const LmHeadOptions& options) override;
  std::unique_ptr<Module> token_embedding(
      const std::string& name,
      int vocab,
      int seq_len,
      int C,
      float init_std) override;
  std::unique_ptr<Module> patch_embedding(
      const PatchEmbeddingOptions& options) override;

 private:
  ProcessGroup& tp_;
  bool token_split_;
  int64_t T_;
  SerialBuilder serial_;  // replicated parts (heads' inner layers)
};

}  // namespace ndt
