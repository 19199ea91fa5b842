#include "plan/step_comm.h"

#include "base/check.h"
#include "plan/ddp_comm.h"
#include "plan/model_shape.h"
#include "plan/pipeline_comm.h"
#include "plan/tp1d_comm.h"

namespace ndt {
namespace {

bool uses_layer_norms(OptimKind k) {
  switch (k) {
    case OptimKind::kSgd:
    case OptimKind::kAdamw:
      return false;
    case OptimKind::kLars:
    case OptimKind::kLamb:
      return true;
  }
  return false;
}

int64_t divide(int64_t a, int64_t b, const char* what) {
  NDT_CHECK(b > 0 && a % b == 0, ConfigError, what, ": ", a, " over ", b);
  return a / b;
}

}  // namespace

StepComm step_comm(const Config& config, int pp_rank) {
  const ParallelConfig& p = config.parallel;
  const bool threads = p.dp_mode == DpMode::kThreads && p.dp > 1;
  const int dp = threads ? 1 : p.dp;
  check_planned_tp_mode(p);
  const ModelShape shape = model_shape(config.model, p.tp);
  const Tp1dLayout tp{p.tp, p.tp_seq};
  const int64_t local =
      divide(config.train.batch_size, p.dp, "train.batch_size per replica");
  StepComm s;
  if (threads)
    s.threads_dp = threads_dp_step_comm(shape, p.dp);

  std::vector<bool> held(shape.num_modules(), true);
  if (p.pp > 1) {
    PipelineLayout pl;
    pl.pp = p.pp;
    pl.chunks = p.pp_chunks;
    pl.microbatches = p.microbatches;
    pl.schedule = p.schedule;
    pl.split = p.pp_split;
    pl.recompute = p.recompute == Recompute::kBlock;
    const int64_t mbs = divide(local, p.microbatches, "micro-batch size");
    held = held_modules(shape, pl, pp_rank);
    for (int m = 0; m < shape.num_modules(); ++m) {
      if (!held[m])
        continue;
      const PassVolume v = module_comm(shape, m, tp, mbs);
      s.tp += p.microbatches * v.step();
      if (pl.recompute && m > 0 && m < shape.head())
        s.tp += p.microbatches * v.fwd;
    }
    s.pp = pipeline_p2p_comm(shape, pl, pp_rank, mbs, p.tp_seq ? p.tp : 1);
    s.pp.add(OpType::kAllReduce, 1, 1, kFp64Bytes);  // squared grad norm
  } else {
    const int64_t mb = divide(local, p.microbatches, "micro-batch size");
    for (int m = 0; m < shape.num_modules(); ++m)
      s.tp += p.microbatches * module_comm(shape, m, tp, mb).step();
  }

  if (p.tp > 1) {
    int64_t sharded = 0;
    for (int m = 0; m < shape.num_modules(); ++m) {
      if (!held[m])
        continue;
      for (const ParamShape& q : shape.modules[m].params)
        sharded += q.tp_sharded ? 1 : 0;
    }
    if (sharded > 0) {
      s.tp.add(OpType::kAllReduce, 1, sharded, kFp64Bytes);  // grad norm
      if (uses_layer_norms(config.optim.name))
        s.tp.add(OpType::kAllReduce, 1, 2 * sharded, kFp64Bytes);
    }
  }

  if (dp > 1) {
    s.dp = ddp_step_comm(
        shape, held, dp, static_cast<int64_t>(p.bucket_mb * (1 << 20)));
  }
  // The step's loss (sum, count), over the pipeline then the replicas;
  // every axis is a group, so also where it has one rank.
  s.pp.add(OpType::kAllReduce, 1, 2, kFp64Bytes);
  s.dp.add(OpType::kAllReduce, 1, 2, kFp64Bytes);
  return s;
}

}  // namespace ndt
