// ModelShape: one of the three models (nn/model.h) as one rank holds it
// under a tensor-parallel mode (1d over tp ranks, 2d and 2.5d on q x q
// grids, 3d on a p x p x p cube), computed from the model's options and the
// parallel config alone: per module (numbered as Model: 0 = input layer,
// 1 + i = block i, last = head) its kind, its parameters in the order
// collect_parameters() gives them with their local element counts and the
// mesh axes that shard them, and its output per sample (what a pipeline
// stage sends, before the mode's split). The plan's communication and
// memory formulas read it.
//
// Not here: building anything, or activations inside a module.
//
// Shape letters: C = model.dim, F = model.mlp_dim, V = vocabulary,
// T = tokens per sample, K = classes, P = patch, Ch = image channels,
// tp = tensor-parallel ranks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/config.h"
#include "nn/model.h"

namespace ndt {

enum class ModuleKind {
  kFlatten,           // MLP input: no parameters
  kLinear,            // MLP hidden layer (replicated)
  kDropout,           // MLP dropout block
  kPatchEmbedding,    // ViT input (replicated)
  kTokenEmbedding,    // GPT input (vocabulary-parallel under tp)
  kTransformerBlock,  // ViT / GPT block (column / row parallel under tp)
  kClassifierHead,    // MLP / ViT head (replicated)
  kLmHead,            // GPT head (vocabulary-parallel under tp)
};

struct ParamShape {
  std::string name;
  int64_t numel_local = 0;  // elements this rank holds
  // The mesh axes of size > 1 its Layout shards it over, sorted (as
  // optim/layer_norms.h's sharded_axes); empty when whole.
  std::vector<std::string> shard_axes;
  int layer = 0;  // the module's layer that reads it (ParamDesc::layer)
};

struct ModuleShape {
  ModuleKind kind = ModuleKind::kFlatten;
  std::vector<ParamShape> params;
  std::vector<int64_t> sample_out;  // output per sample; empty for the head
};

struct ModelShape {
  ModelKind kind = ModelKind::kMlp;
  int tp = 1;
  TpMode tp_mode = TpMode::k1d;  // k1d also when tp == 1
  int tp_side = 1;  // the grid side q (2d, 2.5d) or cube side p (3d)
  int64_t tokens_per_sample = 1;  // T (1 for the MLP)
  int64_t dim = 0;                // C (transformers)
  int64_t mlp_dim = 0;            // F (transformers)
  int64_t loss_terms_per_sample = 1;
  int64_t vocab = 0;                // V (GPT)
  HeadPool pool = HeadPool::kNone;  // the classifier's pooling (ViT)
  int64_t classes = 0;              // K (MLP, ViT)
  int64_t patch_inputs = 0;         // Ch P^2, one patch's pixels (ViT)
  Act act = Act::kNone;             // the hidden layers' activation (MLP)
  std::vector<ModuleShape> modules;

  int num_modules() const {
    return static_cast<int>(modules.size());
  }
  int head() const {
    return num_modules() - 1;
  }
};

// The MLP has no tensor-parallel form (tp must be 1).
ModelShape mlp_shape(const MlpOptions& options);
// Under 1D tensor parallelism over tp ranks.
ModelShape vit_shape(const VitOptions& options, int tp);
ModelShape gpt_shape(const GptOptions& options, int tp);
// The model of `config` (converted as the trainer does), under 1D tp.
ModelShape model_shape(const ModelConfig& config, int tp);
// Under the configured mode (parallel.tp, tp_mode, tp_depth). `parallel`
// must fit the mode (make_tensor_parallel_mode checks it); a split the
// shapes cannot make is a ConfigError.
ModelShape model_shape(
    const ModelConfig& config, const ParallelConfig& parallel);

// Sum of numel_local over module m's parameters.
int64_t module_numel(const ModelShape& shape, int m);

}  // namespace ndt
