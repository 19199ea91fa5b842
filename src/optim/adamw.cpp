#include "optim/adamw.h"

#include <cmath>

namespace ndt {

AdamW::AdamW(std::vector<Parameter*> params, const AdamWOptions& options)
    : Optimizer(std::move(params)), options_(options) {
  for (Parameter* p : params_) {
    m_.push_back(Tensor::zeros(p->value.shape(), MemTag::kOptim));
    v_.push_back(Tensor::zeros(p->value.shape(), MemTag::kOptim));
  }
}

void AdamW::step(float lr) {
  const int64_t t = step_ + 1;
  const float b1 = options_.beta1, b2 = options_.beta2, eps = options_.eps;
  const float c1 = 1.0f / (1.0f - static_cast<float>(std::pow(b1, t)));
  const float c2 = 1.0f / (1.0f - static_cast<float>(std::pow(b2, t)));
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& prm = *params_[i];
    float* p = prm.value.data();
    const float* g = prm.grad.data();
    float* m = m_[i].data();
    float* v = v_[i].data();
    const float decay = 1.0f - lr * (prm.decay ? options_.weight_decay : 0.0f);
    const int64_t n = prm.value.numel();
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < n; ++j) {
      float gj = g[j];
      float mj = b1 * m[j] + (1.0f - b1) * gj;
      float vj = b2 * v[j] + (1.0f - b2) * gj * gj;
      m[j] = mj;
      v[j] = vj;
      p[j] = p[j] * decay - lr * (mj * c1) / (std::sqrt(vj * c2) + eps);
    }
  }
  ++step_;
}

NamedState AdamW::state() {
  NamedState s;
  for (size_t i = 0; i < params_.size(); ++i) {
    s.emplace_back(params_[i]->name + ".exp_avg", m_[i]);
    s.emplace_back(params_[i]->name + ".exp_avg_sq", v_[i]);
  }
  return s;
}

}  // namespace ndt
