// Per-token layers in the token-split (sequence-parallel) regions of 1D
// tensor parallelism (ALGORITHMS.md 2.0, "With Megatron SP"): LayerNorm
// and dropout run on my tokens [N/tp, C] (regions.h, "Token split").
//
// Their parameters stay replicated over tp, but each rank's backward sees
// only its tokens, so the parameter gradients are partial sums:
// GroupGradSum (group_grad_sum.h) over tp all-reduces exactly what one
// backward call added. TokenSplitDropout draws the serial Dropout's mask
// for my tokens. Neither changes activations' layout, and neither
// communicates in forward.
//
// Dimensions: N = B*T tokens, T = tokens per sample, C = channels,
// tp = size of the tensor-parallel group, r = my rank in it.
#pragma once

#include <cstdint>
#include <string>

#include "comm/process_group.h"
#include "nn/dropout.h"
#include "nn/module.h"

namespace ndt {

// Dropout on my tokens x [N/tp, C] whose mask is the serial Dropout's
// (nn/dropout.h: key (seed, name, step), element e of the micro-batch at
// global index sample_offset * T * C + e) on those elements: my first
// element is e = r * (N/tp) * C. y, dx have x's shape; no communication;
// identity when p == 0 or when not training.
class TokenSplitDropout final : public Dropout {
 public:
  TokenSplitDropout(
      const std::string& name,
      float p,
      ProcessGroup& tp,
      int64_t tokens_per_sample);

 protected:
  uint64_t offset(const Tensor& x, const RunState& run) const override;

 private:
  ProcessGroup& tp_;
  int64_t T_;
};

}  // namespace ndt
