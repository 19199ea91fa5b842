// LayerNorm2d: LayerNorm over the hidden dimension when it is split along
// the rows of the q x q grid of 2D tensor parallelism (ALGORITHMS.md 2.1,
// LayerNorm2D; grid and groups as in tp2d_linear.h).
//
// Signature (N = rows of the flattened activation, C = hidden):
//   x, y              [N/q, C/q]  row-block i, column-block j
//   weight, bias      [C/q^2]     global element j*(C/q) + i*(C/q^2) + k
// Forward: per-row sums of x and x^2 all-reduced along my row (fp64), the
// affine slice [C/q] all-gathered along my column. Backward: per-row sums
// of dy*w and dy*w*xhat all-reduced along my row; the weight and bias
// gradients of my slice, summed over my rows, reduce-scattered along my
// column. eps 1e-5, biased variance (torch.nn.LayerNorm).
#pragma once

#include <string>

#include "comm/mesh.h"
#include "nn/module.h"

namespace ndt {

class LayerNorm2d final : public Module {
 public:
  // C divisible by q^2: ConfigError naming the layer otherwise.
  LayerNorm2d(const std::string& name, int C, Mesh& mesh);
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;

  static constexpr float kEps = 1e-5f;

 private:
  ProcessGroup& row_;  // the ranks of my row
  ProcessGroup& col_;  // the ranks of my column
  int C_;
  Parameter weight_;
  Parameter bias_;
};

}  // namespace ndt
