#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace ndt {

float lr_at(const LrScheduleOptions& o, int64_t step) {
  if (step < o.warmup) {
    return o.lr * static_cast<float>(step + 1) / static_cast<float>(o.warmup);
  }
  const double span = std::max<int64_t>(o.total - o.warmup, 1);
  const double t = std::min(1.0, (step - o.warmup) / span);  // 0 -> 1
  double f = 1.0;  // fraction of the way from min to max
  switch (o.decay) {
    case LrDecay::kConstant:
      return o.lr;
    case LrDecay::kCosine:
      f = 0.5 * (1.0 + std::cos(M_PI * t));
      break;
    case LrDecay::kLinear:
      f = 1.0 - t;
      break;
    case LrDecay::kPolynomial:
      f = std::pow(1.0 - t, o.power);
      break;
  }
  const double lo = o.lr * o.min_ratio;
  return static_cast<float>(lo + (o.lr - lo) * f);
}

}  // namespace ndt
