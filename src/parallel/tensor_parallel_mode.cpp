#include "parallel/tensor_parallel_mode.h"

#include "base/check.h"
#include "base/fault.h"
#include "parallel/sequence_parallel.h"
#include "parallel/tp1d_builder.h"
#include "parallel/tp2d_builder.h"
#include "parallel/tp3d_builder.h"
#include "parallel/tp3d_cube.h"

namespace ndt {

SampleRows TensorParallelMode::sample_rows(const Mesh&, int64_t n) const {
  return {0, n};
}

int TensorParallelMode::head_split() const {
  return 1;
}

int TensorParallelMode::sample_blocks() const {
  return 1;
}

std::vector<std::string> TensorParallelMode::sample_axes() const {
  return {};
}

std::vector<std::string> TensorParallelMode::replica_axes() const {
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

// 1D's sequence-split regions split `batch`'s tokens (`samples` samples
// of `tokens` tokens) over the tp ranks; under sequence parallelism each
// sp rank's tokens (an uneven sp split is sequence_parallel.h's error).
void check_token_split(
    int tp, int sp, int64_t tokens, int64_t samples, const char* batch) {
  const bool split = sp > 1 && tokens % sp == 0;
  const int64_t T = split ? tokens / sp : tokens;
  NDT_CHECK(
      samples * T % tp == 0,
      ConfigError,
      "parallel.tp_seq splits ",
      batch,
      " tokens",
      split ? " on a sequence-parallel rank" : "",
      " over parallel.tp (",
      tp,
      ") ranks: ",
      samples,
      " samples x ",
      T,
      " tokens",
      split ? " (" + std::to_string(tokens) + " / parallel.sp " +
                  std::to_string(sp) + ")"
            : "",
      " = ",
      samples * T,
      " is not divisible by ",
      tp);
}

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
    check_token_split(
        p.tp, p.sp, model_tokens(m), micro_batch_size(c), "each micro-batch's");
  }
}

class Tp1d final : public TensorParallelMode {
 public:
  explicit Tp1d(const Config& c)
      : tp_(c.parallel.tp),
        token_split_(c.parallel.tp_seq),
        tokens_(model_tokens(c.model)),
        sp_(c.parallel.sp) {
    check_tp1d(c);
  }
  std::vector<MeshAxis> axes() const override {
    return {{"tp", tp_}};
  }
  std::unique_ptr<Builder> make_builder(Mesh& mesh) const override {
    return std::make_unique<Tp1dBuilder>(
        mesh.group("tp"), token_split_, tokens_);
  }
  int head_split() const override {
    return tp_;
  }
  // With sequence-split regions an activation is my tokens [N / tp, C]
  // (parallel/regions.h); otherwise replicated.
  Shape local_activation(const Shape& global) const override {
    if (!token_split_)
      return global;
    const int64_t C = global.back();
    return {shape_numel(global) / C / tp_, C};
  }
  // Every rank computes on all n samples; with sequence-split regions
  // their tokens split over the tp ranks.
  SampleRows sample_rows(const Mesh&, int64_t n) const override {
    if (token_split_)
      check_token_split(tp_, sp_, tokens_, n, "a batch's");
    return {0, n};
  }

 private:
  int tp_;
  bool token_split_;
  int64_t tokens_;
  int sp_;
};

// The grid side q of parallel.tp = q^2 (0 when tp is not such a square).
int grid_side(int tp) {
  int q = 1;
  while ((q + 1) * (q + 1) <= tp)
    ++q;
  return q >= 2 && q * q == tp ? q : 0;
}

// The grid side q of a 2D (d = 1) or 2.5D (d grids) layout: parallel.tp
// = q^2 d. 0 when tp / d is not such a square.
int grid_side_of(const ParallelConfig& p) {
  const int d = p.tp_mode == TpMode::k2p5d ? p.tp_depth : 1;
  return p.tp % d == 0 ? grid_side(p.tp / d) : 0;
}

