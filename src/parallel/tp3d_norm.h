// LayerNorm3d: LayerNorm over the hidden dimension of side-A activations
// of 3D tensor parallelism (tp3d_cube.h: features split over "tp_out",
// samples over "tp_wt" x "tp_in"; ALGORITHMS.md 2.3, LayerNorm3D).
//
// Signature (N = rows of the flattened activation, C = hidden, f =
// coord("tp_out")):
//   x, y          [N/p^2, C/p]  samples block wt p + in, features block f
//   weight, bias  [C/p]         features block f, replicated over tp_wt
//                               and tp_in
// Forward: per-row sums of x and x^2 all-reduced over "tp_out" (fp64).
// Backward: per-row sums of dy*w and dy*w*xhat all-reduced over "tp_out";
// the weight and bias gradients of my rows all-reduced over {tp_wt, tp_in}
// (the ranks with the other samples). eps 1e-5, biased variance
// (torch.nn.LayerNorm).
#pragma once

#include <string>

#include "comm/mesh.h"
#include "nn/module.h"

namespace ndt {

class LayerNorm3d final : public Module {
 public:
  // C divisible by p: ConfigError naming the layer otherwise.
  LayerNorm3d(const std::string& name, int C, Mesh& mesh);
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;

  static constexpr float kEps = 1e-5f;

 private:
  ProcessGroup& features_;  // tp_out: the rest of my rows
  ProcessGroup& samples_;   // {tp_wt, tp_in}: the other samples
  int C_;
  Parameter weight_;
  Parameter bias_;
};

}  // namespace ndt
