// Analytic communication of one training step (Engine::step, train/
// engine.h), per rank and per process group, in the ledger's units
// (comm_volume.h), for a layout of the config: data parallel over MPI
// (dp), pipeline (pp), tensor parallel in any mode (1d with or without
// token split, 2d, 2.5d, 3d) or sequence parallel (sp, each attention
// core), and any product of them; single-process data
// parallel on the threads of one process.
//
// Groups are named as the mesh names them: "dp", "pp", "tp" (1d), the
// mode's axes and their products (mode_comm.h), "dp,tp_dep" (2.5D's
// gradient reduction with the replicas), "tp_col,tp_row" (norms of grid-
// sharded parameters), ...
//
//   modules  every held module's layers per micro-batch (mode_comm.h;
//       sp_comm.h under sequence parallelism), again the forward of each
//       recomputed block
//   norms  the global gradient norm: per set of shard axes of the held
//       parameters one fp64 all-reduce of one value per parameter on the
//       group of those axes; LARS / LAMB: one of two values per parameter;
//       with a pipeline one fp64 all-reduce [1] on pp
//   pp  the rank's sends and receives (pipeline_comm.h)
//   gradients  one all-reduce per gradient bucket (ddp_comm.h) on the
//       group of dp, the mode's replica axes (2.5d: tp_dep) and sp of
//       size > 1; ZeRO: a reduce (stages 2 and 3: one per micro-batch)
//       and a broadcast per bucket (stage 3: the broadcasts that gather
//       parameters before the modules read them), and
//       the grad norm's fp64 all-reduce [1] there, while the norms above
//       count only the parameters the rank updates
//   loss  the step's [sum, count] in fp64 on pp, dp, each of the mode's
//       sample axes (2d: tp_row; 2.5d: tp_dep, tp_row; 3d: tp_wt, tp_in)
//       and sp (sp > 1)
//   threads_dp  (dp_mode threads) the per-replica broadcasts and reduces
//       on the group Engine::step creates for the step
//
// Not here: evaluation, checkpoints, start-up checks (ddp_startup_comm).
#pragma once

#include <map>
#include <string>

#include "io/config.h"
#include "plan/comm_volume.h"

namespace ndt {

struct StepComm {
  std::map<std::string, CommVolume> groups;  // by mesh group name
  CommVolume threads_dp;
  // The data-parallel gradient sync's own share of its group's volume
  // (ddp_step_comm: buckets and ZeRO's broadcasts), which can overlap the
  // compute; the rest of that group's volume (sequence parallelism's
  // attention, the norms) cannot.
  CommVolume grad_sync;
  // Elements of the sync's last bucket (the input side's), whose reduce
  // starts when the step's backward ends; 0 without a sync.
  int64_t last_bucket = 0;

  // The volume of `group` (empty when the step does not use it).
  const CommVolume& at(const std::string& group) const;
  bool operator==(const StepComm&) const = default;
};

// Ranks of the gradient sync's group: dp over MPI, the mode's replica axes
// (2.5d: tp_dep) and sp.
int grad_sync_ranks(const Config& config);
// The name of that group's mesh group ("dp", "dp,sp", "dp,tp_dep", ...;
// empty when no axis has more than one rank).
std::string grad_sync_group(const Config& config);

// One step on the rank at pipeline position pp_rank (0 without pipeline),
// under ZeRO at position sync_rank in the gradient sync's group (whose
// buckets it updates), and at sp_rank in its sequence-parallel group
// (with 2D, 2.5D or 3D tensor parallelism only sp rank 0's grid runs the
// classifier head and its grid communication); otherwise every rank of a
// dp or tp group sends the same. `config` must be valid (load_config and
// the mode's checks); NDT_CHECK on a size that does not divide.
StepComm step_comm(
    const Config& config, int pp_rank = 0, int sync_rank = 0, int sp_rank = 0);

}  // namespace ndt
