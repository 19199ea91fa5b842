// LmHead3d: the language-model head of 3D tensor parallelism: LayerNorm3d,
// the projection to the vocabulary as a Linear3d from side A to side B
// (tp3d_cube.h), and a vocabulary-parallel cross-entropy over "tp_in"
// (vocab_parallel_ce.h). Same parameters, names and init as the serial
// LmHead (nn/head.h), its oracle.
//
// No rank forms the logits of the whole vocabulary. The logits come out on
// side B (samples block wt p + out, vocabulary block coord("tp_in")), so
// the head takes the targets of those samples (an all-gather of my
// samples' ids over "tp_in"), and its loss statistics are those of side
// B's samples, the same on every rank of "tp_in". They are handed back for
// my side-A samples (block wt p + in), as every 3D layer's caller sums
// LossStats over "tp_wt" and "tp_in": rank (wt, in, out) keeps its
// statistics when out == in, zero otherwise, and the sum over "tp_out"
// (3 doubles) gives each rank those of block wt p + in.
//
// V = vocabulary, C = hidden, T = tokens per sample, B = samples of a
// micro-batch, n = B/p^2:
//   x (input)            [n, T, C/p]   side A
//   targets              int32 [n, T]  my (side-A) samples' ids
//   ln.weight, ln.bias   [C/p] each (LayerNorm3d)
//   out.weight           [V/p^2, C/p]  (Linear3d: vocabulary block in,
//                                       its sub-block wt; hidden block out)
//   logits (internal)    [n T, V/p]    side B
//   dx (returned)        [n, T, C/p]   side A
#pragma once

#include <cstdint>
#include <memory>

#include "comm/mesh.h"
#include "nn/head.h"

namespace ndt {

class LmHead3d final : public LossHead {
 public:
  // options.vocab divisible by p^2 and options.dim by p (ConfigError
  // naming the layer).
  LmHead3d(const LmHeadOptions& options, Mesh& mesh);
  void forward(
      const Tensor& x,
      const Tensor& targets,
      Context& ctx,
      LossStats& stats) override;
  // d(scale * summed loss)/dx; accumulates every parameter gradient (+=).
  Tensor backward(Context& ctx, float scale) override;
  void collect_parameters(std::vector<Parameter*>& out) override;

 private:
  ProcessGroup& in_;         // tp_in: the vocabulary split, my ids' gather
  ProcessGroup& out_group_;  // tp_out: the statistics' hand-back
  int64_t V_local_;          // V / p
  int64_t v_begin_;          // first vocabulary id of my block
  bool keep_stats_;          // coord("tp_out") == coord("tp_in")
  std::unique_ptr<Module> ln_;
  std::unique_ptr<Module> out_;
};

}  // namespace ndt
