#include "plan/mode_comm.h"

#include "base/check.h"
#include "plan/divide.h"
#include "plan/tp1d_comm.h"
#include "plan/tp2d_comm.h"
#include "plan/tp3d_comm.h"

namespace ndt {
namespace {

// The replicated linear of the classifier head: its two parameters.
int64_t head_out_numel(const ModuleShape& head) {
  const size_t n = head.params.size();
  return head.params.at(n - 2).numel_local + head.params.at(n - 1).numel_local;
}

GroupPasses grid_passes(const Tp2dVolume& v) {
  return {{"tp_col", v.row}, {"tp_row", v.col}};
}

GroupPasses cube_passes(const Tp3dVolume& v) {
  return {
      {"tp_out", v.out},
      {"tp_in", v.in},
      {"tp_wt", v.wt},
      {"tp_wt,tp_in", v.samples_a},
      {"tp_wt,tp_out", v.samples_b}};
}

GroupPasses grid_module(
    const ModelShape& shape, int m, int q, int grids, int64_t samples) {
  const ModuleShape& mod = shape.modules.at(m);
  const int64_t Ng = divide(samples, grids, "samples per grid");
  const int64_t T = shape.tokens_per_sample, N = Ng * T, C = shape.dim;
  switch (mod.kind) {
    case ModuleKind::kTokenEmbedding:
    case ModuleKind::kPatchEmbedding: {
      PassVolume v;
      v.bwd.add(OpType::kAllReduce, 1, module_numel(shape, m));
      return {{"tp_row", v}};
    }
    case ModuleKind::kTransformerBlock:
      return grid_passes(transformer_block2d_comm(q, N, C, shape.mlp_dim));
    case ModuleKind::kLmHead: {
      Tp2dVolume v = layernorm2d_comm(q, N, C) +
                     linear2d_comm(q, N, C, shape.vocab, false);
      v.row.fwd += vocab_parallel_ce_comm(divide(N, q, "head rows"));
      return grid_passes(v);
    }
    case ModuleKind::kClassifierHead: {
      const int64_t rows = shape.pool == HeadPool::kMean ? N : Ng;
      Tp2dVolume v = layernorm2d_comm(q, rows, C);
      v.row.fwd.add(
          OpType::kAllGather, 1, divide(Ng, q, "head samples") * (C / q));
      v.col.bwd.add(OpType::kAllReduce, 1, head_out_numel(mod));
      return grid_passes(v);
    }
    case ModuleKind::kFlatten:
    case ModuleKind::kLinear:
    case ModuleKind::kDropout:
      break;
  }
  NDT_ASSERT(false, "module kind without a 2D form");
  return {};
}

GroupPasses cube_module(
    const ModelShape& shape, int m, int p, int64_t samples) {
  const ModuleShape& mod = shape.modules.at(m);
  const int64_t T = shape.tokens_per_sample, N = samples * T, C = shape.dim;
  const int64_t pp = int64_t(p) * p;
  switch (mod.kind) {
    case ModuleKind::kTokenEmbedding:
    case ModuleKind::kPatchEmbedding: {
      PassVolume v;
      v.bwd.add(OpType::kAllReduce, 1, module_numel(shape, m));
      return {{"tp_wt,tp_in", v}};
    }
    case ModuleKind::kTransformerBlock:
      return cube_passes(transformer_block3d_comm(p, N, C, shape.mlp_dim));
    case ModuleKind::kLmHead: {
      Tp3dVolume v = layernorm3d_comm(p, N, C) +
                     linear3d_comm(p, N, C, shape.vocab, false, true);
      const int64_t n = divide(N, pp, "head rows");
      v.in.fwd.add(OpType::kAllGather, 1, n);  // the targets
      v.in.fwd += vocab_parallel_ce_comm(n);
      v.out.fwd.add(OpType::kAllReduce, 1, 3, kFp64Bytes);
      return cube_passes(v);
    }
    case ModuleKind::kClassifierHead: {
      const int64_t rows = shape.pool == HeadPool::kMean ? N : samples;
      Tp3dVolume v = layernorm3d_comm(p, rows, C);
      v.out.fwd.add(
          OpType::kAllGather, 1, divide(samples, pp, "head samples") * (C / p));
      v.samples_a.bwd.add(OpType::kAllReduce, 1, head_out_numel(mod));
      return cube_passes(v);
    }
    case ModuleKind::kFlatten:
    case ModuleKind::kLinear:
    case ModuleKind::kDropout:
      break;
  }
  NDT_ASSERT(false, "module kind without a 3D form");
  return {};
}

}  // namespace

GroupPasses mode_module_comm(
    const ModelShape& shape, int m, const ParallelConfig& p, int64_t samples) {
  if (p.tp <= 1)
    return {};
  switch (p.tp_mode) {
    case TpMode::k1d:
      return {{"tp", module_comm(shape, m, {p.tp, p.tp_seq}, samples)}};
    case TpMode::k2d:
      return grid_module(shape, m, shape.tp_side, 1, samples);
    case TpMode::k2p5d:
      return grid_module(shape, m, shape.tp_side, p.tp_depth, samples);
    case TpMode::k3d:
      return cube_module(shape, m, shape.tp_side, samples);
  }
  NDT_ASSERT(false, "invalid TpMode ", static_cast<int>(p.tp_mode));
  return {};
}

}  // namespace ndt