// 2D and 2.5D: d grids of q x q; every split the layers make must be
// exact: heads over q, the hidden width in q^2 pieces (LayerNorm and bias
// pieces), the MLP width likewise (fc1's bias), the vocabulary over q, and
// each micro-batch's samples over the d x q grid rows of all grids.
void check_tp2d(const Config& c) {
  const ParallelConfig& p = c.parallel;
  const ModelConfig& m = c.model;
  const int q = grid_side_of(p);
  const int d = p.tp_mode == TpMode::k2p5d ? p.tp_depth : 1;
  const std::string mode =
      "parallel.tp_mode=" + std::string(to_string(p.tp_mode));
  if (d == 1) {
    NDT_CHECK(
        q > 0,
        ConfigError,
        "parallel.tp=",
        p.tp,
        " with ",
        mode,
        ": the tensor-parallel ranks form a q x q grid, so parallel.tp must "
        "be a perfect square q^2 with q >= 2 (4, 9, 16, ...)");
  } else {
    NDT_CHECK(
        q > 0,
        ConfigError,
        "parallel.tp=",
        p.tp,
        " with ",
        mode,
        " and parallel.tp_depth=",
        d,
        ": the tensor-parallel ranks form ",
        d,
        " grids of q x q, so parallel.tp must be q^2 x ",
        d,
        " with q >= 2 (",
        4 * d,
        ", ",
        9 * d,
        ", ",
        16 * d,
        ", ...)");
  }
  NDT_CHECK(
      m.kind != ModelKind::kMlp,
      ConfigError,
      mode,
      ": model.kind mlp has no tensor-parallel layers; use model.kind vit or "
      "gpt, or parallel.tp=1");
  NDT_CHECK(
      p.dp == 1 || p.dp_mode == DpMode::kMpi,
      ConfigError,
      mode,
      " needs parallel.dp_mode=mpi");
  NDT_CHECK(
      !p.tp_seq,
      ConfigError,
      "parallel.tp_seq (sequence-split regions) is a parallel.tp_mode=1d "
      "option; ",
      mode,
      " already splits every activation over the grid");
  NDT_CHECK(
      m.heads % q == 0,
      ConfigError,
      "model.heads (",
      m.heads,
      ") must be divisible by the grid side q = ",
      q,
      " (parallel.tp=",
      p.tp,
      ", ",
      mode,
      "): each grid column holds heads/q attention heads");
  NDT_CHECK(
      m.dim % (q * q) == 0,
      ConfigError,
      "model.dim (",
      m.dim,
      ") must be divisible by q^2 = ",
      q * q,
      " with ",
      mode,
      " and parallel.tp=",
      p.tp,
      ": LayerNorm and bias vectors are split in q^2 pieces");
  NDT_CHECK(
      m.mlp_dim % (q * q) == 0,
      ConfigError,
      "model.mlp_dim (",
      m.mlp_dim,
      ") must be divisible by q^2 = ",
      q * q,
      " with ",
      mode,
      " and parallel.tp=",
      p.tp,
      ": the MLP's first bias is split in q^2 pieces");
  if (m.kind == ModelKind::kGpt) {
    NDT_CHECK(
        m.vocab % q == 0,
        ConfigError,
        "model.vocab (",
        m.vocab,
        ") must be divisible by the grid side q = ",
        q,
        " (parallel.tp=",
        p.tp,
        ", ",
        mode,
        "): the vocabulary is split over the grid columns (no padding is "
        "done)");
  }
  const int64_t micro = micro_batch_size(c);
  NDT_CHECK(
      micro % (int64_t{d} * q) == 0,
      ConfigError,
      mode,
      " splits each micro-batch's samples over the ",
      d * q,
      " grid rows",
      d > 1 ? " of all grids" : "",
      ": train.batch_size (",
      c.train.batch_size,
      ") / parallel.dp (",
      p.dp,
      ") / parallel.microbatches (",
      p.microbatches,
      ") = ",
      micro,
      " samples is not divisible by ",
      d * q);
}

