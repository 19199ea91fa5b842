#include "optim/lamb.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace ndt {
namespace {

// u for one element. Both passes call this one function so that pass 2
// applies the u whose norm pass 1 measured.
inline float lamb_u(
    float m, float v, float x, float c1, float c2, float eps, float wd) {
  return (m * c1) / (std::sqrt(v * c2) + eps) + wd * x;
}

}  // namespace

Lamb::Lamb(
    std::vector<Parameter*> params, const LambOptions& options, AxisSumFn sum)
    : Optimizer(std::move(params)),
      options_(options),
      reducer_(params_, std::move(sum)),
      norms_(2 * params_.size()),
      ratios_(params_.size(), 1.0) {
  for (Parameter* p : params_) {
    NDT_ASSERT(
        p->value.shape() == p->layout.local_shape(),
        "LAMB: '",
        p->name,
        "' holds ",
        shape_str(p->value.shape()),
        " but its layout says ",
        shape_str(p->layout.local_shape()));
    m_.push_back(Tensor::zeros(p->value.shape(), MemTag::kOptim));
    v_.push_back(Tensor::zeros(p->value.shape(), MemTag::kOptim));
  }
}

void Lamb::step(float lr) {
  const size_t np = params_.size();
  const int64_t t = step_ + 1;
  const float b1 = options_.beta1, b2 = options_.beta2, eps = options_.eps;
  float c1 = 1.0f, c2 = 1.0f;
  if (options_.bias_correction) {
    c1 = static_cast<float>(1.0 / (1.0 - std::pow(double(b1), t)));
    c2 = static_cast<float>(1.0 / (1.0 - std::pow(double(b2), t)));
  }
  // Pass 1: update m and v, measure local ||x||^2 and ||u||^2; then one
  // sum per sharded-axis set for all parameters.
  for (size_t i = 0; i < np; ++i) {
    Parameter& prm = *params_[i];
    const float* x = prm.value.data();
    const float* g = prm.grad.data();
    float* m = m_[i].data();
    float* v = v_[i].data();
    const float wd = prm.decay ? options_.weight_decay : 0.0f;
    detail::fused_sums2(
        prm.value.numel(),
        [=](int64_t j, double& a, double& b) {
          const float gj = g[j];
          const float mj = b1 * m[j] + (1.0f - b1) * gj;
          const float vj = b2 * v[j] + (1.0f - b2) * gj * gj;
          m[j] = mj;
          v[j] = vj;
          const float u = lamb_u(mj, vj, x[j], c1, c2, eps, wd);
          a += double(x[j]) * x[j];
          b += double(u) * u;
        },
        norms_[2 * i],
        norms_[2 * i + 1]);
  }
  reducer_.reduce(norms_.data(), 2);

  // Pass 2: ratio in double, then x -= lr ratio u with u recomputed.
  for (size_t i = 0; i < np; ++i) {
    Parameter& prm = *params_[i];
    const float wd = prm.decay ? options_.weight_decay : 0.0f;
    const bool adapt = prm.decay || !options_.exclude_no_decay;
    const double xn = std::sqrt(norms_[2 * i]);
    const double un = std::sqrt(norms_[2 * i + 1]);
    double ratio = 1.0;
    if (adapt && xn > 0 && un > 0) {
      ratio = xn / un;
      if (options_.trust_clip > 0) {
        ratio = std::min(ratio, double(options_.trust_clip));
      }
    }
    ratios_[i] = ratio;
    const float scale = static_cast<float>(double(lr) * ratio);
    float* x = prm.value.data();
    const float* m = m_[i].data();
    const float* v = v_[i].data();
    const int64_t n = prm.value.numel();
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < n; ++j) {
      x[j] -= scale * lamb_u(m[j], v[j], x[j], c1, c2, eps, wd);
    }
  }
  ++step_;
}

NamedState Lamb::state() {
  NamedState s;
  for (size_t i = 0; i < params_.size(); ++i) {
    s.emplace_back(params_[i]->name + ".exp_avg", m_[i]);
    s.emplace_back(params_[i]->name + ".exp_avg_sq", v_[i]);
  }
  return s;
}

}  // namespace ndt
