// LmHead2d: the language-model head of 2D tensor parallelism: LayerNorm2d,
// the projection to the vocabulary as a SUMMA Linear2d (weight [V, C] in
// grid blocks: vocabulary block j, hidden block i), and a vocabulary-
// parallel cross-entropy over my grid row (vocab_parallel_ce.h). Same
// parameters, names and init as the serial LmHead (nn/head.h), its oracle.
//
// No rank forms the logits of the whole vocabulary: rank (i, j) holds the
// logits of my samples' tokens (row-block i) for vocabulary block j, and
// the softmax statistics are combined along my row. Every rank of my row
// ends with the loss of every token of row-block i, so a caller sums
// LossStats over the grid rows (mesh axis "tp_row") and not over my row.
//
// V = vocabulary, C = hidden, T = tokens per sample, B = samples of a
// micro-batch, N = B/q x T (my tokens); grid and groups as in
// tp2d_linear.h.
//   x (input)            [B/q, T, C/q]  row-block i, column-block j
//   targets              int32 [B/q, T] (my samples' ids)
//   ln.weight, ln.bias   [C/q^2] each (LayerNorm2d)
//   out.weight           [V/q, C/q]: vocabulary block j, hidden block i
//   logits (internal)    [N, V/q]
//   forward              LayerNorm2d; Linear2d (SUMMA); the cross-entropy's
//                        all-reductions of [N] / [2N] vectors along my row
//   backward             Linear2d and LayerNorm2d backward
//   dx (returned)        [B/q, T, C/q]
#pragma once

#include <cstdint>
#include <memory>

#include "comm/mesh.h"
#include "nn/head.h"

namespace ndt {

class LmHead2d final : public LossHead {
 public:
  // options.vocab and options.dim divisible by q, options.dim by q^2
  // (ConfigError naming the layer).
  LmHead2d(const LmHeadOptions& options, Mesh& mesh);
  void forward(
      const Tensor& x,
      const Tensor& targets,
      Context& ctx,
      LossStats& stats) override;
  // d(scale * summed loss)/dx; accumulates every parameter gradient (+=).
  Tensor backward(Context& ctx, float scale) override;
  void collect_parameters(std::vector<Parameter*>& out) override;

 private:
  ProcessGroup& row_;  // the ranks of my row (rank = j)
  int64_t V_local_;    // V / q
  int64_t v_begin_;    // first vocabulary id of my block
  std::unique_ptr<Module> ln_;
  std::unique_ptr<Module> out_;
};

}  // namespace ndt
