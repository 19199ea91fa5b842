// LAMB (You et al. 2019, arXiv 1904.00962, Algorithm 2), following the
// tensorflow-addons reference, with the trust ratio of the LOGICAL tensor
// when parameters are sharded (layer_norms.h). Per parameter, step t
// (1-based), lr from step(lr), wd = 0 for decay=false params:
//   m = b1 m + (1-b1) g;   v = b2 v + (1-b2) g^2
//   m^ = m / (1-b1^t), v^ = v / (1-b2^t)   (bias_correction; else m^ = m,
//                                           v^ = v, as Colossal-AI Lamb)
//   u = m^ / (sqrt(v^) + eps) + wd x        (eps outside the sqrt)
//   ratio = ||x|| / ||u||
//   ratio = min(ratio, trust_clip)          if trust_clip > 0
//   ratio = 1  if ||x|| = 0 or ||u|| = 0, or decay=false and
//              exclude_no_decay (the fallback is never clipped)
//   x -= lr ratio u
// ||x|| is taken before the update. Only a max clip is offered (the TF
// reference has none; DeepSpeed clamps to [0.01, 10]); no global grad
// pre-normalisation (apex NVLAMB): use optim.clip_grad_norm for that.
// State: "<param>.exp_avg", "<param>.exp_avg_sq".
#pragma once

#include "optim/layer_norms.h"
#include "optim/optimizer.h"

namespace ndt {

struct LambOptions {
  float beta1 = 0.9f;           // optim.beta1
  float beta2 = 0.999f;         // optim.beta2
  float eps = 1e-6f;            // optim.eps (LAMB's usual 1e-6)
  float weight_decay = 0.01f;   // optim.weight_decay
  bool bias_correction = true;  // optim.lamb_bias_correction
  float trust_clip = 0.0f;      // optim.trust_clip: max ratio, 0 = off
  // decay=false params (biases, norms) also skip layer adaptation (ratio
  // 1). They never get weight decay either way.
  bool exclude_no_decay = true;  // optim.exclude_no_decay
};

class Lamb final : public Optimizer {
 public:
  // `sum` sums per-tensor norms over sharded mesh axes; nullptr (serial)
  // is allowed only when no parameter is sharded (else NDT_ASSERT fails).
  Lamb(
      std::vector<Parameter*> params,
      const LambOptions& options,
      AxisSumFn sum = nullptr);
  void step(float lr) override;
  NamedState state() override;
  std::vector<std::string> state_suffixes() const override {
    return {".exp_avg", ".exp_avg_sq"};
  }
  // Trust ratio each parameter got in the last step (for logs and tests).
  const std::vector<double>& last_ratios() const {
    return ratios_;
  }

 private:
  LambOptions options_;
  PerTensorReducer reducer_;
  std::vector<Tensor> m_;
  std::vector<Tensor> v_;
  std::vector<double> norms_;  // per param: ||x||^2, ||u||^2 (fused)
  std::vector<double> ratios_;
};

}  // namespace ndt
