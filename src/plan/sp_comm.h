// Analytic communication of one module of the model under sequence
// parallelism (parallel.sp = N > 1, parallel/sp_builder.h), per rank and
// micro-batch, on the mesh group "sp", in the ledger's units
// (comm_volume.h):
//
//   embeddings, linears, LayerNorms, dropout, the LM head   none (per token)
//   transformer block   its attention core (sp_attention_cost.h) on the
//                       micro-batch's samples, all T tokens, model.heads
//                       / tp heads of width C / tp (inside 1D tensor
//                       parallelism; tp = 1 otherwise)
//   classifier head     fwd all-gather of my [samples, T/N, C]; bwd
//   (ViT: pooling)      broadcast of sp rank 0's input gradient
//                       [samples, T, C]
//
// Weights are replicated over sp: their gradient reduction is data
// parallelism's (step_comm.h adds "sp" to its group). With 1D tensor
// parallelism (with or without its sequence-split regions) its layers'
// communication on "tp" is mode_comm.h's on my tokens (step_comm.h adds
// it).
#pragma once

#include <cstdint>

#include "io/config.h"
#include "plan/mode_comm.h"
#include "plan/model_shape.h"

namespace ndt {

// Module m of `shape` (model_shape(config.model, parallel)) on a micro-
// batch of `samples` samples; `heads` is model.heads.
GroupPasses sp_module_comm(
    const ModelShape& shape,
    int m,
    const ParallelConfig& parallel,
    int heads,
    int64_t samples);

}  // namespace ndt
