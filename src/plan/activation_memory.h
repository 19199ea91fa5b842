// Analytic activation memory of a transformer block per rank: the tensors
// one block (nn/transformer_block.h) holds from its training forward to
// its backward under the configured tensor-parallel mode, in bytes of the
// allocator's size classes (mem_block_bytes), as the ledger counts them.
// The block's output is its own; its input belongs to the layer before.
// Dropout keeps no mask (the counter RNG redraws it), a plain linear
// keeps its input, a GELU linear its input and the product before the
// GELU, LayerNorm its input and the mean and 1/std of every row, the
// serial attention core its q|k|v and the probabilities.
//
// Shape letters: B = samples of the micro-batch, T = tokens per sample,
// N = B T, C = width, F = MLP width, H = heads; per rank r rows of c
// features (f of the MLP), P = the probabilities of my samples and heads:
//
//   mode          r          c, f          P                  saved inputs
//   serial / 1d   N          C/tp, F/tp    B (H/tp) T^2       h1, h2 [N, C]
//   1d tp_seq     (N/tp)     C/tp, F/tp    B (H/tp) T^2       all-gathered
//                                                             h1, h2 [N, C]
//   2d, 2.5d      N/(q d)    C/q, F/q      B/(q d) (H/q) T^2  h1, h2 [r, c]
//   3d            N/p^2      C/p, F/p      B/p^2 (H/p) T^2    all-gathered
//                                                             X' [p r, ..]
//                                                             and weights W'
//
// per block: LayerNorm stats 4 x [r] (r = N/tp under tp_seq); h (the
// residual after attention) and y (the output) [r, C] in 1d ([N/tp, C]
// under tp_seq), [r, c] otherwise; qkv [r, 3c]; P; attention output
// [r, c] (3d: proj's X' [p r, c]); fc1 before and after GELU [r, f] each
// (3d: after GELU as fc2's X' [p r, f]); 3d also the gathered weights
// [3C/p, c], [C/p, c], [F/p, c], [C/p, f].
//
// Under sequence parallelism (parallel.sp > 1) a rank holds T_local =
// T / sp tokens of each sample: N = B T_local above, and the core is
// parallel.sp_attention's, on the mode's samples and heads. Ring self-
// attention and Ulysses (its serial core on the head split, then back to
// my tokens) save q|k|v and the probabilities of my queries against every
// key, P = B' H' T_local T; ring attention saves q|k|v, its output and the
// log-sum-exp of each of my rows and heads [B' H' T_local] in place of P,
// and under 3D its output besides proj's gathered copy [r, c].
//
// Not here: recompute, the input layer, the head, and the gradients of
// backward (step_activation_bytes has them).
#pragma once

#include <cstdint>
#include <vector>

#include "io/config.h"
#include "plan/model_shape.h"

namespace ndt {

// The element counts of the tensors above, one entry per tensor.
std::vector<int64_t> block_activation_tensors(
    const ModelShape& shape,
    const ParallelConfig& parallel,
    int heads,
    int64_t samples);

// Their bytes in the allocator's size classes.
int64_t block_activation_bytes(
    const ModelShape& shape,
    const ParallelConfig& parallel,
    int heads,
    int64_t samples);

// Whether step_activation_bytes covers the layout: one replica per process
// (not parallel.dp_mode=threads' replicas, which share one).
bool step_activation_modelled(const ParallelConfig& parallel);

// The activation peak of one training step per rank (where
// step_activation_modelled; ConfigError otherwise), in the allocator's
// size classes. The GPT and the ViT: every block's forward state and the
// embedding's output (and the ViT's patches), then the head's forward and
// backward (the LM head; the classifier head, with its gathers under
// tp_seq and sp) and the last block's backward, tensor by tensor in the
// order the layers allocate and free them; the largest live sum. The MLP:
// its layers' forward and backward, every tensor held as long as a layer
// or the step holds it.
// threads: train.threads (ring attention's backward holds a pair of score
// tiles per thread). sp_rank: the rank's place on sp (the ViT's head runs
// on sp rank 0).
// Under parallel.recompute=block the forward holds only the embedding's
// and every block's output, and the last block's forward state lives
// while that block runs forward, then again from its recomputed forward
// (after the LM head) through its backward.
// Pipelines (parallel.pp > 1; pp_rank: the rank's stage): each of the
// rank's chunks (virtual stages) alike on its blocks, the input layer on
// the first and the head on the last; the rank's instruction list of the
// schedule (parallel/pipeline/schedules.h) walked in order, each micro-
// batch's state held from its forward to its backward's end, a received
// activation from its receive, a received gradient through the backward
// it feeds, and each sent one until its send's wait (or, where a layer
// keeps it, the MLP's ReLU, its backward); the largest live sum of the
// walk and of each forward's and backward's peak inside it.
// samples: one micro-batch's (train.batch_size / dp / microbatches).
int64_t step_activation_bytes(
    const ModelShape& shape,
    const ParallelConfig& parallel,
    int heads,
    int64_t samples,
    float dropout,
    int threads,
    int sp_rank,
    int pp_rank = 0);

}  // namespace ndt
