// Pre-LN transformer block:
//   h = x + drop(proj(attn(qkv(ln1(x)))))
//   y = h + drop(fc2(gelu(fc1(ln2(h)))))
// Layers come from a Builder, so the same block serves every parallel mode.
// Parameter names under "<name>.": ln1, attn.qkv [3C, C], attn.proj [C, C],
// ln2, mlp.fc1 [F, C], mlp.fc2 [C, F] (each .weight / .bias).
// Shapes: x [B, T, C] -> y [B, T, C].
#pragma once

#include <memory>
#include <string>

#include "nn/builder.h"

namespace ndt {

struct TransformerBlockOptions {
  std::string name;
  int dim = 0;
  int heads = 0;
  int mlp_dim = 0;
  bool causal = false;
  float dropout = 0;
  float init_std = 0.02f;
  float proj_init_std = 0.02f;  // output projections (GPT-2 scales by depth)
};

class TransformerBlock final : public Module {
 public:
  TransformerBlock(const TransformerBlockOptions& options, Builder& builder);
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;
  // The layers with parameters in forward order: ln1, qkv, proj, ln2, fc1,
  // fc2 are layers 0 to 5 (begin_layer() runs before each).
  std::vector<int> parameter_layers() override;

 private:
  // In forward order; child context i belongs to layers_[i].
  enum Layer { kLn1, kQkv, kAttn, kProj, kDrop1, kLn2, kFc1, kFc2, kDrop2 };
  static constexpr int kLayers = 9;
  void zero_key_bias_grad();
  std::unique_ptr<Module> layers_[kLayers];
  // Per entry of layers_: its number among the layers with parameters, -1
  // when it has none.
  int param_layer_[kLayers];
};

}  // namespace ndt
