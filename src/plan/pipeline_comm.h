// Analytic communication of pipeline parallelism on the pp group, per
// pipeline rank and step, in the ledger's units (comm_volume.h): the
// activation and gradient sends and receives of the rank's instruction
// list, from the same schedule generator the executor runs
// (parallel/pipeline/schedules.h), with the activation sizes of the
// model's stage boundaries; and which modules the rank holds, from the
// same stage partition the engine uses (parallel/pipeline/partition.h).
//
// Not here: the engine's loss and clipping reductions (step_comm.h), or
// the tensor-parallel layers inside a stage (tp1d_comm.h).
//
// Shape letters: P = pipeline ranks, V = chunks per rank, M = micro-
// batches, mbs = samples per micro-batch.
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/pipeline/partition.h"
#include "parallel/pipeline/schedules.h"
#include "plan/comm_volume.h"
#include "plan/model_shape.h"

namespace ndt {

struct PipelineLayout {
  int pp = 1;            // P
  int chunks = 1;        // V
  int microbatches = 1;  // M
  PipeSchedule schedule = PipeSchedule::kOneFOneB;
  std::vector<int> split;  // blocks per virtual stage; empty: balanced
  bool recompute = false;  // parallel.recompute=block
};

// The pipeline of a config's parallel section.
PipelineLayout pipeline_layout(const ParallelConfig& parallel);

// Blocks per virtual stage (P x V entries): `split`, or balanced by the
// local parameter counts as Engine::partition_pipeline does.
std::vector<int> pipeline_stage_blocks(
    const ModelShape& shape, const PipelineLayout& l);

// Module ranges of `rank`'s chunks and, per module, whether it holds it.
std::vector<ModuleRange> pipeline_chunks(
    const ModelShape& shape, const PipelineLayout& l, int rank);
std::vector<bool> held_modules(
    const ModelShape& shape, const PipelineLayout& l, int rank);

// Elements one send / recv moves per micro-batch across the stage boundary
// after module m: the activation (forward) or its gradient (backward),
// mbs x module m's output per sample, divided by token_split.
int64_t stage_boundary_numel(
    const ModelShape& shape, int m, int64_t mbs, int token_split);

// Sends and receives of one step on pipeline rank `rank`: per kSendAct /
// kRecvAct / kSendGrad / kRecvGrad instruction of its list, one send or
// recv of the boundary activation: mbs x the sample shape of the module
// before the boundary, divided by token_split (parallel.tp with tp_seq,
// else 1) since stages then exchange my tokens only.
CommVolume pipeline_p2p_comm(
    const ModelShape& shape,
    const PipelineLayout& l,
    int rank,
    int64_t mbs,
    int token_split);

}  // namespace ndt
