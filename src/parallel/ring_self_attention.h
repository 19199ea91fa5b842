// Ring self-attention (ALGORITHMS.md 2.4, Li et al. 2021): the attention
// core of the sequence-parallel group, on my contiguous chunk of every
// sample, with full score rows held locally.
//
// Dimensions: B = samples, T = T_global tokens per sample, N = ranks of the
// sp group, r = my rank in it, T_local = T / N (my tokens, global positions
// [r T_local, (r + 1) T_local): SeqSplit::kContiguous), C = width, NH =
// heads, hs = C / NH, E = B T_local C (one [B, T_local, C] block).
//
//           per rank                         comm on sp (per pass)
//   qkv     [B, T_local, 3C] (my tokens)
//   out     [B, T_local, C]
//   scores  [B, NH, T_local, T]  saved       fwd: K ring, V ring:
//                                                 (N-1) sends + recvs of E
//                                                 each
//                                            bwd: V ring, K ring as fwd;
//                                                 2 reduce-scatters of E
//
// Forward: K travels the ring and fills my score rows block by block
// (column block c = rank c's keys = global positions c T_local ..); mask,
// softmax over whole rows; then V travels and out = sum_c P[:, c] V_c.
// Backward (exact gradients of the serial attention, no 1/N factors):
//   dP[:, c] = dout V_c^T           V travels again
//   dS = P (dP - rowsum(dP P))      softmax backward on my full rows
//   dq = scale sum_c dS[:, c] K_c   K travels again
//   dV_c = sum_r P_r[:, c]^T dout_r, dK_c = scale sum_r dS_r[:, c]^T q_r:
//     every rank computes its contribution to every chunk c, and one
//     reduce-scatter each sums them into chunk c's owner.
// Memory: the score rows, O(B NH T^2 / N) per rank; ring_attention.h is
// the memory-lean form. Parameters: none.
#pragma once

#include "comm/process_group.h"
#include "nn/module.h"

namespace ndt {

class RingSelfAttention final : public Module {
 public:
  RingSelfAttention(int heads, bool causal, ProcessGroup& sp);
  Tensor forward(const Tensor& qkv, Context& ctx) override;
  Tensor backward(const Tensor& dout, Context& ctx) override;

 private:
  int heads_;
  bool causal_;
  ProcessGroup& sp_;
};

}  // namespace ndt
