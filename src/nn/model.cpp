#include "nn/model.h"

#include <cmath>

#include "base/check.h"
#include "nn/embedding.h"
#include "nn/transformer_block.h"

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

void Model::keep_modules(const std::vector<bool>& keep) {
  NDT_ASSERT(static_cast<int>(keep.size()) == num_modules());
  if (!keep.front())
    embed.reset();
  if (!keep.back())
    head.reset();
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (!keep[1 + i])
      blocks[i].reset();
  }
  params_.clear();
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
    p->grad.zero_();
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
  for (int m = first; m <= last; ++m) {
    Context& c = ctx.child(m);
    if (m == head_m) {
      head->forward(x, targets, c, stats);
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
    }
  }
  return x;
}

Tensor Model::backward_range(
    int first, int last, const Tensor& dy, Context& ctx, float scale) {
  const int head_m = num_modules() - 1;
  Tensor g = dy;
  for (int m = last; m >= first; --m) {
    Context& c = ctx.child(m);
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

std::unique_ptr<Model> build_mlp(const MlpOptions& o, Builder& b) {
  auto m = std::make_unique<Model>();
  m->kind = "mlp";
  m->embed = std::make_unique<Flatten>();
  int in = o.inputs;
  m->sample_shapes.push_back({in});
  double flops = 0;
  for (size_t i = 0; i < o.hidden.size(); ++i) {
    std::string name = "layers." + std::to_string(i);
    m->blocks.push_back(b.linear(
        name,
        in,
        o.hidden[i],
        true,
        o.act,
        LinearRole::kReplicated,
        1.0f / std::sqrt(float(in))));
    m->sample_shapes.push_back({o.hidden[i]});
    if (o.dropout > 0) {
      m->blocks.push_back(b.dropout(name + ".drop", o.dropout));
      m->sample_shapes.push_back({o.hidden[i]});
    }
    flops += 6.0 * in * o.hidden[i];
    in = o.hidden[i];
  }
  ClassifierHeadOptions h;
  h.dim = in;
  h.classes = o.classes;
  h.layernorm = false;
  h.pool = HeadPool::kNone;
  h.init_std = 1.0f / std::sqrt(float(in));
  m->head = b.classifier_head(h);
  flops += 6.0 * in * o.classes;
  m->flops_per_sample = flops;
  return m;
}

namespace {

// Training FLOPs per token of `depth` blocks with `T` tokens (3x forward):
// 2 per multiply-add; attention scores and weighted sum are 2*T*C each.
double transformer_flops_per_token(int depth, int C, int F, int T) {
  double dense = 2.0 * (3.0 * C * C + C * C + 2.0 * C * F);
  double attn = 2.0 * 2.0 * T * C;
  return 3.0 * depth * (dense + attn);
}

}  // namespace

std::unique_ptr<Model> build_vit(const VitOptions& o, Builder& b) {
  NDT_ASSERT(o.image_size % o.patch == 0 && o.dim % o.heads == 0);
  auto m = std::make_unique<Model>();
  m->kind = "vit";
  PatchEmbeddingOptions pe;
  pe.image_size = o.image_size;
  pe.channels = o.channels;
  pe.patch = o.patch;
  pe.dim = o.dim;
  pe.cls_token = o.pool == HeadPool::kCls;
  pe.init_std = o.init_std;
  const int NP = (o.image_size / o.patch) * (o.image_size / o.patch);
  const int T = NP + (pe.cls_token ? 1 : 0);
  m->embed = b.patch_embedding(pe);
  for (int i = 0; i < o.depth; ++i) {
    TransformerBlockOptions t;
    t.name = "blocks." + std::to_string(i);
    t.dim = o.dim;
    t.heads = o.heads;
    t.mlp_dim = o.mlp_dim;
    t.causal = false;
    t.dropout = o.dropout;
    t.init_std = o.init_std;
    t.proj_init_std = o.init_std;
    m->blocks.push_back(std::make_unique<TransformerBlock>(t, b));
  }
  m->sample_shapes.assign(1 + o.depth, Shape{T, o.dim});
  ClassifierHeadOptions h;
  h.dim = o.dim;
  h.classes = o.classes;
  h.layernorm = true;
  h.pool = o.pool;
  h.init_std = o.init_std;
  m->head = b.classifier_head(h);
  double K = double(o.channels) * o.patch * o.patch;
  m->flops_per_sample =
      T * transformer_flops_per_token(o.depth, o.dim, o.mlp_dim, T) +
      6.0 * NP * K * o.dim + 6.0 * o.dim * o.classes;
  return m;
}

std::unique_ptr<Model> build_gpt(const GptOptions& o, Builder& b) {
  NDT_ASSERT(o.dim % o.heads == 0);
  auto m = std::make_unique<Model>();
  m->kind = "gpt";
  m->embed = b.token_embedding("embed", o.vocab, o.seq_len, o.dim, o.init_std);
  for (int i = 0; i < o.depth; ++i) {
    TransformerBlockOptions t;
    t.name = "blocks." + std::to_string(i);
    t.dim = o.dim;
    t.heads = o.heads;
    t.mlp_dim = o.mlp_dim;
    t.causal = true;
    t.dropout = o.dropout;
    t.init_std = o.init_std;
    t.proj_init_std = o.init_std / std::sqrt(2.0f * o.depth);
    m->blocks.push_back(std::make_unique<TransformerBlock>(t, b));
  }
  m->sample_shapes.assign(1 + o.depth, Shape{o.seq_len, o.dim});
  LmHeadOptions h;
  h.dim = o.dim;
  h.vocab = o.vocab;
  h.init_std = o.init_std;
  m->head = b.lm_head(h);
  m->loss_terms_per_sample = o.seq_len;
  // Causal attention does half the score work; counted in full as is usual.
  m->flops_per_sample = o.seq_len * (transformer_flops_per_token(
                                         o.depth, o.dim, o.mlp_dim, o.seq_len) +
                                     6.0 * o.dim * o.vocab);
  return m;
}

}  // namespace ndt
