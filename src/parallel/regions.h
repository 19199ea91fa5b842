// The conjugate communication pairs of 1D tensor parallelism (Megatron's
// f / g operators, ALGORITHMS.md 2.0), each a Module whose backward is the
// conjugate of its forward, written once and used by every tensor-parallel
// layer:
//
//   CopyToTp      forward identity          backward all-reduce
//   ReduceFromTp  forward all-reduce        backward identity
//   SplitTokens   forward keep my tokens    backward all-gather
//   GatherTokens  forward all-gather        backward reduce-scatter (the
//                                           consumer's gradient is a partial
//                                           sum over tp: column-parallel) or
//                                           keep my tokens (it is replicated)
//   ScatterTokens forward reduce-scatter    backward all-gather
//
// Token split (sequence-split regions, parallel.tp_seq): the N = B x T
// tokens of a [B, T, C] activation, flattened in (sample, position) order,
// are cut into tp contiguous runs; rank r holds tokens [r N/tp, (r+1) N/tp)
// as a [N/tp, C] tensor. For B = 1 this is exactly a split of the sequence;
// per-token operations (LayerNorm, dropout, residual adds) run on any such
// split unchanged. Requires N divisible by tp.
#pragma once

#include "comm/process_group.h"
#include "nn/module.h"

namespace ndt {

class CopyToTp final : public Module {
 public:
  explicit CopyToTp(ProcessGroup& tp) : tp_(tp) {}
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  ProcessGroup& tp_;
};

class ReduceFromTp final : public Module {
 public:
  explicit ReduceFromTp(ProcessGroup& tp) : tp_(tp) {}
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  ProcessGroup& tp_;
};

// [B, T, C] (replicated) -> [B T / tp, C] (my tokens).
class SplitTokens final : public Module {
 public:
  explicit SplitTokens(ProcessGroup& tp) : tp_(tp) {}
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  ProcessGroup& tp_;
};

// [N / tp, C] (my tokens) -> [N / T, T, C] (all tokens), T = tokens per
// sample. grad_partial: the gradient arriving in backward is a partial sum
// over tp (reduce-scatter it); false: it is the same on every rank (keep
// my tokens).
class GatherTokens final : public Module {
 public:
  GatherTokens(ProcessGroup& tp, int64_t tokens_per_sample, bool grad_partial)
      : tp_(tp), T_(tokens_per_sample), grad_partial_(grad_partial) {}
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  ProcessGroup& tp_;
  int64_t T_;
  bool grad_partial_;
};

// [B, T, C] (partial sums over tp) -> [B T / tp, C] (my tokens, summed).
class ScatterTokens final : public Module {
 public:
  explicit ScatterTokens(ProcessGroup& tp) : tp_(tp) {}
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  ProcessGroup& tp_;
};

// Token-split helpers for layers that do their own communication.
// [B, T, C] -> rows [r N/tp, (r+1) N/tp) of its [N, C] view (shares storage).
Tensor my_tokens(const Tensor& full, int rank, int parts);
// all-gather of [N/tp, ...] token blocks into `shape` (numel N x ...).
Tensor all_gather_tokens(const Tensor& local, ProcessGroup& tp, Shape shape);
// reduce-scatter of a [N, ...] tensor into my [N/tp, ...] block.
Tensor reduce_scatter_tokens(const Tensor& full, ProcessGroup& tp);

}  // namespace ndt
