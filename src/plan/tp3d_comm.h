// Analytic communication of 3D tensor parallelism per layer, per rank, in
// the ledger's units (comm_volume.h), on the groups of the p x p x p cube
// (parallel/tp3d_cube.h): the three axes "tp_out", "tp_in", "tp_wt" and
// the two sample groups {tp_wt, tp_in} (side A's) and {tp_wt, tp_out}
// (side B's). ALGORITHMS.md 2.3 gives the pattern: every Linear3d gathers
// its input and its weight, and reduce-scatters its output.
//
// Shape letters: N = rows of the flattened activation (all p^2 sample
// blocks), IC / OC = input / output features, p = cube side.
#pragma once

#include <cstdint>

#include "plan/comm_volume.h"

namespace ndt {

struct Tp3dVolume {
  PassVolume out;        // tp_out
  PassVolume in;         // tp_in
  PassVolume wt;         // tp_wt
  PassVolume samples_a;  // {tp_wt, tp_in}
  PassVolume samples_b;  // {tp_wt, tp_out}

  bool operator==(const Tp3dVolume&) const = default;
};

Tp3dVolume operator+(const Tp3dVolume& a, const Tp3dVolume& b);

// Linear3d [N, IC] -> [N, OC] from side A (from_side_a; F = tp_out, G =
// tp_in, the output's samples on side B) or from side B (F = tp_in, G =
// tp_out):
//   fwd: G all-gather [N/p^2, IC/p] (x); tp_wt all-gather [OC/p^2, IC/p]
//        (the weight); F reduce-scatter into [N/p^2, OC/p]
//   bwd: F all-gather [N/p^2, OC/p] (dy); tp_wt reduce-scatter into
//        [OC/p^2, IC/p] (dW); need_dx: G reduce-scatter into [N/p^2,
//        IC/p]; bias: all-reduce [OC/p] over the output side's samples
Tp3dVolume linear3d_comm(
    int p,
    int64_t N,
    int64_t IC,
    int64_t OC,
    bool bias,
    bool from_side_a,
    bool need_dx = true);

// LayerNorm3d over C on [N, C] (side A):
//   fwd: tp_out all-reduce [2 N/p^2] fp64 (row sums of x, x^2)
//   bwd: tp_out all-reduce [2 N/p^2] fp64; side A's samples all-reduce
//        [2 C/p] (weight and bias gradients)
Tp3dVolume layernorm3d_comm(int p, int64_t N, int64_t C);

// Pre-LN TransformerBlock of width C and MLP width F (Tp3dBuilder): ln1,
// q/k/v (side A, C -> 3C, bias), proj (side B, C -> C, bias), ln2, fc1
// (side A, C -> F, bias), fc2 (side B, F -> C, bias); attention, dropout
// and the residual adds do not communicate.
Tp3dVolume transformer_block3d_comm(int p, int64_t N, int64_t C, int64_t F);

}  // namespace ndt
