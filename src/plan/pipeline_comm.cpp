#include "plan/pipeline_comm.h"

#include "base/check.h"

namespace ndt {

PipelineLayout pipeline_layout(const ParallelConfig& parallel) {
  PipelineLayout l;
  l.pp = parallel.pp;
  l.chunks = parallel.pp_chunks;
  l.microbatches = parallel.microbatches;
  l.schedule = parallel.schedule;
  l.split = parallel.pp_split;
  l.recompute = parallel.recompute == Recompute::kBlock;
  return l;
}

std::vector<int> pipeline_stage_blocks(
    const ModelShape& shape, const PipelineLayout& l) {
  if (!l.split.empty())
    return l.split;
  std::vector<int64_t> cost;
  for (int m = 1; m < shape.head(); ++m)
    cost.push_back(module_numel(shape, m));
  return partition_blocks(
      cost,
      l.pp * l.chunks,
      module_numel(shape, 0),
      module_numel(shape, shape.head()));
}

std::vector<ModuleRange> pipeline_chunks(
    const ModelShape& shape, const PipelineLayout& l, int rank) {
  return chunk_modules(pipeline_stage_blocks(shape, l), l.pp, rank);
}

std::vector<bool> held_modules(
    const ModelShape& shape, const PipelineLayout& l, int rank) {
  std::vector<bool> held(shape.num_modules(), false);
  for (const ModuleRange& r : pipeline_chunks(shape, l, rank)) {
    for (int m = r.first; m <= r.last; ++m)
      held[m] = true;
  }
  return held;
}

int64_t stage_boundary_numel(
    const ModelShape& shape, int m, int64_t mbs, int token_split) {
  int64_t n = mbs;
  for (int64_t d : shape.modules.at(m).sample_out)
    n *= d;
  NDT_CHECK(
      token_split >= 1 && n % token_split == 0,
      ConfigError,
      "stage boundary of ",
      n,
      " elements does not split over ",
      token_split,
      " tensor-parallel ranks");
  return n / token_split;
}

CommVolume pipeline_p2p_comm(
    const ModelShape& shape,
    const PipelineLayout& l,
    int rank,
    int64_t mbs,
    int token_split) {
  const std::vector<ModuleRange> chunks = pipeline_chunks(shape, l, rank);
  // Elements of the activation entering (output false) or leaving chunk c.
  auto boundary = [&](int c, bool output) {
    const ModuleRange& r = chunks.at(c);
    return stage_boundary_numel(
        shape, output ? r.last : r.first - 1, mbs, token_split);
  };
  const Schedule s = make_schedule(l.schedule, l.pp, l.microbatches, l.chunks);
  CommVolume v;
  for (const Instr& in : s.instrs.at(rank)) {
    switch (in.op) {
      case Op::kSendAct:
        v.add(OpType::kSend, 1, boundary(in.chunk, true));
        break;
      case Op::kRecvAct:
        v.add(OpType::kRecv, 1, boundary(in.chunk, false));
        break;
      case Op::kSendGrad:
        v.add(OpType::kSend, 1, boundary(in.chunk, false));
        break;
      case Op::kRecvGrad:
        v.add(OpType::kRecv, 1, boundary(in.chunk, true));
        break;
      case Op::kLoadMicroBatch:
      case Op::kForward:
      case Op::kBackward:
      case Op::kWaitSendAct:
      case Op::kWaitSendGrad:
      case Op::kReduceGrads:
      case Op::kOptimizerStep:
        break;
    }
  }
  return v;
}

}  // namespace ndt
