// The exact quotient the plan's formulas split a size by: a / b, or a
// ConfigError naming `what` when b does not divide a.
#pragma once

#include <cstdint>

#include "base/check.h"

namespace ndt {

inline int64_t divide(int64_t a, int64_t b, const char* what) {
  NDT_CHECK(b > 0 && a % b == 0, ConfigError, what, ": ", a, " over ", b);
  return a / b;
}

}  // namespace ndt
