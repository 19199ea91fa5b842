#include "plan/step_comm.h"

#include <vector>

#include "base/check.h"
#include "parallel/pipeline/schedules.h"
#include "parallel/tensor_parallel_mode.h"
#include "plan/ddp_comm.h"
#include "plan/divide.h"
#include "plan/mode_comm.h"
#include "plan/model_shape.h"
#include "plan/pipeline_comm.h"
#include "plan/sp_comm.h"

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

std::string joined(const std::vector<std::string>& axes) {
  std::string s;
  for (const std::string& a : axes)
    s += (s.empty() ? "" : ",") + a;
  return s;
}

// The forward and backward passes of pipeline rank `rank` over its
// chunks, in the order its instruction list runs them.
std::vector<ModulePass> pipeline_passes(
    const ModelShape& shape, const PipelineLayout& l, int rank) {
  const std::vector<ModuleRange> chunks = pipeline_chunks(shape, l, rank);
  const Schedule s = make_schedule(l.schedule, l.pp, l.microbatches, l.chunks);
  std::vector<ModulePass> out;
  for (const Instr& in : s.instrs.at(rank)) {
    if (in.op == Op::kForward || in.op == Op::kBackward) {
      const ModuleRange& r = chunks.at(in.chunk);
      out.push_back({in.op == Op::kForward, r.first, r.last});
    }
  }
  return out;
}

void add(StepComm& s, const GroupPasses& passes, int64_t k, bool fwd_only) {
  for (const auto& [group, v] : passes)
    s.groups[group] += k * (fwd_only ? v.fwd : v.step());
}

}  // namespace

int grad_sync_ranks(const Config& config) {
  const ParallelConfig& p = config.parallel;
  int ranks = p.dp_mode == DpMode::kThreads ? 1 : p.dp;
  const auto mode = make_tensor_parallel_mode(config);
  for (const std::string& a : mode->replica_axes()) {
    for (const MeshAxis& m : mode->axes()) {
      if (m.name == a)
        ranks *= m.size;
    }
  }
  return ranks * p.sp;
}

std::string grad_sync_group(const Config& config) {
  const ParallelConfig& p = config.parallel;
  std::vector<std::string> axes;
  if (p.dp > 1 && p.dp_mode == DpMode::kMpi)
    axes.push_back("dp");
  for (const std::string& a : make_tensor_parallel_mode(config)->replica_axes())
    axes.push_back(a);
  if (p.sp > 1)
    axes.push_back("sp");
  return joined(axes);
}

const CommVolume& StepComm::at(const std::string& group) const {
  static const CommVolume kEmpty;
  const auto it = groups.find(group);
  return it == groups.end() ? kEmpty : it->second;
}

