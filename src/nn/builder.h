// Builder: how models make their layers without knowing the parallel mode.
//
// A model (MLP, ViT, GPT) is written once against this interface. nn/
// provides SerialBuilder; parallel/ adds one builder per tensor-parallel
// mode. The role of a linear layer tells a parallel builder how to split
// it: the first matmul of a pair (column split), the fused q/k/v projection
// (a first matmul whose output is [q; k; v]: column split by heads), the
// second (row split), or replicated.
#pragma once

#include <memory>
#include <string>

#include "nn/embedding.h"
#include "nn/head.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace ndt {

enum class LinearRole { kFirst, kFirstQkv, kSecond, kReplicated };

class Builder {
 public:
  virtual ~Builder() = default;
  virtual std::unique_ptr<Module> linear(
      const std::string& name,
      int in_features,
      int out_features,
      bool bias,
      Act act,
      LinearRole role,
      float init_std) = 0;
  virtual std::unique_ptr<Module> layernorm(const std::string& name, int C) = 0;
  // qkv [B, T, 3C] -> [B, T, C].
  virtual std::unique_ptr<Module> attention_core(int heads, bool causal) = 0;
  virtual std::unique_ptr<Module> dropout(const std::string& name, float p) = 0;
  virtual std::unique_ptr<LossHead> classifier_head(
      const ClassifierHeadOptions& options) = 0;
  virtual std::unique_ptr<LossHead> lm_head(const LmHeadOptions& options) = 0;
  // Token ids [B, T] -> [B, T, C] (token + position embeddings).
  virtual std::unique_ptr<Module> token_embedding(
      const std::string& name,
      int vocab,
      int seq_len,
      int C,
      float init_std) = 0;
  // Images [B, channels, H, W] -> [B, tokens, C].
  virtual std::unique_ptr<Module> patch_embedding(
      const PatchEmbeddingOptions& options) = 0;
};

class SerialBuilder : public Builder {
 public:
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
};

}  // namespace ndt
