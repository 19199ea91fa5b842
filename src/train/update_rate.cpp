#include "train/update_rate.h"

#include "base/median.h"
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
  return median_seconds(kSteps, [&] { opt->step(optim.lr); }) /
         static_cast<double>(kUpdateRateElements);
}

}  // namespace ndt
