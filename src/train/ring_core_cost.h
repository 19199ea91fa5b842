// What ring attention's blockwise core costs beyond the serial attention
// core on this machine: the planner's MachineCost::ring_extra_s
// (plan/layout_search.h), measured by `ndtrain plan` for layouts with
// sequence parallelism's ring core.
#pragma once

#include "io/config.h"

namespace ndt {

// Seconds per sample and attention layer: the forward, and the backward,
// of RingAttention on one rank over the model's whole sequence (its heads,
// width and causality; the zig-zag split when causal) minus those of
// AttentionCore on the same input, each the median over a few runs that
// time both, and at least 0 (on short sequences the difference is within
// the timer's noise; the ring core is never credited with less time than
// the serial one); this thread count. At sp = S a rank runs 1/S of that
// work (the splits balance it), so a layout's extra is this times its
// attention layers and samples per rank, over S and the mode's head split
// (the forward twice under recompute). A sequence longer than
// kRingCostMaxTokens is measured at kRingCostMaxTokens and scaled by
// (T / kRingCostMaxTokens)^2, the attention's work.
constexpr int64_t kRingCostMaxTokens = 1024;
struct RingCoreExtra {
  double forward_s = 0, backward_s = 0;
};
RingCoreExtra measure_ring_core_extra(const ModelConfig& model);

}  // namespace ndt
