// Learning-rate schedules: linear warmup from 0 over `warmup` steps, then
// constant, cosine, linear or polynomial decay from `lr` to
// `lr * min_ratio` at `total` steps. `step` counts from 0 (the first
// update uses lr_at(0)).
#pragma once

#include <cstdint>

#include "optim/lr_decay.h"

namespace ndt {

struct LrScheduleOptions {
  float lr = 1e-3f;
  LrDecay decay = LrDecay::kCosine;
  int64_t warmup = 0;
  int64_t total = 1;
  float min_ratio = 0;
  float power = 2;
};

float lr_at(const LrScheduleOptions& options, int64_t step);

}  // namespace ndt
