// LrDecay: the learning-rate decay after warmup (optim/lr_schedule.h), also
// the value of the config key optim.schedule (io/config.h).
#pragma once

namespace ndt {

enum class LrDecay { kConstant, kCosine, kLinear, kPolynomial };

}  // namespace ndt
