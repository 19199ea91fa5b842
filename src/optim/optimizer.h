// Optimizer interface and the shared pieces of every optimizer.
//
// An optimizer updates a fixed list of Parameters from their accumulated
// grads. Its state (moments, momentum buffers, step count) is exported as
// named tensors "<param name>.<state>" for checkpoints and imported back
// exactly. Global norms are computed from each parameter's Layout
// (grad_norm.h), so they stay right when later work shards parameters.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace ndt {

using NamedState = std::vector<std::pair<std::string, Tensor>>;

class Optimizer {
 public:
  explicit Optimizer(std::vector<Parameter*> params)
      : params_(std::move(params)) {}
  virtual ~Optimizer() = default;
  // One update with learning rate `lr`; increments step().
  virtual void step(float lr) = 0;
  // step(lr), and in grad_squares each parameter's local sum of squares of
  // its grad as the update read it (params' order), for a reported norm
  // when nothing clips. This default sums in a pass of its own first;
  // optimizers that read every grad once override it to sum in that pass.
  virtual void step_with_grad_squares(
      float lr, std::vector<double>& grad_squares);
  // State tensors by name; load_state() requires the same names and shapes.
  virtual NamedState state() = 0;
  // What state() lists per parameter: its names are "<param name><suffix>"
  // for each suffix here, in this order (e.g. ".exp_avg", ".exp_avg_sq").
  virtual std::vector<std::string> state_suffixes() const = 0;
  // The parameters it updates, in the order state() lists them.
  const std::vector<Parameter*>& parameters() const {
    return params_;
  }
  void load_state(const NamedState& state, int64_t step);
  // The same, one tensor at a time: read(name) returns the tensor for each
  // name state() lists (checked against its shape) and it is copied in
  // before the next is read.
  void load_state(
      const std::function<Tensor(const std::string& name)>& read, int64_t step);
  int64_t step_count() const {
    return step_;
  }

 protected:
  std::vector<Parameter*> params_;
  int64_t step_ = 0;
};

}  // namespace ndt
