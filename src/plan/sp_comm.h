// Analytic communication of one module of the model under sequence
// parallelism (parallel.sp = N > 1, parallel/sp_builder.h), per rank and
// micro-batch, on the mesh group "sp", in the ledger's units
// (comm_volume.h):
//
//   embeddings, linears, LayerNorms, dropout, the LM head   none (per token)
//   transformer block   its attention core (sp_attention_cost.h) on my
//                       samples, all T tokens, model.heads / h heads of
//                       width C / h (h: the tensor-parallel mode's head
//                       split, TensorParallelMode::head_split; 1 without)
//   classifier head     fwd all-gather of my [samples, T/N, C/h'];
//   (ViT: pooling)      bwd broadcast of sp rank 0's input gradient
//                       [samples, T, C/h'] (h' = h for 2D, 2.5D and 3D,
//                       whose activations hold a feature block; 1 for 1D)
//
// Weights are replicated over sp: their gradient reduction is data
// parallelism's (step_comm.h adds "sp" to its group). With 1D tensor
// parallelism of any mode its layers' communication is mode_comm.h's on
// my tokens (step_comm.h adds it).
#pragma once

#include <cstdint>

#include "io/config.h"
#include "plan/mode_comm.h"
#include "plan/model_shape.h"

namespace ndt {

// Module m of `shape` (model_shape(config.model, parallel)) on the
// `samples` samples of a micro-batch one rank holds (the tensor-parallel
// mode's block of them); `heads` is model.heads, `head_split` the mode's.
GroupPasses sp_module_comm(
    const ModelShape& shape,
    int m,
    const ParallelConfig& parallel,
    int heads,
    int head_split,
    int64_t samples);

}  // namespace ndt
