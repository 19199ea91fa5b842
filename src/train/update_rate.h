// The optimizer's update rate on this machine: the seconds one step of the
// configured optimizer takes per parameter, the planner's
// update_s_per_param (plan/layout_search.h) when `ndtrain plan` is not
// given one.
#pragma once

#include "io/config.h"

namespace ndt {

// Elements of the tensor measure_update_seconds_per_param() updates: 16
// MiB per state tensor, beyond the caches, as a model's parameters are.
constexpr int64_t kUpdateRateElements = int64_t{1} << 22;

// Median over a few steps (after one untimed) of `optim`'s update of one
// parameter of kUpdateRateElements elements with a gradient set, divided
// by its elements; this thread count (~0.05 s).
double measure_update_seconds_per_param(const OptimConfig& optim);

}  // namespace ndt
