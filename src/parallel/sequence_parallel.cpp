#include "parallel/sequence_parallel.h"

#include "base/check.h"
#include "parallel/sp_builder.h"
#include "parallel/tensor_parallel_mode.h"
#include "parallel/tp2d_builder.h"
#include "parallel/tp3d_builder.h"

namespace ndt {
namespace {

void check_sequence_parallel(const Config& c) {
  const ParallelConfig& p = c.parallel;
  const ModelConfig& m = c.model;
  NDT_CHECK(
      m.kind != ModelKind::kMlp,
      ConfigError,
      "parallel.sp=",
      p.sp,
      ": model.kind mlp has no token sequence to split; use model.kind vit "
      "or gpt, or parallel.sp=1");
  NDT_CHECK(
      p.dp == 1 || p.dp_mode == DpMode::kMpi,
      ConfigError,
      "parallel.sp=",
      p.sp,
      " needs parallel.dp_mode=mpi");
  const int64_t T = model_tokens(m);
  const bool zigzag = sequence_split(c) == SeqSplit::kZigzag;
  const int64_t chunks = zigzag ? 2 * int64_t{p.sp} : p.sp;
  NDT_CHECK(
      T % chunks == 0,
      ConfigError,
      "parallel.sp=",
      p.sp,
      " splits each sample's ",
      T,
      " tokens (",
      m.kind == ModelKind::kGpt ? "model.seq_len"
                                : "model.image_size / model.patch squared, "
                                  "+1 with model.pool cls",
      ") into ",
      chunks,
      zigzag ? " zig-zag chunks (parallel.sp_attention ring, causal)"
             : " chunks",
      ": ",
      T,
      " is not divisible by ",
      chunks);
  if (p.sp_attention == SpAttention::kUlysses) {
    // The mode's own checks run first (its heads split must be exact).
    const int split = make_tensor_parallel_mode(c)->head_split();
    std::string by = "";
    if (split > 1) {
      by = p.tp_mode == TpMode::k1d
               ? " x parallel.tp (" + std::to_string(p.tp) + ")"
               : " x the " + std::string(to_string(p.tp_mode)) +
                     " layout's head split (" + std::to_string(split) + ")";
    }
    NDT_CHECK(
        m.heads % (p.sp * split) == 0,
        ConfigError,
        "parallel.sp_attention ulysses splits the heads over the sequence-"
        "parallel ranks",
        split > 1 ? " inside the tensor-parallel ones" : "",
        ": model.heads (",
        m.heads,
        ") must be divisible by parallel.sp (",
        p.sp,
        ")",
        by);
  }
}

}  // namespace

MeshAxis sequence_parallel_axis(const Config& config) {
  if (config.parallel.sp > 1)
    check_sequence_parallel(config);
  return {"sp", config.parallel.sp};
}

SeqSplit sequence_split(const Config& config) {
  const bool causal = config.model.kind == ModelKind::kGpt;
  return config.parallel.sp_attention == SpAttention::kRing && causal
             ? SeqSplit::kZigzag
             : SeqSplit::kContiguous;
}

Shape sequence_local_activation(const Shape& global, int sp) {
  NDT_ASSERT(
      global.size() == 3 && global[1] % sp == 0,
      "a sequence-parallel activation is [B, T, C] with T divisible by sp");
  return {global[0], global[1] / sp, global[2]};
}

SeqShard sequence_shard(const Config& config, const Mesh& mesh) {
  return SeqShard(
      sequence_split(config),
      model_tokens(config.model),
      mesh.coord("sp"),
      mesh.size("sp"));
}

std::unique_ptr<Builder> make_sequence_parallel_builder(
    const Config& config, Mesh& mesh) {
  check_sequence_parallel(config);
  const ParallelConfig& p = config.parallel;
  const SeqShard shard = sequence_shard(config, mesh);
  if (p.tp == 1 || p.tp_mode == TpMode::k1d) {
    return std::make_unique<SpBuilder>(
        mesh.group("sp"),
        p.sp_attention,
        shard,
        mesh.group("tp"),
        p.tp > 1 && p.tp_seq);
  }
  std::unique_ptr<Builder> grid;
  switch (p.tp_mode) {
    case TpMode::k2d:
    case TpMode::k2p5d:
      grid = std::make_unique<Tp2dBuilder>(mesh, shard);
      break;
    case TpMode::k3d:
      grid = std::make_unique<Tp3dBuilder>(mesh, shard);
      break;
    case TpMode::k1d:
      NDT_ASSERT(false, "1d is built above");
  }
  return std::make_unique<SpBuilder>(
      mesh.group("sp"),
      p.sp_attention,
      shard,
      std::move(grid),
      make_tensor_parallel_mode(config)->head_split());
}

}  // namespace ndt
