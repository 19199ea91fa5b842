#include "nn/transformer_block.h"

#include <algorithm>

#include "base/check.h"
#include "ops/ops.h"

namespace ndt {

TransformerBlock::TransformerBlock(
    const TransformerBlockOptions& o, Builder& b) {
  const std::string& n = o.name;
  layers_[kLn1] = b.layernorm(n + ".ln1", o.dim);
  layers_[kQkv] = b.linear(
      n + ".attn.qkv",
      o.dim,
      3 * o.dim,
      true,
      Act::kNone,
      LinearRole::kFirstQkv,
      o.init_std);
  layers_[kAttn] = b.attention_core(o.heads, o.causal);
  layers_[kProj] = b.linear(
      n + ".attn.proj",
      o.dim,
      o.dim,
      true,
      Act::kNone,
      LinearRole::kSecond,
      o.proj_init_std);
  layers_[kDrop1] = b.dropout(n + ".attn.drop", o.dropout);
  layers_[kLn2] = b.layernorm(n + ".ln2", o.dim);
  layers_[kFc1] = b.linear(
      n + ".mlp.fc1",
      o.dim,
      o.mlp_dim,
      true,
      Act::kGelu,
      LinearRole::kFirst,
      o.init_std);
  layers_[kFc2] = b.linear(
      n + ".mlp.fc2",
      o.mlp_dim,
      o.dim,
      true,
      Act::kNone,
      LinearRole::kSecond,
      o.proj_init_std);
  layers_[kDrop2] = b.dropout(n + ".mlp.drop", o.dropout);
  int k = 0;
  for (int i = 0; i < kLayers; ++i)
    param_layer_[i] = layers_[i]->parameters().empty() ? -1 : k++;
}

Tensor TransformerBlock::forward(const Tensor& x, Context& ctx) {
  Tensor a = x;
  for (int i = kLn1; i <= kDrop1; ++i) {
    if (param_layer_[i] >= 0)
      begin_layer(ctx.run, param_layer_[i], true);
    a = layers_[i]->forward(a, ctx.child(i));
    poll_comm(ctx.run);
  }
  Tensor h(x.shape(), MemTag::kActs);
  ops::add(h, x, a);
  Tensor m = h;
  for (int i = kLn2; i <= kDrop2; ++i) {
    if (param_layer_[i] >= 0)
      begin_layer(ctx.run, param_layer_[i], true);
    m = layers_[i]->forward(m, ctx.child(i));
    poll_comm(ctx.run);
  }
  Tensor y(x.shape(), MemTag::kActs);
  ops::add(y, h, m);
  return y;
}

Tensor TransformerBlock::backward(const Tensor& dy, Context& ctx) {
  // y = h + m: dh = dy + dm/dh; h = x + a: dx = dh + da/dx.
  Tensor g = dy;
  for (int i = kDrop2; i >= kLn2; --i) {
    if (param_layer_[i] >= 0)
      begin_layer(ctx.run, param_layer_[i], false);
    g = layers_[i]->backward(g, ctx.child(i));
    poll_comm(ctx.run);
  }
  Tensor dh(dy.shape(), MemTag::kActs);
  ops::add(dh, dy, g);
  g = dh;
  for (int i = kDrop1; i >= kLn1; --i) {
    if (param_layer_[i] >= 0)
      begin_layer(ctx.run, param_layer_[i], false);
    g = layers_[i]->backward(g, ctx.child(i));
    if (i == kQkv)
      zero_key_bias_grad();
    poll_comm(ctx.run);
  }
  ops::add_(g, dh);
  return g;
}

// Note [Key bias]: adding b_k to every key adds q.b_k to a whole row of
// scores, which softmax ignores, so d loss / d b_k is identically zero. In
// fp32 it comes out as rounding noise (~1e-9) that Adam-type optimizers
// normalise into steps of size ~lr with random sign, a random walk that
// differs with every summation order. The exact gradient is zero; we store
// it as such (the key bias stays at its zero init and keeps its place in
// the [3C] qkv bias for checkpoint compatibility).
void TransformerBlock::zero_key_bias_grad() {
  std::vector<Parameter*> ps;
  layers_[kQkv]->collect_parameters(ps);
  for (Parameter* p : ps) {
    if (p->name.size() < 5 || p->name.compare(p->name.size() - 5, 5, ".bias"))
      continue;
    // The global bias is [q; k; v]: elements [C, 2C) are key bias, found
    // through the layout whatever block of it this rank holds.
    const int64_t C = p->layout.global_shape.at(0) / 3;
    float* g = p->grad.data();
    p->layout.for_each_local([&](int64_t local, int64_t global) {
      if (global >= C && global < 2 * C)
        g[local] = 0.0f;
    });
  }
}

void TransformerBlock::collect_parameters(std::vector<Parameter*>& out) {
  for (auto& layer : layers_)
    layer->collect_parameters(out);
}

std::vector<int> TransformerBlock::parameter_layers() {
  std::vector<int> out;
  for (int i = 0; i < kLayers; ++i)
    out.insert(out.end(), layers_[i]->parameters().size(), param_layer_[i]);
  return out;
}

}  // namespace ndt
