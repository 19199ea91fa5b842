// Ulysses attention (ALGORITHMS.md 2.4, Jacobs et al. 2023): an
// all-to-all over the sp group turns my tokens of every head into every
// token of my heads, the serial attention core (nn/attention_core.h) runs
// on whole sequences for NH / N heads, and an all-to-all turns its output
// back.
//
// Dimensions: B = samples, T = T_global tokens per sample, N = ranks of the
// sp group, r = my rank in it, T_local = T / N (my contiguous chunk:
// SeqSplit::kContiguous), C = width, NH = heads (NH % N == 0), C_local =
// C / N (heads [r NH/N, (r+1) NH/N), columns [r C_local, (r+1) C_local)
// of each of q, k, v).
//
//                 per rank                comm on sp (per pass, N > 1)
//   qkv           [B, T_local, 3C]        fwd: all-to-all of qkv, block per
//   core input    [B, T, 3 C_local]            peer [B, T_local, 3 C_local];
//   core output   [B, T, C_local]              all-to-all of out, block
//   out           [B, T_local, C]              [B, T_local, C_local]
//   saved         the core's: [B, T, 3C_local] bwd: the same two, reversed
//                 and [B, NH/N, T, T]              (dout, then dqkv)
//
// At N = 1 it is the serial core (no communication). Parameters: none.
#pragma once

#include "comm/process_group.h"
#include "nn/attention_core.h"
#include "nn/module.h"

namespace ndt {

class UlyssesAttention final : public Module {
 public:
  // Throws ConfigError unless heads % sp.size() == 0.
  UlyssesAttention(int heads, bool causal, ProcessGroup& sp);
  Tensor forward(const Tensor& qkv, Context& ctx) override;
  Tensor backward(const Tensor& dout, Context& ctx) override;

 private:
  ProcessGroup& sp_;
  AttentionCore core_;  // my heads, whole sequences
};

}  // namespace ndt
