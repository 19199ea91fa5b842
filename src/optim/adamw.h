// AdamW (Loshchilov & Hutter), as torch.optim.AdamW:
//   p -= lr * wd * p                          (params with decay only)
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
// State: "<param>.exp_avg", "<param>.exp_avg_sq".
#pragma once

#include "optim/optimizer.h"

namespace ndt {

struct AdamWOptions {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
};

class AdamW final : public Optimizer {
 public:
  AdamW(std::vector<Parameter*> params, const AdamWOptions& options);
  void step(float lr) override;
  // The sums of squares come from the update's own pass over the grads.
  void step_with_grad_squares(
      float lr, std::vector<double>& grad_squares) override;
  NamedState state() override;
  std::vector<std::string> state_suffixes() const override {
    return {".exp_avg", ".exp_avg_sq"};
  }

 private:
  // Fills grad_squares[i] for every parameter i.
  void update(float lr, double* grad_squares);

  AdamWOptions options_;
  std::vector<Tensor> m_;
  std::vector<Tensor> v_;
  std::vector<double> squares_;  // step()'s, unused
};

}  // namespace ndt
