// Tp2dBuilder: the model builder of 2D tensor parallelism (SUMMA on a q x q
// grid, tp2d_linear.h), so that the serial model definitions (nn/model.h)
// build their 2D form unchanged:
//
//   role / layer        layer built                   block of rank (i, j)
//   linear kFirst,      Linear2d                      out-block j, in-block
//     kSecond                                         i
//   linear kFirstQkv    Linear2d, blocks = 3          heads block j of q, k,
//                                                     v; in-block i
//   linear kReplicated  ReplicatedLinear2d            whole (replicated)
//   layernorm           LayerNorm2d                   C/q^2 pieces
//   attention_core      AttentionCore over heads / q  my heads, my samples
//   dropout             Dropout2d                     serial mask, my block
//   token_embedding,    token_embedding_2d,           tables: features
//   patch_embedding     patch_embedding_2d            block j
//   classifier_head     ClassifierHead (nn/head.h)    its LayerNorm2d and
//                       built by this builder         ReplicatedLinear2d
//   lm_head             LmHead2d                      vocabulary block j,
//                                                     hidden block i
//
// Activations between layers are [B/q, T, C/q]: the samples of row-block i
// and the features of column-block j; attention then sees whole rows of
// its heads. The input layers take my samples only (the engine hands grid
// row i its row-block of every micro-batch, TensorParallelMode::
// sample_rows), so the loss head's LossStats cover row-block i, the same on
// every rank of my row.
//
// The classifier head keeps the serial composition: pooling and its
// LayerNorm on my block, then the features gathered along my row for a
// replicated linear to the classes (num_classes need not divide by q; the
// logits are [B/q, classes], small, and formed only for my samples). The
// LM head splits the vocabulary instead (LmHead2d), so no rank forms
// whole-vocabulary logits.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "comm/mesh.h"
#include "nn/builder.h"
#include "nn/seq_split.h"

namespace ndt {

class Tp2dBuilder final : public Builder {
 public:
  // mesh: axes "tp_row" x "tp_col" of equal size q (and any others). Makes
  // the two-axis group {"tp_col", "tp_row"} (collective over the world: the
  // norms and checkpoints of grid-sharded parameters use it), so every rank
  // must construct the builder at the same point.
  // sp_tokens: under sequence parallelism (parallel/sp_builder.h), my
  // tokens of every sample: the token embedding then adds global positions
  // and dropout draws the serial mask of my tokens (SpDropout).
  explicit Tp2dBuilder(
      Mesh& mesh, std::optional<SeqShard> sp_tokens = std::nullopt);

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
  Mesh& mesh_;
  int q_;
  std::optional<SeqShard> sp_tokens_;
  SerialBuilder serial_;
};

}  // namespace ndt
