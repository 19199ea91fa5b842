// LayerNorm over the last dimension, eps 1e-5 (torch.nn.LayerNorm).
// Parameters "<name>.weight" [C] (ones), "<name>.bias" [C] (zeros), both
// excluded from weight decay. Shapes: x [.., C] -> y [.., C].
#pragma once

#include <string>

#include "nn/module.h"

namespace ndt {

class LayerNorm final : public Module {
 public:
  LayerNorm(const std::string& name, int C);
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;

  static constexpr float kEps = 1e-5f;

 private:
  int C_;
  Parameter weight_;
  Parameter bias_;
};

}  // namespace ndt
