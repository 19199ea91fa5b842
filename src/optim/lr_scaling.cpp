#include "optim/lr_scaling.h"

#include <cmath>

#include "base/check.h"

namespace ndt {

float scaled_lr(
    float lr, LrScaling scaling, int64_t batch, int64_t base_batch) {
  auto ratio = [&] {
    NDT_ASSERT(
        batch >= 1 && base_batch >= 1,
        "scaled_lr: batch ",
        batch,
        ", base_batch ",
        base_batch);
    return static_cast<double>(batch) / static_cast<double>(base_batch);
  };
  switch (scaling) {
    case LrScaling::kNone:
      return lr;
    case LrScaling::kLinear:
      return static_cast<float>(lr * ratio());
    case LrScaling::kSqrt:
      return static_cast<float>(lr * std::sqrt(ratio()));
  }
  NDT_ASSERT(false, "invalid LrScaling ", static_cast<int>(scaling));
  return lr;
}

}  // namespace ndt
