#include "plan/rank_memory.h"

#include "base/check.h"
#include "plan/ddp_comm.h"
#include "plan/pipeline_comm.h"
#include "plan/step_comm.h"

namespace ndt {

int optimizer_states_per_param(OptimKind kind) {
  switch (kind) {
    case OptimKind::kSgd:
    case OptimKind::kLars:
      return 1;
    case OptimKind::kAdamw:
    case OptimKind::kLamb:
      return 2;
  }
  NDT_ASSERT(false, "invalid OptimKind ", static_cast<int>(kind));
  return 0;
}

RankMemory rank_memory(
    const ModelShape& shape, const std::vector<bool>& held, OptimKind optim) {
  RankMemory r;
  for (int m = 0; m < shape.num_modules(); ++m) {
    if (held.empty() || held.at(m))
      r.params += module_numel(shape, m);
  }
  r.grads = r.params;
  r.optimizer = optimizer_states_per_param(optim) * r.params;
  return r;
}

RankMemory rank_memory(const Config& config, int pp_rank, int sync_rank) {
  const ParallelConfig& p = config.parallel;
  const ModelShape shape = model_shape(config.model, p);
  std::vector<bool> held;
  if (p.pp > 1)
    held = held_modules(shape, pipeline_layout(p), pp_rank);
  RankMemory r = rank_memory(shape, held, config.optim.name);
  const int ranks = grad_sync_ranks(config);
  const int64_t bucket_bytes = static_cast<int64_t>(p.bucket_mb * (1 << 20));
  if (p.zero > 0 && ranks > 1) {
    // ZeRO: state for the parameters this rank updates only.
    const auto updated =
        zero_updated_params(shape, held, bucket_bytes, ranks, sync_rank);
    int64_t n = 0;
    for (int m = 0; m < shape.num_modules(); ++m) {
      for (size_t i = 0; i < updated[m].size(); ++i) {
        if (updated[m][i])
          n += shape.modules[m].params[i].numel_local;
      }
    }
    r.optimizer = optimizer_states_per_param(config.optim.name) * n;
  }
  // Stages 2 and 3: gradients of its buckets and the others' shared
  // slots; stage 3: their values too.
  const auto sharded = [&](auto elements) {
    return elements(
        shape,
        held,
        bucket_bytes,
        ranks,
        sync_rank,
        p.recompute == Recompute::kNone);
  };
  if (p.zero >= 2 && ranks > 1)
    r.grads = sharded(zero2_grad_elements);
  if (p.zero == 3 && ranks > 1)
    r.params = sharded(zero3_param_elements);
  return r;
}

}  // namespace ndt
