// Builder: how models make their layers without knowing the parallel mode.
//
// A model (MLP, ViT, GPT) is written once against this interface. nn/
// provides SerialBuilder; parallel/ adds one builder per tensor-parallel
// mode later. The role of a linear layer tells a parallel builder how to
// split it: the first matmul of a pair (column split), the second (row
// split), or replicated.
#pragma once

#include <memory>
#include <string>

#include "nn/head.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace ndt {

enum class LinearRole { kFirst, kSecond, kReplicated };

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
};

class SerialBuilder final : public Builder {
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
};

}  // namespace ndt
