// Analytic memory per rank of the model state: parameters, gradients and
// optimizer state, in fp32 elements (4 bytes each), for the modules a rank
// holds under its layout (tensor-parallel shards, pipeline stages). Each
// MPI data-parallel rank holds a full replica (under ZeRO the optimizer
// state of its buckets only; stage 2: also their gradients and the slots
// the others' buckets share; stage 3: their values and the value slots
// too); single-process data
// parallel holds dp replicas of parameters and gradients in one process
// but one optimizer.
//
// Not here: activations (activation_memory.h has a block's),
// communication buffers, or the allocator's pooling.
#pragma once

#include <cstdint>
#include <vector>

#include "io/config.h"
#include "plan/model_shape.h"

namespace ndt {

struct RankMemory {
  int64_t params = 0;     // elements
  int64_t grads = 0;      // elements (DDP: the buckets hold them)
  int64_t optimizer = 0;  // elements

  int64_t bytes() const {
    return 4 * (params + grads + optimizer);
  }
  bool operator==(const RankMemory&) const = default;
};

// State tensors per parameter: SGD and LARS one momentum buffer (also with
// momentum 0), AdamW and LAMB two moments.
int optimizer_states_per_param(OptimKind kind);

// held: modules this rank holds (all when empty).
RankMemory rank_memory(
    const ModelShape& shape, const std::vector<bool>& held, OptimKind optim);
// The rank at pipeline position pp_rank of a valid config, per replica;
// under ZeRO (parallel.zero=1, 2) the optimizer state of the
// parameters the rank at position sync_rank of the gradient sync updates.
RankMemory rank_memory(
    const Config& config, int pp_rank = 0, int sync_rank = 0);

}  // namespace ndt
