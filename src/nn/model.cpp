#include "nn/model.h"

#include <utility>

#include "base/check.h"
#include "ops/ops.h"

namespace ndt {

std::vector<Parameter*> Model::parameters() {
  if (params_.empty()) {
    for (int m = 0; m < num_modules(); ++m) {
      for (Parameter* p : module_parameters(m))
        params_.push_back(p);
    }
  }
  return params_;
}

std::vector<Parameter*> Model::module_parameters(int m) {
  std::vector<Parameter*> out;
  if (m == 0) {
    if (embed)
      embed->collect_parameters(out);
  } else if (m == num_modules() - 1) {
    if (head)
      head->collect_parameters(out);
  } else if (blocks.at(m - 1)) {
    blocks[m - 1]->collect_parameters(out);
  }
  return out;
}

bool Model::has_module(int m) const {
  if (m == 0)
    return embed != nullptr;
  if (m == num_modules() - 1)
    return head != nullptr;
  return blocks.at(m - 1) != nullptr;
}

Module& Model::module(int m) {
  NDT_ASSERT(
      m >= 0 && m < num_modules() - 1,
      "module ",
      m,
      " is the head, which is not a Module");
  NDT_ASSERT(has_module(m), "module ", m, " is not held by this rank");
  return m == 0 ? *embed : *blocks[m - 1];
}

bool keep_no_module(int, const std::vector<Parameter*>&) {
  return false;
}

bool Model::describe(
    int m, std::vector<Parameter*> params, const std::vector<int>& layers) {
  NDT_ASSERT(
      static_cast<int>(described_.size()) == m,
      "module ",
      m,
      " added out of order");
  NDT_ASSERT(layers.empty() || layers.size() == params.size());
  std::vector<ParamDesc> d;
  for (size_t i = 0; i < params.size(); ++i) {
    const Parameter* p = params[i];
    d.push_back(
        {p->name,
         p->layout.global_shape,
         p->value.numel(),
         layers.empty() ? 0 : layers[i]});
  }
  described_.push_back(std::move(d));
  params_.clear();
  return !keep_ || keep_(m, params);
}

void Model::add_embed(std::unique_ptr<Module> m) {
  NDT_ASSERT(described_.empty(), "the input layer is added first");
  if (describe(0, m->parameters(), m->parameter_layers()))
    embed = std::move(m);
}

void Model::add_block(std::unique_ptr<Module> m) {
  if (describe(
          1 + static_cast<int>(blocks.size()),
          m->parameters(),
          m->parameter_layers()))
    blocks.push_back(std::move(m));
  else
    blocks.push_back(nullptr);
}

void Model::add_head(std::unique_ptr<LossHead> h) {
  std::vector<Parameter*> params;
  h->collect_parameters(params);
  if (describe(num_modules() - 1, params, {}))
    head = std::move(h);
  keep_ = nullptr;  // the build is complete: nothing it captured is needed
}

const std::vector<ParamDesc>& Model::described(int m) const {
  NDT_ASSERT(
      m >= 0 && m < static_cast<int>(described_.size()),
      "module ",
      m,
      " was not built");
  return described_[m];
}

int64_t Model::num_parameters() {
  int64_t n = 0;
  for (Parameter* p : parameters())
    n += shape_numel(p->layout.global_shape);
  return n;
}

void Model::init(uint64_t seed) {
  for (Parameter* p : parameters())
    init_parameter(*p, seed);
}

void Model::zero_grad() {
  for (Parameter* p : parameters())
    ops::zero_(p->grad);
}

std::function<void(int, bool)> Model::layer_hook(int m) {
  return
      [this, m](int layer, bool forward) { on_layer_begin(m, layer, forward); };
}

Tensor Model::forward_range(
    int first,
    int last,
    const Tensor& x_in,
    const Tensor& targets,
    Context& ctx,
    LossStats& stats,
    bool recompute) {
  const int head_m = num_modules() - 1;
  // The input layer never needs its input's gradient; block 0 (module 1)
  // needs its when the input layer has parameters to receive it, or when it
  // starts a pipeline stage (the gradient is sent to the previous stage).
  const bool first_grad =
      first == 1 || (first == 0 && !embed->parameters().empty());
  Tensor x = x_in;
  ctx.run.comm_poll = on_comm_poll ? &on_comm_poll : nullptr;
  for (int m = first; m <= last; ++m) {
    if (on_forward_begin)
      on_forward_begin(m);
    Context& c = ctx.child(m);
    const std::function<void(int, bool)> layer_begin = layer_hook(m);
    c.run.layer_begin = on_layer_begin ? &layer_begin : nullptr;
    if (m == head_m) {
      head->forward(x, targets, c, stats);
      if (!ctx.run.training)
        c.clear();
      return Tensor();
    }
    c.need_input_grad = m > 1 || (m == 1 && first_grad);
    if (recompute && m > 0 && ctx.run.training) {
      Tensor y = module(m).forward(x, c);
      c.clear();
      c.recompute_input = x;
      x = y;
    } else {
      x = module(m).forward(x, c);
      // Evaluation: no backward will read what the module saved.
      if (!ctx.run.training)
        c.clear();
    }
  }
  return x;
}

Tensor Model::backward_range(
    int first, int last, const Tensor& dy, Context& ctx, float scale) {
  const int head_m = num_modules() - 1;
  ctx.run.comm_poll = on_comm_poll ? &on_comm_poll : nullptr;
  Tensor g = dy;
  for (int m = last; m >= first; --m) {
    Context& c = ctx.child(m);
    if (on_backward_begin)
      on_backward_begin(m);
    if (m == head_m) {
      g = head->backward(c, scale);
    } else {
      if (c.recompute_input.defined()) {
        // Activation checkpointing: rebuild the saved tensors. Dropout
        // masks are keyed by (seed, step, sample position), so the second
        // forward is identical to the first.
        Tensor x = c.recompute_input;
        c.recompute_input = Tensor();
        module(m).forward(x, c);
      }
      const std::function<void(int, bool)> layer_begin = layer_hook(m);
      c.run.layer_begin = on_layer_begin ? &layer_begin : nullptr;
      g = module(m).backward(g, c);
    }
    if (on_backward_done)
      on_backward_done(m);
  }
  return g;
}

void Model::forward_backward(
    const Tensor& input,
    const Tensor& targets,
    Context& ctx,
    float scale,
    LossStats& stats) {
  ctx.run.training = true;
  const int head_m = num_modules() - 1;
  forward_range(0, head_m, input, targets, ctx, stats);
  backward_range(0, head_m, Tensor(), ctx, scale);
}

void Model::forward_eval(
    const Tensor& input,
    const Tensor& targets,
    Context& ctx,
    LossStats& stats) {
  ctx.run.training = false;
  forward_range(0, num_modules() - 1, input, targets, ctx, stats);
  ctx.clear();
}

namespace detail {

// Training FLOPs per token of `depth` blocks (3x forward) whose attention
// computes `keys` scores per query: 2 per multiply-add; attention scores
// and weighted sum are 2*keys*C each.
double transformer_flops_per_token(int depth, int C, int F, double keys) {
  double dense = 2.0 * (3.0 * C * C + C * C + 2.0 * C * F);
  double attn = 2.0 * 2.0 * keys * C;
  return 3.0 * depth * (dense + attn);
}

}  // namespace detail

}  // namespace ndt
