// What ring attention's blockwise core costs beyond the serial attention
// core on this machine: the planner's MachineCost::ring_extra_s
// (plan/layout_search.h), measured by `ndtrain plan` for layouts with
// sequence parallelism's ring core.
#pragma once

#include "io/config.h"

namespace ndt {

// Seconds per sample and attention layer: forward and backward of
// RingAttention on one rank over the model's whole sequence (its heads,
// width and causality; the zig-zag split when causal) minus those of
// AttentionCore on the same input, each the median of a few runs after
// one untimed; this thread count. At sp = S a rank runs 1/S of that work
// (the splits balance it), so a layout's extra is this times its attention
// layers and samples per rank, over S and the mode's head split. A
// sequence longer than kRingCostMaxTokens is measured at kRingCostMaxTokens and
// scaled by (T / kRingCostMaxTokens)^2, the attention's work.
constexpr int64_t kRingCostMaxTokens = 1024;
double measure_ring_core_extra_seconds(const ModelConfig& model);

}  // namespace ndt
