// Analytic costs of the sequence-parallel attention cores per layer and
// rank: the communication on the sp group in the ledger's units
// (comm_volume.h) in one forward and one backward, and the peak bytes the
// core allocates. Each formula follows its layer (parallel/
// ring_self_attention.h, ring_attention.h, ulysses_attention.h):
// change one, change the other; tests/plan/test_sp_attention_cost.cpp
// holds them to the ledgers.
//
// Shape letters: N = sp ranks, B = samples of the micro-batch, T = tokens
// per sample (global), T_local = T / N, C = width, NH = heads,
//   E  = B T_local C             one [B, T_local, C] block (elements)
//   S  = B NH T_local T          the score rows of my tokens (elements)
//   H  = B NH T_local            one value per (my token, head)
//
// Peak memory: the largest sum of the core's live allocations (every
// MemTag: activations and communication buffers) during its forward and
// its backward, in bytes before the allocator's size-class rounding. It
// counts the output (held by the caller through backward, as a model
// holds it), the saved state and the scratch, not the inputs qkv and dout.
#pragma once

#include <cstdint>

#include "nn/seq_split.h"
#include "plan/comm_volume.h"

namespace ndt {

struct SpAttentionShape {
  int N = 1;
  int64_t B = 0;
  int64_t T = 0;
  int64_t C = 0;
  int64_t heads = 0;
};

// Ring self-attention:
//   fwd: K ring and V ring: 2(N-1) sends and recvs of E
//   bwd: V ring and K ring as fwd; reduce-scatters of dV and dK parts
//        (block E; none at N = 1)
PassVolume rsa_attention_comm(const SpAttentionShape& s);
// 4 (2S + 2 N E + 7E): backward's K ring, with the probabilities and dS
// rows, the dV / dK parts of every chunk, out, dV, dqkv and two K buffers.
int64_t rsa_attention_peak_bytes(const SpAttentionShape& s);

// Ring attention (blockwise, online softmax):
//   fwd: (N-1) sends and recvs of K|V, 2E each
//   bwd: (N-1) of K|V and N of dK|dV, 2E each (none at N = 1)
PassVolume ring_attention_comm(const SpAttentionShape& s);
// 4 (12E + 2H + 2 threads q_len block): backward, with out, lse, D, dqkv,
// two K|V and two dK|dV buffers and two score tiles per thread; q_len =
// the tokens of one run of the split (T_local, or T_local / 2 zig-zag).
// threads: the threads that run (b, h) pairs at once.
int64_t ring_attention_peak_bytes(
    const SpAttentionShape& s, SeqSplit split, int block, int threads);

// Ulysses (N > 1; at N = 1 the serial core, no communication):
//   fwd: all-to-all of qkv (block 3E/N per peer), then of out (E/N)
//   bwd: all-to-all of dout (E/N), then of dqkv (3E/N)
PassVolume ulysses_attention_comm(const SpAttentionShape& s);
// N > 1: 4 max(2S + 8E, 13E): the core's backward (its saved input and
// probabilities, their gradients, out and dout in head split) or the
// all-to-all of dqkv (send, receive and result, 3E each). N = 1: 4 (2S +
// 4E), the serial core's backward.
int64_t ulysses_attention_peak_bytes(const SpAttentionShape& s);

}  // namespace ndt
