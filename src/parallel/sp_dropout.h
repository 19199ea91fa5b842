// Dropout on my tokens of a sequence split (nn/seq_split.h): each run of
// consecutive positions of each sample draws the serial mask of those
// positions, so every sequence-parallel layout drops what the serial run
// drops.
//
//   x, y  [B, T_local, C_x]  my tokens of B samples (global index of the
//                            first: RunState::sample_offset)
//         [B T_local / parts, C]  inside 1D tensor parallelism's token
//                            split (parallel.tp_seq, parallel/regions.h):
//                            block `part` of the B T_local tokens
//                            flattened in (sample, position) order
// With a feature split (2D, 2.5D, 3D tensor parallelism: tp2d_dropout.h)
// C_x = C / blocks is feature block `block` of each token, so a token's
// run starts at its feature block·C_x and tokens are C apart in the mask.
// No communication; no parameters.
#pragma once

#include <string>

#include "nn/dropout.h"
#include "nn/seq_split.h"

namespace ndt {

// How my block of each token's [B, T_local] activations is cut further.
struct SpDropoutSplit {
  int token_part = 0;  // 1D token split: my tp rank and the tp size
  int token_parts = 1;
  int feature_block = 0;  // feature split: my block and the block count
  int feature_blocks = 1;
};

class SpDropout final : public Dropout {
 public:
  SpDropout(
      const std::string& name,
      float p,
      const SeqShard& shard,
      const SpDropoutSplit& split = {});
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  // y = dropout(x) (backward: the same mask on dy), run by run.
  Tensor apply(const Tensor& x, const RunState& run, bool grad) const;
  SeqShard shard_;
  SpDropoutSplit split_;
};

}  // namespace ndt
