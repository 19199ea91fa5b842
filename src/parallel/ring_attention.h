// Ring attention: the memory-lean, blockwise attention core of the
// sequence-parallel group (ALGORITHMS.md 2.4, "Blockwise attention with
// online softmax"). K and V travel the ring; my queries meet each block
// one [tokens, block] score tile per head at a time, with online-softmax
// rescaling (ops::attention_tile_forward), so no [T_local, T] score block
// is ever held. Backward recomputes the probabilities from the saved row
// log-sum-exp.
//
// Dimensions: B = samples, T = T_global tokens per sample, N = ranks of the
// sp group, T_local = T / N, C = width, NH = heads, E = B T_local C.
//
//           per rank                         comm on sp (per pass)
//   qkv     [B, T_local, 3C] (my tokens      fwd: (N-1) sends + recvs of
//           of `split`, seq_split.h)              K|V [B, T_local, 2C]
//   out     [B, T_local, C]   saved          bwd: (N-1) of K|V and N of
//   lse     [B, NH, T_local]  saved               dK|dV [B, T_local, 2C]
//                                                 (N > 1; none at N = 1)
//
// Forward: at step s I hold rank (r - s)'s K|V; the transfer of step s + 1
// is posted before step s computes. Backward: K|V and their gradient
// accumulator dK|dV travel together; each rank adds its contribution and
// passes dK|dV on, so after N steps it arrives back at its owner.
//
// Causal attention wants SeqSplit::kZigzag: rank r holds chunks r and
// 2N-1-r of 2N, so every rank meets 2N-1 unmasked (query chunk, key chunk)
// pairs and 2 diagonal ones; pairs with the key chunk after the query chunk
// are skipped. With kContiguous, rank r meets r full pairs and one diagonal
// one (rank N-1 does ~2N-1 times the work of rank 0). The FLOP counters
// below measure it. Parameters: none.
#pragma once

#include <cstdint>

#include "comm/process_group.h"
#include "nn/module.h"
#include "nn/seq_split.h"

namespace ndt {

class RingAttention final : public Module {
 public:
  static constexpr int kDefaultBlock = 64;

  // block: keys per score tile (>= 1).
  RingAttention(
      int heads,
      bool causal,
      ProcessGroup& sp,
      SeqSplit split,
      int block = kDefaultBlock);
  Tensor forward(const Tensor& qkv, Context& ctx) override;
  Tensor backward(const Tensor& dout, Context& ctx) override;

  SeqSplit split() const {
    return split_;
  }
  // FLOPs of this rank's attention GEMMs (2 per multiply-add, recomputed
  // scores included) since construction or reset_flops().
  int64_t forward_flops() const {
    return forward_flops_;
  }
  int64_t backward_flops() const {
    return backward_flops_;
  }
  void reset_flops() {
    forward_flops_ = backward_flops_ = 0;
  }

 private:
  int heads_;
  bool causal_;
  ProcessGroup& sp_;
  SeqSplit split_;
  int block_;
  int64_t forward_flops_ = 0;
  int64_t backward_flops_ = 0;
};

}  // namespace ndt
