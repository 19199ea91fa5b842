// Model: an input layer, a list of blocks and a loss head.
//
// Modules are numbered 0 = input layer, 1 + i = block i, num_modules() - 1
// = head; the Context of a forward has child(m) for module m. Pipeline
// stages run contiguous module ranges (forward_range / backward_range) of
// the same model definition: a build keeps only the modules its KeepModule
// accepts and frees each other one as soon as it is built, so a pipeline
// rank never holds more than its own modules and the one being built.
// build_mlp / build_vit / build_gpt make the three models of ndtrain from
// their options through a Builder (nn/builder.h); each is defined in its
// own file (nn/mlp.cpp, nn/vit.cpp, nn/gpt.cpp).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/builder.h"
#include "nn/head.h"
#include "nn/module.h"

namespace ndt {

// Called with each module as soon as it is built (module numbers as
// above, its parameters in declaration order); returns whether the build
// keeps it. It may prepare a kept module's parameters (initialise them,
// hand them to data parallelism) before the next module is built. Null
// keeps all.
using KeepModule =
    std::function<bool(int m, const std::vector<Parameter*>& params)>;

// Keeps no module: the build only describes the model (Model::described).
bool keep_no_module(int m, const std::vector<Parameter*>& params);

// A parameter as a build made it, whether its module was kept or not.
struct ParamDesc {
  std::string name;
  Shape global_shape;
  int64_t numel = 0;  // this rank's elements (its shard in tensor parallelism)
  int layer = 0;      // the module's layer that reads it (parameter_layers)
};

class Model {
 public:
  explicit Model(KeepModule keep = nullptr) : keep_(std::move(keep)) {}

  std::string kind;  // "mlp", "vit", "gpt"
  std::unique_ptr<Module> embed;
  std::vector<std::unique_ptr<Module>> blocks;
  std::unique_ptr<LossHead> head;
  // Output shape of module m without the batch dimension, for every module
  // but the head (pipeline stages size their receive buffers with it).
  std::vector<Shape> sample_shapes;
  double flops_per_sample = 0;  // training (forward + backward) FLOPs
  // What parallel.recompute=block adds to them: the forward FLOPs of the
  // modules between the input layer and the head (Model::forward_range).
  double recompute_flops_per_sample = 0;
  int64_t loss_terms_per_sample = 1;

  // Called during backward right after module m's gradients are final
  // (m = 0 input layer, 1 + i block i, num_modules() - 1 head), in the order
  // head, last block, ..., input layer. Data parallelism starts gradient
  // communication here.
  std::function<void(int)> on_backward_done;
  // Called right before module m's backward, in the same order: ZeRO
  // stage 2 readies the gradient buffers the module is about to write,
  // stage 3 gathers the parameters it reads.
  std::function<void(int)> on_backward_begin;
  // Called right before module m's forward (forward_range, also in
  // evaluation): ZeRO stage 3 gathers the parameters it reads.
  std::function<void(int)> on_forward_begin;
  // Called inside module m's forward and backward before each of its
  // layers that reads parameters (begin_layer(), for modules of several
  // layers: ParamDesc::layer), after on_forward_begin / on_backward_begin:
  // data parallelism launches a bucket's reduce once the layers after it
  // in backward are done, ZeRO readies its slots and (stage 3) gathers
  // layer by layer. Not called while backward runs a module's forward
  // again (recompute).
  std::function<void(int m, int layer, bool forward)> on_layer_begin;
  // Called between layers inside a module's forward and backward
  // (RunState::comm_poll), more often than the hooks above: lets in-flight
  // communication advance.
  std::function<void()> on_comm_poll;

  // The build adds the input layer, then each block in order, then the
  // head (which ends the build: the KeepModule is released). A module the
  // KeepModule refuses is described (described()) and freed at once; its slot
  // stays null (has_module() is false).
  void add_embed(std::unique_ptr<Module> m);
  void add_block(std::unique_ptr<Module> m);
  void add_head(std::unique_ptr<LossHead> h);
  // The parameters of module m as built, kept or not; of every module.
  const std::vector<ParamDesc>& described(int m) const;
  const std::vector<std::vector<ParamDesc>>& described_modules() const {
    return described_;
  }

