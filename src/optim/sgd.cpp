#include "optim/sgd.h"

namespace ndt {

Sgd::Sgd(std::vector<Parameter*> params, const SgdOptions& options)
    : Optimizer(std::move(params)), options_(options) {
  if (options_.momentum > 0) {
    for (Parameter* p : params_) {
      buf_.push_back(Tensor::zeros(p->value.shape(), MemTag::kOptim));
    }
  }
}

void Sgd::step(float lr) {
  const float mu = options_.momentum;
  const bool first = step_ == 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& prm = *params_[i];
    float* p = prm.value.data();
    const float* g = prm.grad.data();
    const float wd = prm.decay ? options_.weight_decay : 0.0f;
    const int64_t n = prm.value.numel();
    if (mu == 0) {
#pragma omp parallel for schedule(static)
      for (int64_t j = 0; j < n; ++j)
        p[j] -= lr * (g[j] + wd * p[j]);
      continue;
    }
    float* b = buf_[i].data();
    const bool nesterov = options_.nesterov;
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < n; ++j) {
      float gj = g[j] + wd * p[j];
      float bj = first ? gj : mu * b[j] + gj;
      b[j] = bj;
      p[j] -= lr * (nesterov ? gj + mu * bj : bj);
    }
  }
  ++step_;
}

NamedState Sgd::state() {
  NamedState s;
  for (size_t i = 0; i < buf_.size(); ++i) {
    s.emplace_back(params_[i]->name + ".momentum_buffer", buf_[i]);
  }
  return s;
}

}  // namespace ndt
