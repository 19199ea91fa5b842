// Analytic communication of 2D (SUMMA) tensor parallelism per layer, per
// rank, in the ledger's units (comm_volume.h), on the two groups of the
// q x q grid: the row group (the ranks of my row, mesh axis "tp_col") and
// the column group (the ranks of my column, mesh axis "tp_row"); see
// parallel/tp2d_linear.h. ALGORITHMS.md 2.1 gives the pattern: every GEMM
// is q steps of a broadcast along one group and a broadcast or reduce
// along the other.
//
// Shape letters: N = rows of the flattened activation (all q row blocks),
// IC / OC = input / output features, q = grid side.
#pragma once

#include <cstdint>

#include "plan/comm_volume.h"

namespace ndt {

struct Tp2dVolume {
  PassVolume row;  // the group of my row
  PassVolume col;  // the group of my column
};

// Linear2d [N, IC] -> [N, OC]:
//   fwd: row q broadcasts [N/q, IC/q] (x); col q broadcasts [OC/q, IC/q]
//        (w); bias: col all-gather [OC/q^2]
//   bwd: dW: row q broadcasts [N/q, IC/q], col q reduces [OC/q, IC/q];
//        dX (need_dx): col q broadcasts [OC/q, IC/q], row q reduces
//        [N/q, IC/q]; bias: col reduce-scatter [OC/q^2]
Tp2dVolume linear2d_comm(
    int q, int64_t N, int64_t IC, int64_t OC, bool bias, bool need_dx = true);

// LayerNorm2d over C on [N, C]:
//   fwd: row all-reduce [2 N/q] fp64 (row sums of x, x^2); col 2
//        all-gathers [C/q^2] (weight, bias)
//   bwd: row all-reduce [2 N/q] fp64; col 2 reduce-scatters [C/q^2]
Tp2dVolume layernorm2d_comm(int q, int64_t N, int64_t C);

Tp2dVolume operator+(const Tp2dVolume& a, const Tp2dVolume& b);

// Pre-LN TransformerBlock of width C and MLP width F (Tp2dBuilder): ln1,
// q/k/v (C -> 3C, bias), proj, ln2, fc1 (C -> F), fc2 (F -> C), every
// linear with bias and input gradient; attention, dropout and the
// residual adds do not communicate.
Tp2dVolume transformer_block2d_comm(int q, int64_t N, int64_t C, int64_t F);

}  // namespace ndt
