// Dropout on my tokens of a sequence split (nn/seq_split.h): each run of
// consecutive positions of each sample draws the serial mask of those
// positions, so every sequence-parallel layout drops what the serial run
// drops.
//
//   x, y  [B, T_local, C]   my tokens of B samples (global index of the
//                           first: RunState::sample_offset)
// No communication; no parameters.
#pragma once

#include <string>

#include "nn/dropout.h"
#include "nn/seq_split.h"

namespace ndt {

class SpDropout final : public Dropout {
 public:
  SpDropout(const std::string& name, float p, const SeqShard& shard);
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  // y = dropout(x) (backward: the same mask on dy), run by run.
  Tensor apply(const Tensor& x, const RunState& run, bool grad) const;
  SeqShard shard_;
};

}  // namespace ndt
