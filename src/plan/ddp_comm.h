// Analytic communication of data parallelism, per rank, in the ledger's
// units (comm_volume.h).
//
// Distributed data parallel (parallel/ddp.h) all-reduces each gradient
// bucket once per step on the dp group (ZeRO stage 1: reduces it to its
// owner, which broadcasts the updated values; stage 2: reduces it once per
// micro-batch; stage 3: also broadcasts the values before the modules
// that read them, ParamGathers' choice); the buckets are those of the
// pure assign_buckets() (parallel/buckets.h) over the held parameters' local
// sizes in backward order (head first; within a module, its parameters
// in reverse; under ZeRO limited to a share of the owners), so the plan
// and the run cut the same buckets.
// Single-process data parallel (parallel.dp_mode=threads) broadcasts every
// parameter and reduces every gradient on a group of threads that
// Engine::step creates for the step.
//
// Not here: the loss reduction of the engine (step_comm.h).
#pragma once

#include <cstdint>
#include <vector>

#include "plan/comm_volume.h"
#include "plan/model_shape.h"

namespace ndt {

// Elements of each DDP bucket, in launch order, for the modules with
// held[m] (all when empty); under ZeRO `owners` is the group's ranks
// (the buckets are limited to a share of them), otherwise 1.
std::vector<int64_t> ddp_bucket_numels(
    const ModelShape& shape,
    const std::vector<bool>& held,
    int64_t bucket_bytes,
    int owners = 1);

// A forward or a backward over modules [first, last] (a pipeline rank's
// chunk, or the whole model).
struct ModulePass {
  bool forward = true;
  int first = 0;
  int last = 0;
};

// One step of `microbatches` accumulated micro-batches: one fp32
// all-reduce per bucket; under ZeRO stage 1 (`zero` 1) a reduce to the
// bucket's owner and, after the update, a broadcast from it; stage 2 (2)
// the reduce after every micro-batch; stage 3 (3) that reduce, and the
// broadcasts of ParamGathers over the rank's `passes` in order (by
// default `microbatches` times a forward and a backward over the whole
// model), layer by layer (`per_layer`; false: module by module, under
// recompute). Empty for dp <= 1.
CommVolume ddp_step_comm(
    const ModelShape& shape,
    const std::vector<bool>& held,
    int dp,
    int64_t bucket_bytes,
    int zero = 0,
    int microbatches = 1,
    const std::vector<ModulePass>& passes = {},
    bool per_layer = true);

// ZeRO stage 1: per module and parameter (declaration order), whether the
// rank at position `rank` of the gradient sync's `ranks` updates it, as
// DistributedDataParallel assigns owners to its buckets
// (assign_bucket_owners); false for the modules not held.
std::vector<std::vector<bool>> zero_updated_params(
    const ModelShape& shape,
    const std::vector<bool>& held,
    int64_t bucket_bytes,
    int ranks,
    int rank);

// ZeRO stage 2: the gradient elements the rank at position `rank` of the
// gradient sync's `ranks` keeps: its buckets and the slots shared by the
// others' (assign_slots over the gather units, as DistributedDataParallel
// makes them; `per_layer` as in ddp_step_comm).
int64_t zero2_grad_elements(
    const ModelShape& shape,
    const std::vector<bool>& held,
    int64_t bucket_bytes,
    int ranks,
    int rank,
    bool per_layer = true);

// ZeRO stage 3: the parameter elements the rank at position `rank` keeps:
// its buckets and the slots every rank has for the others' (assign_slots
// over the gather units with no owners; `per_layer` as in ddp_step_comm).
int64_t zero3_param_elements(
    const ModelShape& shape,
    const std::vector<bool>& held,
    int64_t bucket_bytes,
    int ranks,
    int rank,
    bool per_layer = true);

// DistributedDataParallel::check_replicas_identical() at start-up: two
// fp64 all-reduces (max, -min) of 2 values per held parameter.
CommVolume ddp_startup_comm(
    const ModelShape& shape, const std::vector<bool>& held, int dp);

// Single-process data parallel, per replica thread and step: a broadcast
// of every parameter from replica 0, then a reduce of every gradient to
// it. Empty for dp <= 1.
CommVolume threads_dp_step_comm(const ModelShape& shape, int dp);

}  // namespace ndt
