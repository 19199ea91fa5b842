#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "optim/layer_norms.h"

namespace ndt {

AdamW::AdamW(std::vector<Parameter*> params, const AdamWOptions& options)
    : Optimizer(std::move(params)), options_(options) {
  for (Parameter* p : params_) {
    m_.push_back(Tensor::zeros(p->value.shape(), MemTag::kOptim));
    v_.push_back(Tensor::zeros(p->value.shape(), MemTag::kOptim));
  }
}

void AdamW::step(float lr) {
  squares_.resize(params_.size());
  update(lr, squares_.data());
}

void AdamW::step_with_grad_squares(
    float lr, std::vector<double>& grad_squares) {
  grad_squares.resize(params_.size());
  update(lr, grad_squares.data());
}

// One pass over each parameter: the update, and the grad's sum of squares
// over fixed chunks (bounds from n only) added in chunk order, so the sums
// do not depend on the thread count.
void AdamW::update(float lr, double* grad_squares) {
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
    const int64_t chunk = std::max(
        detail::kNormMinChunk,
        (n + detail::kNormMaxChunks - 1) / detail::kNormMaxChunks);
    const int64_t chunks = (n + chunk - 1) / chunk;
    double part[detail::kNormMaxChunks];
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const int64_t j1 = std::min(n, (ch + 1) * chunk);
      double s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t j = ch * chunk; j < j1; ++j) {
        const float gj = g[j];
        const float mj = b1 * m[j] + (1.0f - b1) * gj;
        const float vj = b2 * v[j] + (1.0f - b2) * gj * gj;
        m[j] = mj;
        v[j] = vj;
        p[j] = p[j] * decay - lr * (mj * c1) / (std::sqrt(vj * c2) + eps);
        s += double(gj) * gj;
      }
      part[ch] = s;
    }
    double total = 0;
    for (int64_t ch = 0; ch < chunks; ++ch)
      total += part[ch];
    grad_squares[i] = total;
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
