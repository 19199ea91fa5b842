#include "nn/model.h"

#include <cmath>

#include "base/check.h"
#include "nn/embedding.h"
#include "nn/transformer_block.h"

namespace ndt {

std::vector<Parameter*> Model::parameters() {
  if (params_.empty()) {
    embed->collect_parameters(params_);
    for (auto& b : blocks)
      b->collect_parameters(params_);
    head->collect_parameters(params_);
  }
  return params_;
}

std::vector<Parameter*> Model::module_parameters(int m) {
  std::vector<Parameter*> out;
  if (m == 0) {
    embed->collect_parameters(out);
  } else if (m == num_modules() - 1) {
    head->collect_parameters(out);
  } else {
    blocks.at(m - 1)->collect_parameters(out);
  }
  return out;
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

void Model::forward(
    const Tensor& input,
    const Tensor& targets,
    Context& ctx,
    LossStats& stats) {
  Context& c0 = ctx.child(0);
  c0.need_input_grad = false;
  Tensor x = embed->forward(input, c0);
  // The first block's input gradient is only needed when the input layer
  // has parameters to receive it.
  bool embed_learns = !embed->parameters().empty();
  for (size_t i = 0; i < blocks.size(); ++i) {
    Context& c = ctx.child(1 + i);
    c.need_input_grad = i > 0 || embed_learns;
    x = blocks[i]->forward(x, c);
  }
  head->forward(x, targets, ctx.child(1 + blocks.size()), stats);
}

void Model::forward_backward(
    const Tensor& input,
    const Tensor& targets,
    Context& ctx,
    float scale,
    LossStats& stats) {
  ctx.run.training = true;
  forward(input, targets, ctx, stats);
  Tensor g = head->backward(ctx.child(1 + blocks.size()), scale);
  if (on_backward_done)
    on_backward_done(num_modules() - 1);
  for (size_t i = blocks.size(); i-- > 0;) {
    g = blocks[i]->backward(g, ctx.child(1 + i));
    if (on_backward_done)
      on_backward_done(static_cast<int>(1 + i));
  }
  embed->backward(g, ctx.child(0));
  if (on_backward_done)
    on_backward_done(0);
}

void Model::forward_eval(
    const Tensor& input,
    const Tensor& targets,
    Context& ctx,
    LossStats& stats) {
  ctx.run.training = false;
  forward(input, targets, ctx, stats);
  ctx.clear();
}

std::unique_ptr<Model> build_mlp(const MlpOptions& o, Builder& b) {
  auto m = std::make_unique<Model>();
  m->kind = "mlp";
  m->embed = std::make_unique<Flatten>();
  int in = o.inputs;
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
    if (o.dropout > 0) {
      m->blocks.push_back(b.dropout(name + ".drop", o.dropout));
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
  auto embed = std::make_unique<PatchEmbedding>(pe);
  int T = embed->tokens();
  int NP = (o.image_size / o.patch) * (o.image_size / o.patch);
  m->embed = std::move(embed);
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
  m->embed = std::make_unique<TokenEmbedding>(
      "embed", o.vocab, o.seq_len, o.dim, o.init_std);
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
