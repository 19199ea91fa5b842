// HeadPool: what a classifier head reads from the tokens (nn/head.h), also
// the value of the config key model.pool (io/config.h).
#pragma once

namespace ndt {

// kNone: the input is already one vector per sample (the MLP).
enum class HeadPool { kNone, kCls, kMean };

}  // namespace ndt
