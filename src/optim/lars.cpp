#include "optim/lars.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace ndt {

Lars::Lars(
    std::vector<Parameter*> params, const LarsOptions& options, AxisSumFn sum)
    : Optimizer(std::move(params)),
      options_(options),
      reducer_(params_, std::move(sum)),
      norms_(2 * params_.size()),
      ratios_(params_.size(), 1.0) {
  for (Parameter* p : params_) {
    NDT_ASSERT(
        p->value.shape() == p->layout.local_shape(),
        "LARS: '",
        p->name,
        "' holds ",
        shape_str(p->value.shape()),
        " but its layout says ",
        shape_str(p->layout.local_shape()));
    buf_.push_back(Tensor::zeros(p->value.shape(), MemTag::kOptim));
  }
}

void Lars::step(float lr) {
  const size_t np = params_.size();
  // Pass 1: local ||w||^2 and ||g||^2, then one sum per sharded-axis set.
  for (size_t i = 0; i < np; ++i) {
    const float* w = params_[i]->value.data();
    const float* g = params_[i]->grad.data();
    detail::fused_sums2(
        params_[i]->value.numel(),
        [w, g](int64_t j, double& a, double& b) {
          a += double(w[j]) * w[j];
          b += double(g[j]) * g[j];
        },
        norms_[2 * i],
        norms_[2 * i + 1]);
  }
  reducer_.reduce(norms_.data(), 2);

  // Pass 2: ratio in double, element update in fp32.
  const float mu = options_.momentum;
  const bool paper = options_.mode == LarsMode::kPaper;
  for (size_t i = 0; i < np; ++i) {
    Parameter& prm = *params_[i];
    const float wd = prm.decay ? options_.weight_decay : 0.0f;
    const bool adapt = prm.decay || !options_.exclude_no_decay;
    const double wn = std::sqrt(norms_[2 * i]);
    const double gn = std::sqrt(norms_[2 * i + 1]);
    double ratio = 1.0;
    if (adapt && wn > 0 && gn > 0) {
      ratio = double(options_.trust_coef) * wn /
              (gn + double(wd) * wn + double(options_.eps));
      if (options_.trust_clip > 0) {
        ratio = std::min(ratio, double(options_.trust_clip));
      }
    }
    ratios_[i] = ratio;
    const float scale = static_cast<float>(double(lr) * ratio);
    float* w = prm.value.data();
    const float* g = prm.grad.data();
    float* v = buf_[i].data();
    const int64_t n = prm.value.numel();
    if (paper) {
#pragma omp parallel for schedule(static)
      for (int64_t j = 0; j < n; ++j) {
        float vj = mu * v[j] + scale * (g[j] + wd * w[j]);
        v[j] = vj;
        w[j] -= vj;
      }
    } else {
#pragma omp parallel for schedule(static)
      for (int64_t j = 0; j < n; ++j) {
        float bj = mu * v[j] + (g[j] + wd * w[j]);
        v[j] = bj;
        w[j] -= scale * bj;
      }
    }
  }
  ++step_;
}

NamedState Lars::state() {
  NamedState s;
  for (size_t i = 0; i < params_.size(); ++i) {
    s.emplace_back(params_[i]->name + ".momentum_buffer", buf_[i]);
  }
  return s;
}

}  // namespace ndt