// 2D (d = 1) and 2.5D (Tesseract, ALGORITHMS.md 2.2: d = parallel.
// tp_depth grids): each grid runs the 2D layers (tp2d_builder.h) on its
// own samples; the grids hold the same parameters, whose gradients are
// summed over the depth axis "tp_dep" with the data-parallel ones.
class Tp2d final : public TensorParallelMode {
 public:
  explicit Tp2d(const Config& c)
      : q_(grid_side_of(c.parallel)),
        d_(c.parallel.tp_mode == TpMode::k2p5d ? c.parallel.tp_depth : 1) {
    check_tp2d(c);
  }
  // Depth k outermost, then grid row i, column j innermost (rank = j + q i
  // + q^2 k): the ranks of a grid row are consecutive. 2D has no depth
  // axis.
  std::vector<MeshAxis> axes() const override {
    std::vector<MeshAxis> out;
    if (d_ > 1)
      out.push_back({"tp_dep", d_});
    out.push_back({"tp_row", q_});
    out.push_back({"tp_col", q_});
    return out;
  }
  std::unique_ptr<Builder> make_builder(Mesh& mesh) const override {
    return std::make_unique<Tp2dBuilder>(mesh);
  }
  // [B/(d q), .., C/q]: my row-block of the samples, my column-block of the
  // features.
  Shape local_activation(const Shape& global) const override {
    Shape s = global;
    NDT_ASSERT(
        s.front() % (d_ * q_) == 0 && s.back() % q_ == 0, shape_str(global));
    s.front() /= d_ * q_;
    s.back() /= q_;
    return s;
  }
  int head_split() const override {
    return q_;
  }
  int sample_blocks() const override {
    return d_ * q_;
  }
  // Row-block k q + i of the n samples (grid k, row i).
  SampleRows sample_rows(const Mesh& mesh, int64_t n) const override {
    const int rows = sample_blocks();
    NDT_CHECK(
        n % rows == 0,
        ConfigError,
        "parallel.tp_mode=",
        d_ > 1 ? "2.5d" : "2d",
        " splits every batch's samples over the ",
        rows,
        " grid rows",
        d_ > 1 ? " of all grids" : "",
        ": a batch of ",
        n,
        " samples does not split (training: train.batch_size / parallel.dp "
        "/ parallel.microbatches; evaluation: each parallel.dp rank's share "
        "of train.eval_samples, in batches of the training micro-batch)");
    const int64_t count = n / rows;
    const int depth =
        d_ > 1 && !NDT_FAULT(kTp2p5dSameSamples) ? mesh.coord("tp_dep") : 0;
    const int row = depth * q_ + mesh.coord("tp_row");
    return {row * count, count};
  }
  std::vector<std::string> sample_axes() const override {
    if (d_ > 1)
      return {"tp_dep", "tp_row"};
    return {"tp_row"};
  }
  std::vector<std::string> replica_axes() const override {
    if (d_ > 1)
      return {"tp_dep"};
    return {};
  }

 private:
  int q_;
  int d_;
};

// The cube side p of parallel.tp = p^3 (0 when tp is not such a cube).
int cube_side(int tp) {
  int p = 1;
  while ((p + 1) * (p + 1) * (p + 1) <= tp)
    ++p;
  return p >= 2 && p * p * p == tp ? p : 0;
}

