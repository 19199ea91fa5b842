// Dropout on my tokens of a sequence split (nn/seq_split.h): each run of
// consecutive positions of each sample draws the serial mask of those
// positions, so every sequence-parallel layout drops what the serial run
// drops.
//
//   x, y  [B, T_local, C]   my tokens of B samples (global index of the
//                           first: RunState::sample_offset)
//         [B T_local / parts, C]   inside 1D tensor parallelism's token
//                           split (parallel.tp_seq, parallel/regions.h):
//                           block `part` of the B T_local tokens
//                           flattened in (sample, position) order
// No communication; no parameters.
#pragma once

#include <string>

#include "nn/dropout.h"
#include "nn/seq_split.h"

namespace ndt {

class SpDropout final : public Dropout {
 public:
  // part / parts: the tp rank and size of a token split (0 / 1: none).
  SpDropout(
      const std::string& name,
      float p,
      const SeqShard& shard,
      int part = 0,
      int parts = 1);
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  // y = dropout(x) (backward: the same mask on dy), run by run.
  Tensor apply(const Tensor& x, const RunState& run, bool grad) const;
  SeqShard shard_;
  int part_;
  int parts_;
};

}  // namespace ndt
