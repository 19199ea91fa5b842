// Attention core: softmax(q k^T / sqrt(hs) [+ causal mask]) v on a packed
// qkv tensor. No parameters (the projections are Linear layers around it).
// Shapes: qkv [B, T, 3C] -> out [B, T, C]; saves the probabilities
// [B, NH, T, T] for backward.
#pragma once

#include "nn/module.h"

namespace ndt {

class AttentionCore final : public Module {
 public:
  AttentionCore(int heads, bool causal);
  Tensor forward(const Tensor& qkv, Context& ctx) override;
  Tensor backward(const Tensor& dout, Context& ctx) override;

 private:
  int heads_;
  bool causal_;
};

}  // namespace ndt
