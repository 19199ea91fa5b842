// The Module contract and parameters.
//
//   Tensor forward(const Tensor& x, Context& ctx);   saves what backward needs
//   Tensor backward(const Tensor& dy, Context& ctx); accumulates param grads,
//                                                    returns dx
//
// One Context per (micro-batch, module): pipeline schedules keep several in
// flight and activation checkpointing can clear one and recompute it.
// Composite modules keep their children's contexts in ctx.child(i).
// Modules never communicate; parallel variants live in parallel/.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/layout.h"
#include "tensor/tensor.h"

namespace ndt {

// How a parameter is initialised from the counter RNG (key = seed + name,
// index = global element index), so init never depends on the layout.
enum class Init { kZeros, kOnes, kNormal };

struct InitSpec {
  Init kind = Init::kZeros;
  float std = 0.02f;
};

struct Parameter {
  std::string name;  // global module path, e.g. "blocks.0.attn.qkv.weight"
  Tensor value;      // local block, MemTag::kParams
  Tensor grad;       // same shape, MemTag::kGrads; accumulated with +=
  Layout layout;     // global shape and split
  bool decay =
      true;       // weight decay / layer adaptation apply (not biases, norms)
  InitSpec init;  // how init_parameter() fills it

  Parameter(std::string name, Shape shape, bool decay, InitSpec init);
};

// Step-level values a module may need (dropout keys, train/eval).
struct RunState {
  bool training = true;
  uint64_t seed = 0;
  int64_t step = 0;  // optimizer step
  // Index of this micro-batch's first sample within the step's global
  // batch: per-sample randomness (dropout) is keyed by global position.
  int64_t sample_offset = 0;
  // Set during forward and backward when someone may have communication
  // in flight (data parallelism's bucket reduces, ZeRO stage 3's parameter
  // broadcasts): composite modules call poll_comm() between their layers
  // so it advances while they compute.
  const std::function<void()>* comm_poll = nullptr;
  // Set during forward and backward when data parallelism works layer by
  // layer (its reduces, ZeRO's slots and stage 3's gathers): a module
  // whose parameters belong to several layers (Module::parameter_layers)
  // calls begin_layer() before each of them runs, in forward ascending
  // and in backward descending.
  const std::function<void(int layer, bool forward)>* layer_begin = nullptr;
};

// Runs run.comm_poll if set.
inline void poll_comm(const RunState& run) {
  if (run.comm_poll != nullptr)
    (*run.comm_poll)();
}

// Runs run.layer_begin if set: layer `layer` of the module is about to run.
inline void begin_layer(const RunState& run, int layer, bool forward) {
  if (run.layer_begin != nullptr)
    (*run.layer_begin)(layer, forward);
}

class Context {
 public:
  std::vector<Tensor>
      saved;     // tensors backward needs, in a module-defined order
  RunState run;  // copied in by the caller before forward
  // False when nobody consumes dx (first layer): backward may skip it and
  // return an undefined Tensor.
  bool need_input_grad = true;
  std::vector<int64_t> ints;  // small values backward needs (e.g. a size)
  // Activation checkpointing: the module's input, kept instead of `saved`
  // until backward recomputes the forward (Model::backward_range).
  Tensor recompute_input;

  // Context of child i, created on first use (inherits `run`).
  Context& child(size_t i);
  // Drops saved tensors here and in every child.
  void clear();

 private:
  std::vector<std::unique_ptr<Context>> children_;
};

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x, Context& ctx) = 0;
  virtual Tensor backward(const Tensor& dy, Context& ctx) = 0;
  // Appends this module's parameters (recursively) in a fixed order.
  virtual void collect_parameters(std::vector<Parameter*>& out) {
    (void)out;
  }
  std::vector<Parameter*> parameters() {
    std::vector<Parameter*> out;
    collect_parameters(out);
    return out;
  }
  // Per parameter (collect_parameters order): the layer of the module
  // that reads it, 0, 1, ... in forward order. A module with more than one
  // layer calls begin_layer() before each; by default every parameter is
  // read by layer 0, and the module's whole forward and backward read them.
  virtual std::vector<int> parameter_layers() {
    return std::vector<int>(parameters().size(), 0);
  }
};

// Fills p.value from the counter RNG per p.init, zeroes p.grad.
void init_parameter(Parameter& p, uint64_t seed);

}  // namespace ndt
