// ReplicatedLinear2d: the replicated-role linear layer (LinearRole::
// kReplicated) of 2D tensor parallelism, for small outputs that do not
// split over the grid (the ViT classifier's num_classes). Each rank of my
// grid row gathers the row's feature blocks into whole rows and applies
// the whole weight, so every rank of the row holds the same output: the
// logits of my samples, small (B/q x classes) and formed only on the ranks
// of my row. The weight is replicated on every grid rank (Layout::full);
// its gradient from my samples is summed over my column (the ranks with
// the other samples) by GroupGradSum, so the replicas stay identical.
//
// Signature (N = rows of the flattened activation, IC/OC = features; grid
// and groups as in tp2d_linear.h):
//   x       [.., IC/q]  row-block i, column-block j
//   weight  [OC, IC]    replicated; bias [OC] replicated
//   y       [.., OC]    row-block i, whole features, the same on my row
// Forward: all-gather along my row of x ([N/q, IC/q] per rank); a local
// Linear. Backward: dy must be the same on every rank of my row (it is
// when y feeds a replicated loss); dx is my column block of dy W, no
// communication; all-reduce along my column of the weight and bias
// gradients this call added.
#pragma once

#include <memory>
#include <string>

#include "base/fault.h"
#include "comm/mesh.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace ndt {

class ReplicatedLinear2d final : public Module {
 public:
  // Parameters as Linear ("<name>.weight" [OC, IC], "<name>.bias" [OC]).
  // in_features divisible by q: ConfigError naming the layer.
  ReplicatedLinear2d(
      const std::string& name,
      int in_features,
      int out_features,
      bool bias,
      Act act,
      float init_std,
      Mesh& mesh);
  // The same layer for any layout whose input features are split over the
  // ranks of `features` (in their rank order) and whose samples over the
  // ranks of `samples` (3D: "tp_out" and {"tp_wt", "tp_in"}); skip_fault
  // as GroupGradSum's.
  ReplicatedLinear2d(
      const std::string& name,
      int in_features,
      int out_features,
      bool bias,
      Act act,
      float init_std,
      ProcessGroup& features,
      ProcessGroup& samples,
      Fault skip_fault);
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;

 private:
  ProcessGroup& row_;               // the ranks of my row (rank = j)
  int in_local_;                    // IC / q
  std::unique_ptr<Module> linear_;  // Linear in GroupGradSum over my column
};

}  // namespace ndt
