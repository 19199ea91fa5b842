// GroupGradSum: a module whose parameters are replicated over a process
// group but whose backward on each rank of that group sees only part of
// the data (my tokens under 1D sequence-split regions; my samples under 2D
// tensor parallelism, where the group is the ranks of my grid column). The
// parameter gradients it adds are then partial sums over the group, and
// GroupGradSum all-reduces exactly what one backward call added.
//
//   input x (my part)  ->  inner's output (my part)
//   forward: inner, no communication
//   backward: inner; then one all-reduce over the group of the gradient the
//             call added to the inner parameters:
//             grad_after = grad_before + all_reduce(contribution)
//
// Parameters, names and layouts are the inner module's (the Layout of each
// must name no placement on the group's axis: the parameter is a replica
// there).
#pragma once

#include <memory>

#include "base/fault.h"
#include "comm/process_group.h"
#include "nn/module.h"

namespace ndt {

class GroupGradSum final : public Module {
 public:
  // skip_fault: the injected fault (base/fault.h) under which the
  // all-reduce is skipped, so that verify's failure can be shown.
  GroupGradSum(
      std::unique_ptr<Module> inner, ProcessGroup& group, Fault skip_fault);
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;

  Module& inner() {
    return *inner_;
  }

 private:
  std::unique_ptr<Module> inner_;
  ProcessGroup& group_;
  Fault skip_fault_;
};

}  // namespace ndt
