// Sequence parallelism as a mode unit (DESIGN.md, "A parallel mode is a
// unit"): its mesh axis "sp" (innermost), its config checks, the split its
// tokens follow and its layer builder (sp_builder.h). parallel.sp ranks
// share every sample of a replica, each holding T / sp of its tokens;
// parallel.sp_attention picks the attention core (ALGORITHMS.md 2.4):
//   rsa      ring self-attention (contiguous chunks; full score rows)
//   ring     blockwise ring attention with online softmax (zig-zag split
//            for the causal GPT, contiguous for the ViT)
//   ulysses  all-to-all to a head split around the serial core
//
// With tensor parallelism every core runs on each rank's heads (1D: heads
// / tp; 2D, 2.5D: heads / q of the grid's samples; 3D: heads / p of the
// cube's), and Ulysses splits them further over sp; with 1D's
// sequence-split regions (parallel.tp_seq) the activations between
// attention and MLP cut each sp rank's tokens further over tp. Not built:
// sp with single-process data parallelism, or for the MLP (no tokens);
// each is a ConfigError.
#pragma once

#include <memory>

#include "comm/mesh.h"
#include "io/config.h"
#include "nn/builder.h"
#include "nn/seq_split.h"
#include "parallel/tensor_parallel_mode.h"

namespace ndt {

// The mesh axis {"sp", parallel.sp}, after checking the sequence-parallel
// keys against the rest of the config (ConfigError naming the keys).
MeshAxis sequence_parallel_axis(const Config& config);

// The split of every sample's tokens over sp: zig-zag for ring attention
// on a causal model (the GPT), contiguous otherwise.
SeqSplit sequence_split(const Config& config);

// My block [B, T / sp, C] of an activation [B, T, C] between layers (the
// pipeline's stage boundaries).
Shape sequence_local_activation(const Shape& global, int sp);

// My tokens of every sample (my coordinate on the mesh's sp axis).
SeqShard sequence_shard(const Config& config, const Mesh& mesh);

// The builder of my layers on the mesh's sp group (parallel.sp > 1).
std::unique_ptr<Builder> make_sequence_parallel_builder(
    const Config& config, Mesh& mesh);

}  // namespace ndt