// 3D: a p x p x p cube; every split the layers make must be exact: heads
// over p, the hidden and MLP widths (and the vocabulary) in p^2 pieces
// (the outputs of every Linear3d), and each micro-batch's samples in p^2
// blocks.
void check_tp3d(const Config& c) {
  const ParallelConfig& p = c.parallel;
  const ModelConfig& m = c.model;
  const int s = cube_side(p.tp);
  NDT_CHECK(
      s > 0,
      ConfigError,
      "parallel.tp=",
      p.tp,
      " with parallel.tp_mode=3d: the tensor-parallel ranks form a p x p x "
      "p cube, so parallel.tp must be a perfect cube p^3 with p >= 2 (8, "
      "27, 64, ...)");
  NDT_CHECK(
      m.kind != ModelKind::kMlp,
      ConfigError,
      "parallel.tp_mode=3d: model.kind mlp has no tensor-parallel layers; "
      "use model.kind vit or gpt, or parallel.tp=1");
  NDT_CHECK(
      p.dp == 1 || p.dp_mode == DpMode::kMpi,
      ConfigError,
      "parallel.tp_mode=3d needs parallel.dp_mode=mpi");
  NDT_CHECK(
      !p.tp_seq,
      ConfigError,
      "parallel.tp_seq (sequence-split regions) is a parallel.tp_mode=1d "
      "option; 3d already splits every activation over the cube");
  NDT_CHECK(
      m.heads % s == 0,
      ConfigError,
      "model.heads (",
      m.heads,
      ") must be divisible by the cube side p = ",
      s,
      " (parallel.tp=",
      p.tp,
      ", parallel.tp_mode=3d): each rank holds heads/p attention heads");
  const struct {
    const char* key;
    int value;
  } widths[] = {{"model.dim", m.dim}, {"model.mlp_dim", m.mlp_dim}};
  for (const auto& w : widths) {
    NDT_CHECK(
        w.value % (s * s) == 0,
        ConfigError,
        w.key,
        " (",
        w.value,
        ") must be divisible by p^2 = ",
        s * s,
        " with parallel.tp_mode=3d and parallel.tp=",
        p.tp,
        ": every linear's output is split in p^2 pieces");
  }
  if (m.kind == ModelKind::kGpt) {
    NDT_CHECK(
        m.vocab % (s * s) == 0,
        ConfigError,
        "model.vocab (",
        m.vocab,
        ") must be divisible by p^2 = ",
        s * s,
        " (parallel.tp=",
        p.tp,
        ", parallel.tp_mode=3d): the vocabulary projection's output is "
        "split in p^2 pieces (no padding is done)");
  }
  const int64_t micro = micro_batch_size(c);
  NDT_CHECK(
      micro % (s * s) == 0,
      ConfigError,
      "parallel.tp_mode=3d splits each micro-batch's samples in p^2 = ",
      s * s,
      " blocks: train.batch_size (",
      c.train.batch_size,
      ") / parallel.dp (",
      p.dp,
      ") / parallel.microbatches (",
      p.microbatches,
      ") = ",
      micro,
      " samples is not divisible by ",
      s * s);
}

// 3D (ALGORITHMS.md 2.3): the cube of tp3d_cube.h; activations between
// layers are side A, [B/p^2, .., C/p].
class Tp3d final : public TensorParallelMode {
 public:
  explicit Tp3d(const Config& c) : p_(cube_side(c.parallel.tp)) {
    check_tp3d(c);
  }
  std::vector<MeshAxis> axes() const override {
    return {{kTp3dOut, p_}, {kTp3dIn, p_}, {kTp3dWt, p_}};
  }
  std::unique_ptr<Builder> make_builder(Mesh& mesh) const override {
    return std::make_unique<Tp3dBuilder>(mesh);
  }
  Shape local_activation(const Shape& global) const override {
    Shape s = global;
    NDT_ASSERT(
        s.front() % (p_ * p_) == 0 && s.back() % p_ == 0, shape_str(global));
    s.front() /= p_ * p_;
    s.back() /= p_;
    return s;
  }
  int head_split() const override {
    return p_;
  }
  int sample_blocks() const override {
    return p_ * p_;
  }
  // Block wt p + in of the n samples.
  SampleRows sample_rows(const Mesh& mesh, int64_t n) const override {
    const int blocks = sample_blocks();
    NDT_CHECK(
        n % blocks == 0,
        ConfigError,
        "parallel.tp_mode=3d splits every batch's samples in p^2 = ",
        blocks,
        " blocks: a batch of ",
        n,
        " samples does not split (training: train.batch_size / parallel.dp "
        "/ parallel.microbatches; evaluation: each parallel.dp rank's share "
        "of train.eval_samples, in batches of the training micro-batch)");
    const int64_t count = n / blocks;
    const int block = mesh.coord(kTp3dWt) * p_ + mesh.coord(kTp3dIn);
    return {block * count, count};
  }
  std::vector<std::string> sample_axes() const override {
    return {kTp3dWt, kTp3dIn};
  }

 private:
  int p_;
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
    case TpMode::k2p5d:
      return std::make_unique<Tp2d>(config);
    case TpMode::k3d:
      return std::make_unique<Tp3d>(config);
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

std::unique_ptr<Mesh> make_layout_mesh(
    ProcessGroup& world, const Config& config) {
  std::vector<int> sizes;
  std::vector<std::string> names;
  for (const MeshAxis& a : mesh_axes(config)) {
    sizes.push_back(a.size);
    names.push_back(a.name);
  }
  return std::make_unique<Mesh>(world, sizes, names);
}

}  // namespace ndt
