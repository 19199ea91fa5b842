// SGD with momentum, Nesterov momentum and decoupled-from-nothing (L2)
// weight decay, as torch.optim.SGD:
//   g = grad + wd * p            (params with decay only)
//   buf = momentum * buf + g     (buf = g at the first step)
//   d = nesterov ? g + momentum * buf : buf
//   p -= lr * d
// State: "<param>.momentum_buffer" when momentum > 0.
#pragma once

#include "optim/optimizer.h"

namespace ndt {

struct SgdOptions {
  float momentum = 0.9f;
  bool nesterov = false;
  float weight_decay = 0;
};

class Sgd final : public Optimizer {
 public:
  Sgd(std::vector<Parameter*> params, const SgdOptions& options);
  void step(float lr) override;
  NamedState state() override;
  std::vector<std::string> state_suffixes() const override {
    if (options_.momentum > 0)
      return {".momentum_buffer"};
    return {};
  }

 private:
  SgdOptions options_;
  std::vector<Tensor> buf_;
};

}  // namespace ndt
