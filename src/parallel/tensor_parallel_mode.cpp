#include "parallel/tensor_parallel_mode.h"

#include "base/check.h"
#include "parallel/sequence_parallel.h"
#include "parallel/tp1d_builder.h"
#include "parallel/tp2d_builder.h"

namespace ndt {

SampleRows TensorParallelMode::sample_rows(const Mesh&, int64_t n) const {
  return {0, n};
}

std::vector<std::string> TensorParallelMode::sample_axes() const {
  return {};
}

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

// The grid side q of parallel.tp = q^2 (0 when tp is not such a square).
int grid_side(int tp) {
  int q = 1;
  while ((q + 1) * (q + 1) <= tp)
    ++q;
  return q >= 2 && q * q == tp ? q : 0;
}

// 2D: a q x q grid; every split the layers make must be exact: heads over
// q, the hidden width in q^2 pieces (LayerNorm and bias pieces), the MLP
// width likewise (fc1's bias), the vocabulary over q, and each micro-batch's
// samples over the q grid rows.
void check_tp2d(const Config& c) {
  const ParallelConfig& p = c.parallel;
  const ModelConfig& m = c.model;
  const int q = grid_side(p.tp);
  NDT_CHECK(
      q > 0,
      ConfigError,
      "parallel.tp=",
      p.tp,
      " with parallel.tp_mode=2d: the tensor-parallel ranks form a q x q "
      "grid, so parallel.tp must be a perfect square q^2 with q >= 2 (4, 9, "
      "16, ...)");
  NDT_CHECK(
      m.kind != ModelKind::kMlp,
      ConfigError,
      "parallel.tp_mode=2d: model.kind mlp has no tensor-parallel layers; "
      "use model.kind vit or gpt, or parallel.tp=1");
  NDT_CHECK(
      p.dp == 1 || p.dp_mode == DpMode::kMpi,
      ConfigError,
      "parallel.tp_mode=2d needs parallel.dp_mode=mpi");
  NDT_CHECK(
      !p.tp_seq,
      ConfigError,
      "parallel.tp_seq (sequence-split regions) is a parallel.tp_mode=1d "
      "option; 2d already splits every activation over the grid");
  NDT_CHECK(
      m.heads % q == 0,
      ConfigError,
      "model.heads (",
      m.heads,
      ") must be divisible by the 2D grid side q = ",
      q,
      " (parallel.tp=",
      p.tp,
      "): each grid column holds heads/q attention heads");
  NDT_CHECK(
      m.dim % (q * q) == 0,
      ConfigError,
      "model.dim (",
      m.dim,
      ") must be divisible by parallel.tp (",
      p.tp,
      " = q^2) with parallel.tp_mode=2d: LayerNorm and bias vectors are "
      "split in q^2 pieces");
  NDT_CHECK(
      m.mlp_dim % (q * q) == 0,
      ConfigError,
      "model.mlp_dim (",
      m.mlp_dim,
      ") must be divisible by parallel.tp (",
      p.tp,
      " = q^2) with parallel.tp_mode=2d: the MLP's first bias is split in "
      "q^2 pieces");
  if (m.kind == ModelKind::kGpt) {
    NDT_CHECK(
        m.vocab % q == 0,
        ConfigError,
        "model.vocab (",
        m.vocab,
        ") must be divisible by the 2D grid side q = ",
        q,
        " (parallel.tp=",
        p.tp,
        "): the vocabulary is split over the grid columns (no padding is "
        "done)");
  }
  const int64_t micro = c.train.batch_size / p.dp / p.microbatches;
  NDT_CHECK(
      micro % q == 0,
      ConfigError,
      "parallel.tp_mode=2d splits each micro-batch's samples over the ",
      q,
      " grid rows: train.batch_size (",
      c.train.batch_size,
      ") / parallel.dp (",
      p.dp,
      ") / parallel.microbatches (",
      p.microbatches,
      ") = ",
      micro,
      " samples is not divisible by q = ",
      q);
}

class Tp2d final : public TensorParallelMode {
 public:
  explicit Tp2d(const Config& c) : q_(grid_side(c.parallel.tp)) {
    check_tp2d(c);
  }
  // Grid row i outer, column j inner: the ranks of a grid row are
  // consecutive.
  std::vector<MeshAxis> axes() const override {
    return {{"tp_row", q_}, {"tp_col", q_}};
  }
  std::unique_ptr<Builder> make_builder(Mesh& mesh) const override {
    return std::make_unique<Tp2dBuilder>(mesh);
  }
  // [B/q, .., C/q]: my row-block of the samples, my column-block of the
  // features.
  Shape local_activation(const Shape& global) const override {
    Shape s = global;
    NDT_ASSERT(s.front() % q_ == 0 && s.back() % q_ == 0, shape_str(global));
    s.front() /= q_;
    s.back() /= q_;
    return s;
  }
  // Row-block i of the n samples.
  SampleRows sample_rows(const Mesh& mesh, int64_t n) const override {
    NDT_CHECK(
        n % q_ == 0,
        ConfigError,
        "parallel.tp_mode=2d splits every batch's samples over the ",
        q_,
        " grid rows: a batch of ",
        n,
        " samples does not split (training: train.batch_size / parallel.dp "
        "/ parallel.microbatches; evaluation: each parallel.dp rank's share "
        "of train.eval_samples, in batches of train.batch_size)");
    const int64_t count = n / q_;
    return {mesh.coord("tp_row") * count, count};
  }
  std::vector<std::string> sample_axes() const override {
    return {"tp_row"};
  }

 private:
  int q_;
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
    case TpMode::k2d:
      return std::make_unique<Tp2d>(config);
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
