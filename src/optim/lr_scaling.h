// LrScaling: how the peak learning rate follows the global batch size, the
// value of the config key optim.scale_lr (io/config.h). With k =
// train.batch_size / optim.base_batch the rate is optim.lr times k (linear,
// Goyal et al. 2017, for SGD and LARS), sqrt(k) (square root, Hoffer et al.
// 2017 and You et al. 2020, for Adam-type rules and LAMB) or 1 (none).
#pragma once

#include <cstdint>

namespace ndt {

enum class LrScaling { kNone, kLinear, kSqrt };

// lr scaled from base_batch to batch (both >= 1 unless kNone, which
// returns lr).
float scaled_lr(float lr, LrScaling scaling, int64_t batch, int64_t base_batch);

}  // namespace ndt
