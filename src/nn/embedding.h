// Input layers: they take the batch (token ids or images) and produce the
// first activations. None of them returns an input gradient.
//
// Flatten:         images [B, C, H, W] -> [B, C*H*W] (MLP input).
// TokenEmbedding:  ids int32 [B, T] -> tokens[ids] + positions[:T], [B, T, C].
//   "<name>.tokens.weight" [V, C], "<name>.positions.weight" [Tmax, C].
// PatchEmbedding:  images [B, Cin, H, W] -> [B, Tok, D], Tok = patches (+1
//   class token), = Conv2d(Cin, D, P, stride P) + class token + positions.
//   "<name>.patch.weight" [D, Cin, P, P] (torch Conv2d layout),
//   "<name>.patch.bias" [D], "<name>.cls_token" [1, 1, D] (if used),
//   "<name>.positions" [1, Tok, D].
#pragma once

#include <string>

#include "nn/module.h"

namespace ndt {

class Flatten final : public Module {
 public:
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;
};

class TokenEmbedding final : public Module {
 public:
  TokenEmbedding(
      const std::string& name,
      int vocab,
      int max_tokens,
      int C,
      float init_std);
  Tensor forward(const Tensor& ids, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;

 private:
  int C_;
  Parameter tokens_;
  Parameter positions_;
};

struct PatchEmbeddingOptions {
  std::string name = "embed";
  int image_size = 28;
  int channels = 1;
  int patch = 7;
  int dim = 128;
  bool cls_token = true;
  float init_std = 0.02f;
};

class PatchEmbedding final : public Module {
 public:
  explicit PatchEmbedding(const PatchEmbeddingOptions& options);
  Tensor forward(const Tensor& images, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;
  int tokens() const {
    return num_patches_ + (options_.cls_token ? 1 : 0);
  }

 private:
  PatchEmbeddingOptions options_;
  int num_patches_;
  Parameter weight_;
  Parameter bias_;
  Parameter cls_;
  Parameter positions_;
};

}  // namespace ndt
