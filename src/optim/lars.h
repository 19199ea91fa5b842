// LARS: layer-wise adaptive rate scaling (You, Gitman, Ginsburg 2017,
// arXiv 1708.03888), with the trust ratio of the LOGICAL tensor when
// parameters are sharded (layer_norms.h). Per parameter, with lr from
// step(lr), momentum mu, weight decay wd (0 for decay=false params),
// trust_coef eta:
//   ratio = eta ||w|| / (||g|| + wd ||w|| + eps)
//   ratio = min(ratio, trust_clip)                          if trust_clip > 0
//   ratio = 1   if ||w|| = 0 or ||g|| = 0, or decay=false and
//               exclude_no_decay (the fallback is never clipped)
//   kPaper    (Algorithm 1, ratio inside the momentum; v starts at 0):
//     v = mu v + lr ratio (g + wd w);   w -= v
//   kColossal (Colossal-AI Lars: ratio outside the momentum; buf starts 0):
//     buf = mu buf + (g + wd w);        w -= lr ratio buf
// kColossal omits Colossal's element-wise clamp of (g + wd w) to [-10, 10];
// its ratio clamp to [0, 50] is trust_clip = 50. apex LARC (ratio folded
// into the grad before SGD, clip = min(ratio, 1) relative to lr) is not
// offered. ||w|| and ||g|| are the norms at the start of the step (raw g).
// State: "<param>.momentum_buffer" (v or buf), kept even when mu = 0.
#pragma once

#include "optim/layer_norms.h"
#include "optim/optimizer.h"

namespace ndt {

enum class LarsMode { kPaper, kColossal };

struct LarsOptions {
  LarsMode mode = LarsMode::kPaper;  // optim.lars_mode: paper | colossal
  float momentum = 0.9f;             // optim.momentum
  float weight_decay = 0.0f;         // optim.weight_decay
  float trust_coef = 0.001f;         // optim.trust_coef (eta)
  float eps = 1e-8f;                 // optim.eps (1e-8 as apex LARC)
  float trust_clip = 0.0f;           // optim.trust_clip: max ratio, 0 = off
  // decay=false params (biases, norms) also skip layer adaptation (ratio
  // 1). They never get weight decay either way.
  bool exclude_no_decay = true;  // optim.exclude_no_decay
};

class Lars final : public Optimizer {
 public:
  // `sum` sums per-tensor norms over sharded mesh axes; nullptr (serial)
  // is allowed only when no parameter is sharded (else NDT_ASSERT fails).
  Lars(
      std::vector<Parameter*> params,
      const LarsOptions& options,
      AxisSumFn sum = nullptr);
  void step(float lr) override;
  NamedState state() override;
  std::vector<std::string> state_suffixes() const override {
    return {".momentum_buffer"};
  }
  // Trust ratio each parameter got in the last step (for logs and tests).
  const std::vector<double>& last_ratios() const {
    return ratios_;
  }

 private:
  LarsOptions options_;
  PerTensorReducer reducer_;
  std::vector<Tensor> buf_;
  std::vector<double> norms_;  // per param: ||w||^2, ||g||^2 (fused)
  std::vector<double> ratios_;
};

}  // namespace ndt
