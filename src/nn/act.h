// Act: the activation fused into a linear layer (nn/linear.h), also the
// value of the config key model.activation (io/config.h).
#pragma once

namespace ndt {

enum class Act { kNone, kGelu, kRelu };

}  // namespace ndt
