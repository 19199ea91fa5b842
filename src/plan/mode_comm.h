// Analytic communication of one module of the model under the configured
// tensor-parallel mode, per rank and micro-batch, by process group: the
// mesh's name of each group the module's layers use ("tp" for 1d;
// "tp_col" (my grid row) and "tp_row" (my grid column) for 2d and 2.5d;
// "tp_out", "tp_in", "tp_wt", "tp_wt,tp_in" and "tp_wt,tp_out" for 3d),
// in the ledger's units (comm_volume.h). The layers' formulas are in
// tp1d_comm.h, tp2d_comm.h and tp3d_comm.h; this adds the modules built
// around them (embeddings, the heads) and picks by mode.
//
//   2d / 2.5d (q x q grids, d = parallel.tp_depth, each grid N = samples /
//   d x T rows): embeddings bwd all-reduce of their gradients on tp_row;
//   blocks transformer_block2d_comm; LM head LayerNorm2d + Linear2d (no
//   bias) + the vocabulary-parallel cross-entropy on tp_col over my N/q
//   rows; classifier LayerNorm2d over its rows (samples, or tokens with
//   mean pooling), fwd all-gather on tp_col of my [samples/(d q), C/q], bwd
//   all-reduce on tp_row of the replicated linear's gradients.
//   3d (p x p x p, N = samples x T rows): embeddings bwd all-reduce on
//   tp_wt,tp_in; blocks transformer_block3d_comm; LM head LayerNorm3d +
//   Linear3d from side A (no bias) + on tp_in the targets' all-gather
//   [N/p^2] and the cross-entropy over N/p^2 rows + on tp_out an fp64
//   all-reduce [3] (the statistics back to side A); classifier
//   LayerNorm3d, fwd all-gather on tp_out of [samples/p^2, C/p], bwd
//   all-reduce on tp_wt,tp_in of the linear's gradients.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "io/config.h"
#include "plan/comm_volume.h"
#include "plan/model_shape.h"

namespace ndt {

using GroupPasses = std::map<std::string, PassVolume>;

// Module m of `shape` (model_shape(config.model, parallel)) on a micro-
// batch of `samples` samples of one replica (before the mode's own sample
// split). Empty without tensor parallelism.
GroupPasses mode_module_comm(
    const ModelShape& shape,
    int m,
    const ParallelConfig& parallel,
    int64_t samples);

}  // namespace ndt
