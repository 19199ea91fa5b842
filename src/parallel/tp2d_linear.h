// Linear2d: the dense layer of 2D tensor parallelism (Optimus, SUMMA;
// ALGORITHMS.md 2.1) on a q x q grid of tensor-parallel ranks.
//
// Grid: device (i, j) is the rank with coordinate i on mesh axis "tp_row"
// and j on "tp_col". The ranks of my row (i fixed, ranked by j) are
// mesh.group("tp_col"); the ranks of my column (j fixed, ranked by i) are
// mesh.group("tp_row").
//
// Signature (N = rows of the flattened activation, IC/OC = features):
//   x      [.., IC/q]    N/q rows (row-block i: the leading dims flattened),
//                        column-block j of IC
//   weight [OC/q, IC/q]  stored [out, in]: out-block j, in-block i
//   bias   [OC/q^2]      global element j*(OC/q) + i*(OC/q^2) + k
//   y      [.., OC/q]    row-block i, out-block j (x's layout: layers chain)
//
// Forward, t = 0 .. q-1: broadcast x_(i,t) along my row from (i, t) and
// w_(t,j) along my column from (t, j); y += x_(i,t) w_(t,j)^T. The
// broadcasts of step t+1 are posted before the GEMM of step t (double
// buffers). The bias is all-gathered along my column into the [OC/q] slice
// of out-block j and added (with GELU fused when act is kGelu).
// Backward, for each t:
//   dx: broadcast w_(t,j) down my column; reduce dy w_(t,j) along my row
//       to (i, t);
//   dw: broadcast x_(i,t) along my row; reduce dy^T x_(i,t) along my
//       column to (t, j), added to its weight grad;
//   db: sum of dy over my rows, reduce-scattered along my column.
// Not here: LayerNorm, attention and the heads of the 2D mode.
#pragma once

#include <string>

#include "comm/mesh.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace ndt {

class Linear2d final : public Module {
 public:
  // act: kNone or kGelu (needs bias). blocks > 1: the output features are
  // `blocks` equal parts (a fused [q; k; v] projection: blocks = 3), each
  // split over the column index, so out-block j holds block j of every
  // part. in/out features divisible by q (and out by blocks x q^2 with a
  // bias): ConfigError naming the layer otherwise.
  Linear2d(
      const std::string& name,
      int in_features,
      int out_features,
      bool bias,
      Act act,
      float init_std,
      Mesh& mesh,
      int blocks = 1);
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;

 private:
  ProcessGroup& row_;  // the ranks of my row (rank = j)
  ProcessGroup& col_;  // the ranks of my column (rank = i)
  int q_;
  int in_local_;   // IC / q
  int out_local_;  // OC / q
  bool has_bias_;
  Act act_;
  Parameter weight_;
  Parameter bias_;
};

}  // namespace ndt
