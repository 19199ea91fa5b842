// Linear layer y = act(x W^T + b), W stored [out, in] like torch.nn.Linear.
//
// The activation (none, GELU, ReLU) is fused into the layer: bias + GELU
// runs as one pass after the GEMM. Parameters: "<name>.weight" [out, in],
// "<name>.bias" [out] (optional). Shapes: x [.., IC] -> y [.., OC].
#pragma once

#include <string>

#include "nn/act.h"
#include "nn/module.h"

namespace ndt {

class Linear final : public Module {
 public:
  Linear(
      const std::string& name,
      int in_features,
      int out_features,
      bool bias,
      Act act,
      float init_std);
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;

  Parameter& weight() {
    return weight_;
  }

 private:
  int in_;
  int out_;
  bool has_bias_;
  Act act_;
  Parameter weight_;
  Parameter bias_;
};

}  // namespace ndt
