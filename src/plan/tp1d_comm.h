// Analytic communication of 1D (Megatron) tensor parallelism per layer,
// per rank, on the tp group, in the ledger's units (comm_volume.h): what
// the layers of parallel/tp1d_*.h, built by Tp1dBuilder, ask of the group
// in one forward and one backward of one micro-batch of N tokens.
// ALGORITHMS.md 2.0 gives the pattern: a column-parallel layer's input
// region is copy (backward all-reduce of dX) or, with token split
// (parallel.tp_seq, Megatron sequence parallelism), all-gather (backward
// reduce-scatter); a row-parallel layer's output region is all-reduce or
// reduce-scatter (backward all-gather); parameters that stay replicated
// inside a token-split region have their gradients all-reduced over tp.
//
// Not here: the engine's reductions (loss, clipping: step_comm.h).
//
// Shape letters: N = tokens of the micro-batch (samples x T), C = model
// width (a layer's input or output features), tp = tensor-parallel ranks.
// With tp == 1 every function returns an empty volume (no tp group).
#pragma once

#include <cstdint>

#include "plan/comm_volume.h"
#include "plan/model_shape.h"

namespace ndt {

struct Tp1dLayout {
  int tp = 1;
  bool token_split = false;  // parallel.tp_seq
};

// ColumnLinear1d with C input features: its input region.
//   no split: fwd -; bwd all-reduce [N, C]
//   split:    fwd all-gather [N/tp, C]; bwd reduce-scatter [N/tp, C]
PassVolume column_linear_comm(const Tp1dLayout& l, int64_t N, int64_t C);

// RowLinear1d with C output features: its output region.
//   no split: fwd all-reduce [N, C]; bwd -
//   split:    fwd reduce-scatter [N/tp, C]; bwd all-gather [N/tp, C], and
//             with bias an all-reduce [C] of the bias gradient
PassVolume row_linear_comm(
    const Tp1dLayout& l, int64_t N, int64_t C, bool bias);

// LayerNorm over C (replicated). Split: bwd all-reduce [2C] of its
// parameter gradients (GroupGradSum); no split: nothing.
PassVolume layernorm_comm(const Tp1dLayout& l, int64_t C);

// Attention half of a block: qkv (column, by heads) -> attention core on
// the local heads (no communication) -> proj (row, with bias).
PassVolume attention_comm(const Tp1dLayout& l, int64_t N, int64_t C);

// MLP pair fc1 (column, C -> F) -> fc2 (row, F -> C, bias); F does not
// appear: the activations between the two stay sharded.
PassVolume mlp_comm(const Tp1dLayout& l, int64_t N, int64_t C);

// Pre-LN TransformerBlock: ln1, attention, ln2, MLP (dropout and residual
// adds are per token: no communication).
PassVolume transformer_block_comm(const Tp1dLayout& l, int64_t N, int64_t C);

// VocabParallelEmbedding: fwd all-reduce [N, C] of the partial rows (split:
// reduce-scatter into my tokens [N/tp, C]); bwd nothing (split: all-gather
// of dY [N/tp, C]).
PassVolume vocab_embedding_comm(const Tp1dLayout& l, int64_t N, int64_t C);

// VocabParallelLmHead: LayerNorm, the vocabulary projection's input region
// (as column_linear_comm over C), and the vocabulary-parallel
// cross-entropy: fwd all-reduces of the row max [N] (fp32), sum of exp and
// target logit [2N] (fp64), best probability [N] (fp32) and -argmax [N]
// (fp64); bwd nothing.
PassVolume vocab_lm_head_comm(const Tp1dLayout& l, int64_t N, int64_t C);
// The vocabulary-parallel cross-entropy alone on N rows (parallel/
// vocab_parallel_ce.h, any mode's group): fwd all-reduces [N] fp32, [2N]
// fp64, [N] fp32, [N] fp64; bwd nothing.
CommVolume vocab_parallel_ce_comm(int64_t N);

// ViT patch embedding (replicated). Split: its output is cut to my tokens,
// bwd all-gather of dY [N/tp, C]; no split: nothing.
PassVolume patch_embedding_comm(const Tp1dLayout& l, int64_t N, int64_t C);

// MLP / ViT classifier head (replicated). Split: fwd all-gather of my
// tokens [N/tp, C] (bwd keeps my tokens: nothing); no split: nothing.
PassVolume classifier_head_comm(const Tp1dLayout& l, int64_t N, int64_t C);

// Module m of `shape` on a micro-batch of `samples` samples (a switch over
// the module's kind). The tp of `shape` must equal l.tp.
PassVolume module_comm(
    const ModelShape& shape, int m, const Tp1dLayout& l, int64_t samples);

}  // namespace ndt
