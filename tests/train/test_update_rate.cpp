// measure_update_seconds_per_param (train/update_rate.h): every optimizer's
// step over the calibration tensor, per element, in a range a machine can
// reach (a memory-bound update streams a few fp32 tensors: well under a
// microsecond per element, and more than a picosecond).
#include <gtest/gtest.h>

#include <cmath>

#include "train/update_rate.h"

namespace ndt {
namespace {

TEST(UpdateRate, EveryOptimizerTakesAPlausibleTimePerParameter) {
  for (OptimKind kind :
       {OptimKind::kSgd,
        OptimKind::kAdamw,
        OptimKind::kLars,
        OptimKind::kLamb}) {
    OptimConfig o;
    o.name = kind;
    const double s = measure_update_seconds_per_param(o);
    EXPECT_TRUE(std::isfinite(s)) << to_string(kind);
    EXPECT_GT(s, 1e-12) << to_string(kind);
    EXPECT_LT(s, 1e-6) << to_string(kind);
  }
}

}  // namespace
}  // namespace ndt
