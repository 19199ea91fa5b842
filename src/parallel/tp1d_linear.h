// 1D (Megatron) tensor-parallel linear layers, ALGORITHMS.md 2.0: a
// column-parallel layer (weight split on its output features) followed by
// a row-parallel one (split on its input features) costs one all-reduce in
// forward and one in backward. With token_split (Megatron sequence
// parallelism) the copy / all-reduce pair becomes all-gather /
// reduce-scatter over the tokens, and the activations between blocks are
// my tokens [N/tp, C] (regions.h, "Token split").
//
// Each layer is the serial Linear on its local block plus the conjugate
// region modules of regions.h; communication is not re-implemented here.
// Parameters keep the serial names and init, with a sharded Layout, so
// init_parameter() draws the serial values for the local block.
//
// Dimensions: N = B*T tokens, T = tokens per sample, IC/OC = in/out
// features, tp = size of the tensor-parallel group, r = my rank in it.
#pragma once

#include <cstdint>
#include <string>

#include "comm/process_group.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "parallel/regions.h"

namespace ndt {

// y = act(x W^T + b) with W [OC, IC] split on OC.
//
//   weight  "<name>.weight"  local [OC/tp, IC]   Shard(0) on "tp"
//   bias    "<name>.bias"    local [OC/tp]       Shard(0) on "tp"
//   (blocks > 1: OC is `blocks` equal parts, e.g. the fused [q; k; v]
//    weight with blocks = 3; the local rows are my shard of every part,
//    concatenated: [q of my heads; k of my heads; v of my heads].)
//
//                 input x                  output y       fwd / bwd comm
//   replicated    [.., IC] (same on all)   [.., OC/tp]    - / all-reduce dx
//   token_split   [N/tp, IC] (my tokens)   [N/T, T, OC/tp]
//                                                  all-gather x /
//                                                  reduce-scatter dx
//
// dx has the input's shape. The activation is per element, so it runs on
// the column shard unchanged.
class ColumnLinear1d final : public Module {
 public:
  ColumnLinear1d(
      const std::string& name,
      int in_features,
      int out_features_global,
      bool bias,
      Act act,
      float init_std,
      ProcessGroup& tp,
      bool token_split,
      int64_t tokens_per_sample,
      int blocks = 1);
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;

  Parameter& weight() {
    return linear_.weight();
  }

 private:
  bool token_split_;
  CopyToTp copy_;
  GatherTokens gather_;
  Linear linear_;  // the local block: [OC/tp, IC]
};

// y = x W^T + b with W [OC, IC] split on IC; x is the output of a
// ColumnLinear1d (its columns of my shard).
//
//   weight  "<name>.weight"  local [OC, IC/tp]   Shard(1) on "tp"
//   bias    "<name>.bias"    local [OC]          replicated (Layout::full)
//
//                 input x_local        output y               fwd / bwd comm
//   replicated    [.., IC/tp]          [.., OC] (same on all) all-reduce / -
//   token_split   [N/T, T, IC/tp]      [N/tp, OC] (my tokens)
//                                              reduce-scatter /
//                                              all-gather dy
//
// The partial products x_local W_local^T are summed over tp first and the
// bias is added once, after the reduction. db: dy is replicated without
// token_split, so the local column sum is the full gradient; with
// token_split each rank sums only its tokens and the contribution is
// all-reduced over tp (grad += all_reduce(sum of my dy rows)).
class RowLinear1d final : public Module {
 public:
  RowLinear1d(
      const std::string& name,
      int in_features_global,
      int out_features,
      bool bias,
      float init_std,
      ProcessGroup& tp,
      bool token_split);
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;

  Parameter& weight() {
    return linear_.weight();
  }

 private:
  ProcessGroup& tp_;
  bool token_split_;
  bool has_bias_;
  ReduceFromTp reduce_;
  ScatterTokens scatter_;
  Linear linear_;  // the local block without bias: [OC, IC/tp]
  Parameter bias_;
};

}  // namespace ndt
