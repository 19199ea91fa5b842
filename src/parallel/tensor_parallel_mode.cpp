#include "parallel/tensor_parallel_mode.h"

#include "base/check.h"
#include "parallel/sequence_parallel.h"
#include "parallel/tp1d_builder.h"

namespace ndt {
namespace {

class NoTensorParallel final : public TensorParallelMode {
 public:
  std::vector<MeshAxis> axes() const override {
    return {{"tp", 1}};
  }
  std::unique_ptr<Builder> make_builder(Mesh&) const override {
    return std::make_unique<SerialBuilder>();
  }
  Shape local_activation(const Shape& global) const override {
    return global;
  }
};

// 1D: every split the layers make must be exact.
void check_tp1d(const Config& c) {
  const ParallelConfig& p = c.parallel;
  const ModelConfig& m = c.model;
  NDT_CHECK(
      m.kind != ModelKind::kMlp,
      ConfigError,
      "parallel.tp=",
      p.tp,
      ": model.kind mlp has no tensor-parallel layers; use model.kind vit or "
      "gpt, or parallel.tp=1");
  NDT_CHECK(
      p.dp == 1 || p.dp_mode == DpMode::kMpi,
      ConfigError,
      "parallel.tp=",
      p.tp,
      " needs parallel.dp_mode=mpi");
  NDT_CHECK(
      m.heads % p.tp == 0,
      ConfigError,
      "model.heads (",
      m.heads,
      ") must be divisible by parallel.tp (",
      p.tp,
      "): attention heads are split across the tensor-parallel ranks");
  NDT_CHECK(
      m.mlp_dim % p.tp == 0,
      ConfigError,
      "model.mlp_dim (",
      m.mlp_dim,
      ") must be divisible by parallel.tp (",
      p.tp,
      ")");
  if (m.kind == ModelKind::kGpt) {
    NDT_CHECK(
        m.vocab % p.tp == 0,
        ConfigError,
        "model.vocab (",
        m.vocab,
        ") must be divisible by parallel.tp (",
        p.tp,
        "): the vocabulary is split across the tensor-parallel ranks (no "
        "padding is done)");
  }
  if (p.tp_seq) {
    const int64_t T = model_tokens(m);
    const int64_t micro = c.train.batch_size / p.dp / p.microbatches;
    NDT_CHECK(
        micro * T % p.tp == 0,
        ConfigError,
        "parallel.tp_seq splits each micro-batch's tokens over parallel.tp (",
        p.tp,
        ") ranks: ",
        micro,
        " samples x ",
        T,
        " tokens = ",
        micro * T,
        " is not divisible by ",
        p.tp);
  }
}

class Tp1d final : public TensorParallelMode {
 public:
  explicit Tp1d(const Config& c)
      : tp_(c.parallel.tp),
        token_split_(c.parallel.tp_seq),
        tokens_(model_tokens(c.model)) {
    check_tp1d(c);
  }
  std::vector<MeshAxis> axes() const override {
    return {{"tp", tp_}};
  }
  std::unique_ptr<Builder> make_builder(Mesh& mesh) const override {
    return std::make_unique<Tp1dBuilder>(
        mesh.group("tp"), token_split_, tokens_);
  }
  // With sequence-split regions an activation is my tokens [N / tp, C]
  // (parallel/regions.h); otherwise replicated.
  Shape local_activation(const Shape& global) const override {
    if (!token_split_)
      return global;
    const int64_t C = global.back();
    return {shape_numel(global) / C / tp_, C};
  }

 private:
  int tp_;
  bool token_split_;
  int64_t tokens_;
};

}  // namespace

std::unique_ptr<TensorParallelMode> make_tensor_parallel_mode(
    const Config& config) {
  const ParallelConfig& p = config.parallel;
  if (p.tp == 1)
    return std::make_unique<NoTensorParallel>();
  switch (p.tp_mode) {
    case TpMode::k1d:
      return std::make_unique<Tp1d>(config);
  }
  NDT_ASSERT(false, "invalid TpMode ", static_cast<int>(p.tp_mode));
  return nullptr;
}

std::vector<MeshAxis> mesh_axes(const Config& config) {
  const ParallelConfig& p = config.parallel;
  const int dp = p.dp_mode == DpMode::kThreads ? 1 : p.dp;
  std::vector<MeshAxis> out;
  std::string order = p.order + ",";
  for (size_t at = 0, comma; (comma = order.find(',', at)) != std::string::npos;
       at = comma + 1) {
    const std::string name = order.substr(at, comma - at);
    if (name == "dp") {
      out.push_back({"dp", dp});
    } else if (name == "pp") {
      out.push_back({"pp", p.pp});
    } else {
      NDT_ASSERT(name == "tp", "parallel.order names axis ", name);
      for (const MeshAxis& a : make_tensor_parallel_mode(config)->axes())
        out.push_back(a);
    }
  }
  out.push_back(sequence_parallel_axis(config));
  return out;
}

}  // namespace ndt