  // All parameters in a fixed order: input layer, blocks, head (only the
  // modules kept).
  std::vector<Parameter*> parameters();
  int num_modules() const {
    return static_cast<int>(blocks.size()) + 2;
  }
  // Parameters of module m (same numbering as on_backward_done).
  std::vector<Parameter*> module_parameters(int m);
  int64_t num_parameters();
  void init(uint64_t seed);
  void zero_grad();

  // Forward and backward of one (micro-)batch. Parameter grads accumulate
  // d(scale * summed loss)/dparam; stats gets the loss terms.
  void forward_backward(
      const Tensor& input,
      const Tensor& targets,
      Context& ctx,
      float scale,
      LossStats& stats);
  // Forward of modules [first, last] on one (micro-)batch. x: the input of
  // module `first` (the raw input when first == 0). When last is the head,
  // targets are its labels, the loss terms go to stats and the result is
  // undefined; otherwise the result is module last's output. recompute:
  // each block keeps only its input (Context::recompute_input) and
  // backward_range runs its forward again (activation checkpointing).
  // The module's Context is ctx.child(m). Calls on_forward_begin(m)
  // before each module.
  Tensor forward_range(
      int first,
      int last,
      const Tensor& x,
      const Tensor& targets,
      Context& ctx,
      LossStats& stats,
      bool recompute = false);
  // Backward of modules [first, last] after forward_range on ctx. dy: the
  // gradient of module last's output (ignored when last is the head, whose
  // loss is scaled by `scale`). Returns the gradient of module first's
  // input (undefined when first == 0). Calls on_backward_begin(m) before
  // and on_backward_done(m) after each module.
  Tensor backward_range(
      int first, int last, const Tensor& dy, Context& ctx, float scale);
  bool has_module(int m) const;

  // Forward only (evaluation); nothing is kept for backward: each module's
  // saved tensors are dropped as soon as its forward returns (so does
  // forward_range whenever ctx.run.training is false).
  void forward_eval(
      const Tensor& input,
      const Tensor& targets,
      Context& ctx,
      LossStats& stats);

 private:
  Module& module(int m);
  // Module m's RunState::layer_begin: calls on_layer_begin(m, ...).
  std::function<void(int, bool)> layer_hook(int m);
  // Records module m's parameters and their layers (empty: all layer 0);
  // true when the build keeps it.
  bool describe(
      int m, std::vector<Parameter*> params, const std::vector<int>& layers);

  KeepModule keep_;
  std::vector<std::vector<ParamDesc>> described_;  // per module
  std::vector<Parameter*> params_;
};

struct MlpOptions {
  int inputs = 784;
  std::vector<int> hidden = {1024, 1024};
  int classes = 10;
  Act act = Act::kGelu;
  float dropout = 0;
};

struct VitOptions {
  int image_size = 28;
  int channels = 1;
  int patch = 7;
  int dim = 128;
  int depth = 4;
  int heads = 4;
  int mlp_dim = 512;
  int classes = 10;
  HeadPool pool = HeadPool::kCls;
  float dropout = 0;
  float init_std = 0.02f;
};

struct GptOptions {
  int vocab = 256;
  int seq_len = 128;
  int dim = 256;
  int depth = 4;
  int heads = 4;
  int mlp_dim = 1024;
  float dropout = 0;
  float init_std = 0.02f;
};

// keep: the modules this rank holds (null: all).
std::unique_ptr<Model> build_mlp(
    const MlpOptions& options, Builder& builder, KeepModule keep = nullptr);
std::unique_ptr<Model> build_vit(
    const VitOptions& options, Builder& builder, KeepModule keep = nullptr);
std::unique_ptr<Model> build_gpt(
    const GptOptions& options, Builder& builder, KeepModule keep = nullptr);

namespace detail {

// Training FLOPs per token (3x forward) of `depth` transformer blocks of
// width C and MLP width F whose attention computes `keys` scores per query
// (T, or fewer under the causal mask: ops::attention_scores): 2
// per multiply-add; attention scores and weighted sum are 2*keys*C each.
// Shared by the ViT and the GPT.
double transformer_flops_per_token(int depth, int C, int F, double keys);

}  // namespace detail

}  // namespace ndt
