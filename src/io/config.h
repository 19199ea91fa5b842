// Run configuration: YAML file + dotted command-line overrides.
//
// load_config() reads a YAML file, applies `key=value` overrides (dotted
// keys, e.g. optim.lr=0.001 train.steps=200), and validates every key
// against the schema: unknown keys, wrong types and out-of-range values
// throw one ConfigError naming the key and what is allowed, before anything
// is allocated. Defaults are the values below. The config is stored in
// checkpoint manifests as JSON (config_to_json / config_from_json).
#pragma once

#include <cstdint>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nn/act.h"
#include "nn/head_pool.h"
#include "optim/lr_decay.h"
#include "optim/lr_scaling.h"

namespace ndt {

enum class ModelKind { kMlp, kVit, kGpt };
enum class DatasetKind { kFashionMnist, kFortunes, kSynthetic };
enum class OptimKind { kSgd, kAdamw, kLars, kLamb };
enum class LarsModeKind { kPaper, kColossal };
enum class DpMode { kMpi, kThreads };
enum class PipeSchedule { kNaive, kGpipe, kOneFOneB, kInterleaved };
enum class Recompute { kNone, kBlock };
enum class TpMode { k1d, k2d, k2p5d, k3d };
enum class SpAttention { kRsa, kRing, kUlysses };

// One table per enum: every enumerator with its name, in declaration
// order. Config parsing and printing, the CLI and domain code all read
// these; a new enumerator is one new row.
template <typename E>
struct EnumName {
  E value;
  const char* name;
};
template <typename E>
struct EnumNames;
template <>
struct EnumNames<ModelKind> {
  static constexpr EnumName<ModelKind> kTable[] = {
      {ModelKind::kMlp, "mlp"},
      {ModelKind::kVit, "vit"},
      {ModelKind::kGpt, "gpt"}};
};
template <>
struct EnumNames<Act> {
  static constexpr EnumName<Act> kTable[] = {
      {Act::kGelu, "gelu"}, {Act::kRelu, "relu"}};
};
template <>
struct EnumNames<HeadPool> {
  static constexpr EnumName<HeadPool> kTable[] = {
      {HeadPool::kCls, "cls"}, {HeadPool::kMean, "mean"}};
};
template <>
struct EnumNames<DatasetKind> {
  static constexpr EnumName<DatasetKind> kTable[] = {
      {DatasetKind::kFashionMnist, "fashion_mnist"},
      {DatasetKind::kFortunes, "fortunes"},
      {DatasetKind::kSynthetic, "synthetic"}};
};
template <>
struct EnumNames<OptimKind> {
  static constexpr EnumName<OptimKind> kTable[] = {
      {OptimKind::kSgd, "sgd"},
      {OptimKind::kAdamw, "adamw"},
      {OptimKind::kLars, "lars"},
      {OptimKind::kLamb, "lamb"}};
};
template <>
struct EnumNames<LarsModeKind> {
  static constexpr EnumName<LarsModeKind> kTable[] = {
      {LarsModeKind::kPaper, "paper"}, {LarsModeKind::kColossal, "colossal"}};
};
template <>
struct EnumNames<LrDecay> {
  static constexpr EnumName<LrDecay> kTable[] = {
      {LrDecay::kConstant, "constant"},
      {LrDecay::kCosine, "cosine"},
      {LrDecay::kLinear, "linear"},
      {LrDecay::kPolynomial, "polynomial"}};
};
template <>
struct EnumNames<LrScaling> {
  static constexpr EnumName<LrScaling> kTable[] = {
      {LrScaling::kNone, "none"},
      {LrScaling::kLinear, "linear"},
      {LrScaling::kSqrt, "sqrt"}};
};
template <>
struct EnumNames<DpMode> {
  static constexpr EnumName<DpMode> kTable[] = {
      {DpMode::kMpi, "mpi"}, {DpMode::kThreads, "threads"}};
};
template <>
struct EnumNames<PipeSchedule> {
  static constexpr EnumName<PipeSchedule> kTable[] = {
      {PipeSchedule::kNaive, "naive"},
      {PipeSchedule::kGpipe, "gpipe"},
      {PipeSchedule::kOneFOneB, "1f1b"},
      {PipeSchedule::kInterleaved, "interleaved"}};
};
template <>
struct EnumNames<Recompute> {
  static constexpr EnumName<Recompute> kTable[] = {
      {Recompute::kNone, "none"}, {Recompute::kBlock, "block"}};
};
template <>
struct EnumNames<TpMode> {
  static constexpr EnumName<TpMode> kTable[] = {
      {TpMode::k1d, "1d"},
      {TpMode::k2d, "2d"},
      {TpMode::k2p5d, "2.5d"},
      {TpMode::k3d, "3d"}};
};
template <>
struct EnumNames<SpAttention> {
  static constexpr EnumName<SpAttention> kTable[] = {
      {SpAttention::kRsa, "rsa"},
      {SpAttention::kRing, "ring"},
      {SpAttention::kUlysses, "ulysses"}};
};

template <typename E>
concept NamedEnum = requires {
  EnumNames<E>::kTable;
};

// The name of v ("?" for a value outside the table).
template <NamedEnum E>
constexpr const char* to_string(E v) {
  for (const EnumName<E>& e : EnumNames<E>::kTable) {
    if (e.value == v)
      return e.name;
  }
  return "?";
}

// The enumerator named `name`, if any.
template <NamedEnum E>
constexpr std::optional<E> enum_from_string(std::string_view name) {
  for (const EnumName<E>& e : EnumNames<E>::kTable) {
    if (name == e.name)
      return e.value;
  }
  return std::nullopt;
}

// "a, b or c": every name of E, for messages.
template <NamedEnum E>
std::string enum_names() {
  std::string out;
  const size_t n = std::size(EnumNames<E>::kTable);
  for (size_t i = 0; i < n; ++i) {
    out += (i == 0 ? "" : i + 1 == n ? " or " : ", ");
    out += EnumNames<E>::kTable[i].name;
  }
  return out;
}

struct RunConfig {
  std::string name = "run";  // run.name: [A-Za-z0-9_.-]+
  std::string dir;           // run.dir: output dir; empty -> runs/<name>
};

struct ModelConfig {
  ModelKind kind = ModelKind::kMlp;        // model.kind: mlp | vit | gpt
  std::vector<int> hidden = {1024, 1024};  // model.hidden (mlp), each >= 1
  Act activation = Act::kGelu;             // model.activation: gelu | relu
  int dim = 128;      // model.dim (vit, gpt) >= 1, divisible by heads
  int depth = 4;      // model.depth (vit, gpt) >= 1
  int heads = 4;      // model.heads >= 1
  int mlp_dim = 512;  // model.mlp_dim >= 1
  int patch = 7;      // model.patch (vit) >= 1, divides image_size
  HeadPool pool = HeadPool::kCls;  // model.pool (vit): cls | mean
  int image_size = 28;             // model.image_size (mlp, vit) >= 1
  int channels = 1;                // model.channels (mlp, vit) >= 1
  int num_classes = 10;            // model.num_classes (mlp, vit) >= 2
  int seq_len = 128;               // model.seq_len (gpt) >= 2
  int vocab = 256;                 // model.vocab (gpt) >= 2
  float dropout = 0.0f;            // model.dropout in [0, 1)
  float init_std = 0.02f;          // model.init_std > 0
};

struct DataConfig {
  DatasetKind name = DatasetKind::kFashionMnist;  // data.name: fashion_mnist |
                                                  // fortunes | synthetic
  std::string path;       // data.path; empty -> the Debian package location
  bool cache = true;      // data.cache: keep decoded copies of compressed
                          // files (data/decode_cache.h)
  std::string cache_dir;  // data.cache_dir; empty -> $XDG_CACHE_HOME/ndtrain
                          // or ~/.cache/ndtrain
  bool augment = false;   // data.augment (images): random flip + shift
  int shift = 2;          // data.shift in [0, 8]: max translation in pixels
};

struct TrainConfig {
  int64_t steps = 1000;      // train.steps >= 1
  int64_t batch_size = 128;  // train.batch_size >= 1 (the global batch)
  uint64_t seed = 1;         // train.seed >= 0
  std::string resume;        // train.resume: checkpoint dir, "latest", or empty
  bool overwrite = false;    // train.overwrite: a fresh run (no resume) may
                             // replace a previous run's checkpoints and
                             // metrics in its run dir
  int64_t log_every = 50;    // train.log_every >= 1
  int64_t eval_every = 0;    // train.eval_every >= 0 (0: only at the end)
  int64_t eval_samples = 0;  // train.eval_samples >= 0 (0: whole eval set)
  int64_t checkpoint_every =
      0;                 // train.checkpoint_every >= 0 (0: only at the end)
  int threads = 0;       // train.threads >= 0 (0: all cores)
  bool trace = false;    // train.trace: write <run dir>/trace.json (Chrome
                         // trace of every rank's forward/backward/send/recv/
                         // optimizer spans)
  float mem_cap_mb = 0;  // train.mem_cap_mb >= 0: cap on each rank's live
                         // memory as the allocator counts it (MiB; 0: none)
};

struct OptimConfig {
  OptimKind name = OptimKind::kAdamw;  // optim.name: sgd | adamw | lars | lamb
  float lr = 1e-3f;                    // optim.lr > 0
  float weight_decay = 0.0f;           // optim.weight_decay >= 0
  float momentum = 0.9f;               // optim.momentum in [0, 1) (sgd)
  bool nesterov = false;        // optim.nesterov (sgd, needs momentum > 0)
  float beta1 = 0.9f;           // optim.beta1 in [0, 1)
  float beta2 = 0.999f;         // optim.beta2 in [0, 1)
  float eps = 1e-8f;            // optim.eps > 0
  float clip_grad_norm = 0.0f;  // optim.clip_grad_norm >= 0 (0: off)
  LrDecay schedule = LrDecay::kCosine;  // optim.schedule: constant |
                                        // cosine | linear | polynomial
  int64_t warmup_steps = 0;    // optim.warmup_steps >= 0, < train.steps
  float warmup_epochs = 0.0f;  // optim.warmup_epochs >= 0: warmup in passes
                               // over the training set (rounded up to
                               // steps; excludes optim.warmup_steps)
  LrScaling scale_lr = LrScaling::kNone;  // optim.scale_lr: none | linear |
                                          // sqrt: optim.lr is the rate at
                                          // optim.base_batch, scaled to
                                          // train.batch_size (optim/
                                          // lr_scaling.h)
  int64_t base_batch = 0;     // optim.base_batch >= 0: the batch optim.lr was
                              // tuned at (>= 1 with scale_lr linear or sqrt)
  float min_lr_ratio = 0.0f;  // optim.min_lr_ratio in [0, 1]: final lr / lr
  float power = 2.0f;         // optim.power > 0 (polynomial)
  // LARS / LAMB (ALGORITHMS.md 2.5):
  LarsModeKind lars_mode =
      LarsModeKind::kPaper;   // optim.lars_mode: paper | colossal
  float trust_coef = 0.001f;  // optim.trust_coef > 0: LARS eta
  float trust_clip = 0.0f;    // optim.trust_clip >= 0: max trust ratio (0: off)
  bool lamb_bias_correction = true;  // optim.lamb_bias_correction
  bool exclude_no_decay =
      true;  // optim.exclude_no_decay: biases/norms skip layer adaptation
};

struct ParallelConfig {
  int dp = 1;                     // parallel.dp >= 1: data-parallel replicas
  DpMode dp_mode = DpMode::kMpi;  // parallel.dp_mode: mpi (one rank per
                                  // replica) | threads (one process)
  float bucket_mb = 4.0f;  // parallel.bucket_mb > 0: gradient bucket size (MiB)
  int zero = 0;  // parallel.zero: 0 | 1 (ZeRO stage 1: each gradient bucket's
                 // optimizer state and update on one data-parallel rank,
                 // which broadcasts the updated parameters; dp_mode=mpi)
                 // | 2 (stage 2: also the bucket's gradients only there,
                 // reduced every micro-batch) | 3 (stage 3: also its
                 // parameter values, gathered before each module's
                 // forward and backward)
  bool defer_broadcast = true;  // parallel.defer_broadcast: ZeRO stages 1
                                // and 2 broadcast the updated values
                                // during the next forward, each layer
                                // waiting for its own (false: at the end
                                // of the step)
  // Pipeline (world = dp x pp; ranks of one pipeline are consecutive):
  int pp = 1;         // parallel.pp >= 1: pipeline stages (ranks per pipeline)
  int pp_chunks = 1;  // parallel.pp_chunks >= 1: model chunks per pipeline
                      // rank (> 1 needs schedule interleaved)
  std::vector<int> pp_split;  // parallel.pp_split: blocks per virtual stage
                              // (pp x pp_chunks entries >= 1 summing to the
                              // model's blocks); empty: balanced by parameters
  PipeSchedule schedule =
      PipeSchedule::kOneFOneB;  // parallel.schedule: naive | gpipe | 1f1b |
                                // interleaved
  int microbatches = 1;         // parallel.microbatches >= 1: micro-batches per
                                // step and replica (gradient accumulation; the
                                // pipeline's micro-batches when pp > 1)
  Recompute recompute = Recompute::kNone;  // parallel.recompute: none | block
                                           // (activation checkpointing)
  // Tensor parallelism (world = dp x pp x tp):
  int tp = 1;  // parallel.tp >= 1: tensor-parallel ranks per layer
  TpMode tp_mode = TpMode::k1d;  // parallel.tp_mode: 1d (Megatron) | 2d
                                 // (SUMMA, q x q grid, tp = q^2) | 2.5d
                                 // (Tesseract, d q x q grids, tp = q^2 d) |
                                 // 3d (a p x p x p cube, tp = p^3)
  int tp_depth = 1;              // parallel.tp_depth >= 1: d, the grids of 2.5d
  bool tp_seq = false;  // parallel.tp_seq: sequence-split LayerNorm/dropout
                        // regions (all-gather / reduce-scatter boundaries)
  std::string order = "dp,pp,tp";  // parallel.order: mesh axes, outermost
                                   // first (last = consecutive ranks)
  // Sequence parallelism (mesh axis sp, innermost; world = dp x pp x tp x
  // sp): each rank holds sp's share of every sample's tokens.
  int sp = 1;  // parallel.sp >= 1: sequence-parallel ranks per replica
  SpAttention sp_attention = SpAttention::kRing;  // parallel.sp_attention:
                                                  // rsa | ring | ulysses
};

struct CommConfig {
  float timeout_s = 300.0f;  // comm.timeout_s > 0: watchdog bound per operation
};

struct VerifyConfig {
  int64_t steps = 5;  // verify.steps >= 1: steps compared by `ndtrain verify`
};

// Blocks of the model's block list (the units pipeline stages are cut
// from): mlp one per hidden layer (two with dropout: linear, dropout), vit
// and gpt model.depth.
int model_blocks(const ModelConfig& model);
// Tokens per sample of the transformer models' [B, T, C] activations (gpt:
// model.seq_len; vit: patches, plus the class token with pool cls); 1 for
// the MLP.
int64_t model_tokens(const ModelConfig& model);

struct Config {
  RunConfig run;
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  OptimConfig optim;
  ParallelConfig parallel;
  CommConfig comm;
  VerifyConfig verify;

  // run.dir, or runs/<run.name> when empty.
  std::string run_dir() const;
};

// Loads `yaml_path` (empty: defaults only) and applies `overrides`
// ("a.b=value", value parsed as YAML: numbers, true/false, [1, 2], text).
Config load_config(
    const std::string& yaml_path, const std::vector<std::string>& overrides);

nlohmann::json config_to_json(const Config& config);

// Samples of one micro-batch on one data-parallel replica: train.batch_size
// / parallel.dp / parallel.microbatches (load_config checks they divide).
int64_t micro_batch_size(const Config& config);
// The threads a process computes with: train.threads, or every core the
// process may use (0).
int train_threads(const Config& config);
// Inverse of config_to_json; validates like load_config.
Config config_from_json(const nlohmann::json& json);

}  // namespace ndt
