#include "plan/model_shape.h"

#include "base/check.h"
#include "io/model_options.h"

namespace ndt {
namespace {

// Local size of `global` split over tp (NDT_CHECK: divisible).
int64_t split(int64_t global, int tp, const char* what) {
  NDT_CHECK(
      tp >= 1 && global % tp == 0,
      ConfigError,
      what,
      " (",
      global,
      ") must be divisible by parallel.tp (",
      tp,
      ")");
  return global / tp;
}

void add(ModuleShape& m, const std::string& name, int64_t numel, bool sharded) {
  m.params.push_back({name, numel, sharded});
}

// The serial or column-parallel (out split) / row-parallel (in split)
// Linear's weight and bias, as Tp1dBuilder builds them.
void column_linear(
    ModuleShape& m,
    const std::string& name,
    int64_t in,
    int64_t out,
    int tp,
    int blocks) {
  const bool s = tp > 1;
  const int64_t out_local = split(out, blocks * tp, "output features") * blocks;
  add(m, name + ".weight", out_local * in, s);
  add(m, name + ".bias", out_local, s);
}

void row_linear(
    ModuleShape& m, const std::string& name, int64_t in, int64_t out, int tp) {
  add(m, name + ".weight", out * split(in, tp, "input features"), tp > 1);
  add(m, name + ".bias", out, false);
}

void layernorm(ModuleShape& m, const std::string& name, int64_t C) {
  add(m, name + ".weight", C, false);
  add(m, name + ".bias", C, false);
}

// TransformerBlock: ln1, attn.qkv, attn.proj, ln2, mlp.fc1, mlp.fc2.
ModuleShape block(int i, int64_t C, int64_t F, int heads, int64_t T, int tp) {
  split(heads, tp, "model.heads");
  const std::string n = "blocks." + std::to_string(i);
  ModuleShape m;
  m.kind = ModuleKind::kTransformerBlock;
  layernorm(m, n + ".ln1", C);
  column_linear(m, n + ".attn.qkv", C, 3 * C, tp, 3);
  row_linear(m, n + ".attn.proj", C, C, tp);
  layernorm(m, n + ".ln2", C);
  column_linear(m, n + ".mlp.fc1", C, F, tp, 1);
  row_linear(m, n + ".mlp.fc2", F, C, tp);
  m.sample_out = {T, C};
  return m;
}

ModuleShape classifier_head(bool ln, int64_t C, int64_t K) {
  ModuleShape m;
  m.kind = ModuleKind::kClassifierHead;
  if (ln)
    layernorm(m, "head.ln", C);
  add(m, "head.out.weight", K * C, false);
  add(m, "head.out.bias", K, false);
  return m;
}

}  // namespace

ModelShape mlp_shape(const MlpOptions& o) {
  ModelShape s;
  s.kind = ModelKind::kMlp;
  ModuleShape flat;
  flat.kind = ModuleKind::kFlatten;
  flat.sample_out = {o.inputs};
  s.modules.push_back(flat);
  int64_t in = o.inputs;
  for (size_t i = 0; i < o.hidden.size(); ++i) {
    const std::string name = "layers." + std::to_string(i);
    ModuleShape lin;
    lin.kind = ModuleKind::kLinear;
    add(lin, name + ".weight", o.hidden[i] * in, false);
    add(lin, name + ".bias", o.hidden[i], false);
    lin.sample_out = {o.hidden[i]};
    s.modules.push_back(lin);
    if (o.dropout > 0) {
      ModuleShape drop;
      drop.kind = ModuleKind::kDropout;
      drop.sample_out = {o.hidden[i]};
      s.modules.push_back(drop);
    }
    in = o.hidden[i];
  }
  s.modules.push_back(classifier_head(false, in, o.classes));
  return s;
}

ModelShape vit_shape(const VitOptions& o, int tp) {
  ModelShape s;
  s.kind = ModelKind::kVit;
  s.tp = tp;
  const bool cls = o.pool == HeadPool::kCls;
  const int64_t NP =
      int64_t(o.image_size / o.patch) * int64_t(o.image_size / o.patch);
  const int64_t T = NP + (cls ? 1 : 0), C = o.dim;
  s.tokens_per_sample = T;
  s.dim = C;
  s.mlp_dim = o.mlp_dim;
  ModuleShape embed;
  embed.kind = ModuleKind::kPatchEmbedding;
  add(embed, "embed.patch.weight", C * o.channels * o.patch * o.patch, false);
  add(embed, "embed.patch.bias", C, false);
  if (cls)
    add(embed, "embed.cls_token", C, false);
  add(embed, "embed.positions", T * C, false);
  embed.sample_out = {T, C};
  s.modules.push_back(embed);
  for (int i = 0; i < o.depth; ++i)
    s.modules.push_back(block(i, C, o.mlp_dim, o.heads, T, tp));
  s.modules.push_back(classifier_head(true, C, o.classes));
  return s;
}

ModelShape gpt_shape(const GptOptions& o, int tp) {
  ModelShape s;
  s.kind = ModelKind::kGpt;
  s.tp = tp;
  const int64_t T = o.seq_len, C = o.dim;
  s.tokens_per_sample = T;
  s.dim = C;
  s.mlp_dim = o.mlp_dim;
  s.loss_terms_per_sample = T;
  ModuleShape embed;
  embed.kind = ModuleKind::kTokenEmbedding;
  add(embed,
      "embed.tokens.weight",
      split(o.vocab, tp, "model.vocab") * C,
      tp > 1);
  add(embed, "embed.positions.weight", T * C, false);
  embed.sample_out = {T, C};
  s.modules.push_back(embed);
  for (int i = 0; i < o.depth; ++i)
    s.modules.push_back(block(i, C, o.mlp_dim, o.heads, T, tp));
  ModuleShape head;
  head.kind = ModuleKind::kLmHead;
  layernorm(head, "head.ln", C);
  add(head, "head.out.weight", split(o.vocab, tp, "model.vocab") * C, tp > 1);
  s.modules.push_back(head);
  return s;
}

void check_planned_tp_mode(const ParallelConfig& p) {
  NDT_CHECK(
      p.tp == 1 || p.tp_mode == TpMode::k1d,
      ConfigError,
      "the plan's step and memory models know parallel.tp_mode=1d only, got "
      "parallel.tp_mode=",
      to_string(p.tp_mode));
}

ModelShape model_shape(const ModelConfig& c, int tp) {
  switch (c.kind) {
    case ModelKind::kMlp: {
      NDT_CHECK(
          tp == 1,
          ConfigError,
          "model.kind mlp has no tensor-parallel layers (parallel.tp ",
          tp,
          ")");
      return mlp_shape(mlp_options(c));
    }
    case ModelKind::kVit:
      return vit_shape(vit_options(c), tp);
    case ModelKind::kGpt:
      return gpt_shape(gpt_options(c), tp);
  }
  NDT_ASSERT(false, "invalid ModelKind ", static_cast<int>(c.kind));
  return {};
}

int64_t module_numel(const ModelShape& shape, int m) {
  int64_t n = 0;
  for (const ParamShape& p : shape.modules.at(m).params)
    n += p.numel_local;
  return n;
}

}  // namespace ndt
