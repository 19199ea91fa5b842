// Linear3d: the dense layer of 3D tensor parallelism (ALGORITHMS.md 2.3)
// on the p x p x p cube of tp3d_cube.h. Its input is on one side of the
// cube (F = the axis splitting the input's features, G = the input's
// second sample axis, W = "tp_wt"); its output is on the other side.
//
// Signature (n = rows of the flattened input on a rank = N/p^2; IC/OC =
// features; my coordinates w, g, f on W, G, F):
//   x      [.., IC/p]      samples block w p + g, features block f
//   weight [OC/p^2, IC/p]  stored [out, in]: out-block g (of `blocks`
//                          equal parts, each split), then its w-th sub-
//                          block; in-block f
//   bias   [OC/p]          out-block g, replicated over W and F
//   y      [.., OC/p]      samples block w p + f, features block g
// Forward: X' = all-gather of x over G ([p n, IC/p]: samples block w of
// p); W' = all-gather of the weight over W ([OC/p, IC/p]); Z = X' W'^T
// (partial over the in-blocks f); y = reduce-scatter of Z over F, plus the
// bias (with GELU fused when act is kGelu).
// Backward: dZ = all-gather of dy over F; dW' = dZ^T X', reduce-scattered
// over W into the weight gradient, posted asynchronously while dX' = dZ W'
// is formed and reduce-scattered over G into dx; the bias gradient (dy
// summed over my rows) is all-reduced over {W, F}.
// X' and W' are kept from the forward for the backward.
#pragma once

#include <string>

#include "comm/mesh.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "parallel/tp3d_cube.h"

namespace ndt {

class Linear3d final : public Module {
 public:
  // side: the input's side (the first linear of a pair takes kSideA, the
  // second kSideB). act: kNone or kGelu (needs bias). blocks > 1: the
  // output features are `blocks` equal parts (a fused [q; k; v]
  // projection: blocks = 3), each split over G. in_features divisible by
  // p, out_features by blocks p^2: ConfigError naming the layer.
  Linear3d(
      const std::string& name,
      int in_features,
      int out_features,
      bool bias,
      Act act,
      float init_std,
      Mesh& mesh,
      CubeSide side,
      int blocks = 1);
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;

 private:
  ProcessGroup& gather_;    // G
  ProcessGroup& reduce_;    // F
  ProcessGroup& weight_g_;  // W
  ProcessGroup& bias_g_;    // {W, F}
  int p_;
  int in_local_;   // IC / p
  int out_local_;  // OC / p
  bool has_bias_;
  Act act_;
  Parameter weight_;
  Parameter bias_;
};

}  // namespace ndt
