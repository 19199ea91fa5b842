#include "train/update_rate.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "train/factory.h"

namespace ndt {

double measure_update_seconds_per_param(const OptimConfig& optim) {
  Parameter p(
      "update_rate", Shape{kUpdateRateElements}, true, {Init::kNormal, 0.02f});
  init_parameter(p, 1);
  float* g = p.grad.data();
  for (int64_t i = 0; i < kUpdateRateElements; ++i)
    g[i] = 1e-3f * static_cast<float>(i % 97) - 0.05f;
  const std::unique_ptr<Optimizer> opt = make_optimizer(optim, {&p});
  constexpr int kSteps = 5;
  std::vector<double> s;
  for (int i = 0; i <= kSteps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    opt->step(optim.lr);
    const double dt =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    if (i > 0)
      s.push_back(dt);
  }
  std::sort(s.begin(), s.end());
  return s[s.size() / 2] / static_cast<double>(kUpdateRateElements);
}

}  // namespace ndt