StepComm step_comm(
    const Config& config, int pp_rank, int sync_rank, int sp_rank) {
  const ParallelConfig& p = config.parallel;
  const bool threads = p.dp_mode == DpMode::kThreads && p.dp > 1;
  const ModelShape shape = model_shape(config.model, p);
  const int64_t local =
      divide(config.train.batch_size, p.dp, "train.batch_size per replica");
  const int64_t mbs = divide(local, p.microbatches, "micro-batch size");
  // The module formulas: the tensor-parallel mode's, and sequence
  // parallelism's (on the mode's block of the samples and heads; the
  // mode's layers then see my tokens only).
  const auto mode = make_tensor_parallel_mode(config);
  ModelShape sp_shape = shape;
  sp_shape.tokens_per_sample /= p.sp;
  const auto module_comm = [&](int m) {
    if (p.sp == 1)
      return mode_module_comm(shape, m, p, mbs);
    GroupPasses v = sp_module_comm(
        shape,
        m,
        p,
        config.model.heads,
        mode->head_split(),
        mbs / mode->sample_blocks());
    // A grid's classifier head runs on sp rank 0 only, on every token.
    const bool grid = p.tp > 1 && p.tp_mode != TpMode::k1d;
    const bool head = shape.modules.at(m).kind == ModuleKind::kClassifierHead;
    if (grid && head && sp_rank != 0)
      return v;
    for (const auto& [group, pv] :
         mode_module_comm(grid && head ? shape : sp_shape, m, p, mbs))
      v[group] = v[group] + pv;
    return v;
  };
  StepComm s;
  if (threads)
    s.threads_dp = threads_dp_step_comm(shape, p.dp);

  std::vector<bool> held(shape.num_modules(), true);
  const PipelineLayout pl = pipeline_layout(p);
  if (p.pp > 1)
    held = held_modules(shape, pl, pp_rank);
  // Under recompute every block's forward runs again in backward.
  for (int m = 0; m < shape.num_modules(); ++m) {
    if (!held[m])
      continue;
    const GroupPasses v = module_comm(m);
    add(s, v, p.microbatches, false);
    if (pl.recompute && m > 0 && m < shape.head())
      add(s, v, p.microbatches, true);
  }
  if (p.pp > 1) {
    // Stages exchange the mode's block of each boundary activation (sp:
    // of my tokens').
    const int mode_split = p.tp_mode == TpMode::k1d && !p.tp_seq ? 1 : p.tp;
    const int split = p.sp * mode_split;
    s.groups["pp"] += pipeline_p2p_comm(shape, pl, pp_rank, mbs, split);
    s.groups["pp"].add(OpType::kAllReduce, 1, 1, kFp64Bytes);  // grad norm
  }

  // The gradients' sync over the replicas: dp and the mode's replica axes
  // (TensorParallelMode says which) and sp.
  const int grad_ranks = grad_sync_ranks(config);
  const int64_t bucket_bytes = static_cast<int64_t>(p.bucket_mb * (1 << 20));
  // ZeRO: the optimizer holds the parameters this rank updates.
  const bool zero = p.zero > 0 && grad_ranks > 1;
  std::vector<std::vector<bool>> updated;
  if (zero) {
    NDT_ASSERT(
        sync_rank >= 0 && sync_rank < grad_ranks,
        "step_comm: rank ",
        sync_rank,
        " of a gradient sync of ",
        grad_ranks,
        " ranks");
    updated =
        zero_updated_params(shape, held, bucket_bytes, grad_ranks, sync_rank);
  }

  // Norms: per set of shard axes, one value per parameter the optimizer
  // holds; under ZeRO the sum of squares also over the sync's ranks.
  std::map<std::vector<std::string>, int64_t> sets;
  for (int m = 0; m < shape.num_modules(); ++m) {
    if (!held[m])
      continue;
    const std::vector<ParamShape>& ps = shape.modules[m].params;
    for (size_t i = 0; i < ps.size(); ++i) {
      if (!ps[i].shard_axes.empty() && (!zero || updated[m][i]))
        ++sets[ps[i].shard_axes];
    }
  }
  for (const auto& [axes, n] : sets) {
    CommVolume& g = s.groups[joined(axes)];
    g.add(OpType::kAllReduce, 1, n, kFp64Bytes);  // grad norm
    if (uses_layer_norms(config.optim.name))
      g.add(OpType::kAllReduce, 1, 2 * n, kFp64Bytes);
  }
  if (grad_ranks > 1) {
    CommVolume& g = s.groups[grad_sync_group(config)];
    // ZeRO stage 3 gathers in each forward and backward pass.
    std::vector<ModulePass> passes;
    if (p.pp > 1)
      passes = pipeline_passes(shape, pl, pp_rank);
    s.grad_sync = ddp_step_comm(
        shape,
        held,
        grad_ranks,
        bucket_bytes,
        p.zero,
        p.microbatches,
        passes,
        !pl.recompute);
    g += s.grad_sync;
    s.last_bucket = ddp_bucket_numels(
                        shape, held, bucket_bytes, p.zero > 0 ? grad_ranks : 1)
                        .back();
    if (zero)
      g.add(OpType::kAllReduce, 1, 1, kFp64Bytes);  // grad norm
  }
  // The step's loss (sum, count), over the pipeline, the replicas and the
  // mode's sample axes (TensorParallelMode says which); every axis is a
  // group, so also where it has one rank.
  s.groups["pp"].add(OpType::kAllReduce, 1, 2, kFp64Bytes);
  s.groups["dp"].add(OpType::kAllReduce, 1, 2, kFp64Bytes);
  for (const std::string& a : mode->sample_axes())
    s.groups[a].add(OpType::kAllReduce, 1, 2, kFp64Bytes);
  if (p.sp > 1)
    s.groups["sp"].add(OpType::kAllReduce, 1, 2, kFp64Bytes);
  return s;
}

}  // namespace ndt
