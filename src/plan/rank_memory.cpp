#include "plan/rank_memory.h"

#include "base/check.h"
#include "plan/pipeline_comm.h"

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

RankMemory rank_memory(const Config& config, int pp_rank) {
  const ParallelConfig& p = config.parallel;
  const ModelShape shape = model_shape(config.model, p);
  std::vector<bool> held;
  if (p.pp > 1) {
    PipelineLayout pl;
    pl.pp = p.pp;
    pl.chunks = p.pp_chunks;
    pl.split = p.pp_split;
    held = held_modules(shape, pl, pp_rank);
  }
  return rank_memory(shape, held, config.optim.name);
}

}  // namespace ndt
