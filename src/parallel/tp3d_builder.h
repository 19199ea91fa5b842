// Tp3dBuilder: the model builder of 3D tensor parallelism (a p x p x p
// cube, tp3d_cube.h), so that the serial model definitions build their 3D
// form unchanged:
//
//   role / layer        layer built                   input side -> output
//   linear kFirst       Linear3d                      A -> B
//   linear kFirstQkv    Linear3d, blocks = 3 (q, k,   A -> B (heads block
//                       v each split)                 coord("tp_in"))
//   linear kSecond      Linear3d                      B -> A
//   linear kReplicated  ReplicatedLinear2d over       A -> whole features
//                       "tp_out", samples summed      of my samples
//                       over {tp_wt, tp_in}
//   layernorm           LayerNorm3d                   A
//   attention_core      AttentionCore over heads / p  B: my heads, my
//                                                     samples' whole rows
//   dropout             Dropout2d (features block     A
//                       coord("tp_out") of p)
//   token_embedding,    token/patch_embedding_        -> A (tables:
//   patch_embedding     sharded over "tp_out"         features block)
//   classifier_head     ClassifierHead built by this  A
//                       builder
//   lm_head             LmHead3d                      A
//
// Every block maps side A to side A (its two pairs of linears each swap
// twice), so the activations between blocks, and what pipeline stages
// send, are [B/p^2, T, C/p] on side A. The input layers take my side-A
// samples only (block coord("tp_wt") p + coord("tp_in") of p^2 of every
// micro-batch, TensorParallelMode::sample_rows), so loss statistics are
// summed over "tp_wt" and "tp_in".
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "comm/mesh.h"
#include "nn/builder.h"
#include "nn/seq_split.h"

namespace ndt {

class Tp3dBuilder final : public Builder {
 public:
  // mesh: axes "tp_out", "tp_in", "tp_wt" of equal size p (and any
  // others). Makes the cube's two-axis groups (collective over the world),
  // so every rank must construct the builder at the same point.
  // sp_tokens: under sequence parallelism (parallel/sp_builder.h), my
  // tokens of every sample: the token embedding then adds global positions
  // and dropout draws the serial mask of my tokens (SpDropout).
  explicit Tp3dBuilder(
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
  int p_;
  std::optional<SeqShard> sp_tokens_;
  SerialBuilder serial_;
};

}  // namespace ndt
