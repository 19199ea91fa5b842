// Analytic communication of one training step (Engine::step, train/
// engine.h), per rank and per process group, in the ledger's units
// (comm_volume.h), for a layout of the config: data parallel over MPI
// (dp), pipeline (pp), 1D tensor parallel with or without token split
// (tp), and any product of them; single-process data parallel on the
// threads of one process.
//
//   tp  every held module's layers per micro-batch (tp1d_comm.h), again
//       the forward of each recomputed block; the global gradient norm:
//       one fp64 all-reduce of one value per tp-sharded parameter held;
//       LARS / LAMB: one fp64 all-reduce of two values per such parameter
//   pp  the rank's sends and receives (pipeline_comm.h); the loss [2] and
//       the squared gradient norm [1], fp64 all-reduces
//   dp  one all-reduce per gradient bucket (ddp_comm.h); the loss [2]
//   threads_dp  (dp_mode threads) the per-replica broadcasts and reduces
//       on the group Engine::step creates for the step
//
// Not here: evaluation, checkpoints, start-up checks (ddp_startup_comm),
// and parallel.tp_mode=2d (ConfigError; tp2d_comm.h has its layers).
#pragma once

#include "io/config.h"
#include "plan/comm_volume.h"

namespace ndt {

struct StepComm {
  CommVolume dp;
  CommVolume pp;
  CommVolume tp;
  CommVolume threads_dp;

  bool operator==(const StepComm&) const = default;
};

// One step on the rank at pipeline position pp_rank (0 without pipeline);
// every rank of a dp or tp group sends the same. `config` must be valid
// (load_config); NDT_CHECK on a size that does not divide.
StepComm step_comm(const Config& config, int pp_rank = 0);

}  // namespace ndt
