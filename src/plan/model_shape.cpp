#include "plan/model_shape.h"

#include "base/check.h"
#include "io/model_options.h"

namespace ndt {
namespace {

const std::vector<std::string> kNone = {};
const std::vector<std::string> kGrid = {"tp_col", "tp_row"};  // sorted
const std::vector<std::string> kCube = {"tp_in", "tp_out", "tp_wt"};

// Local size of `global` split in `parts` (NDT_CHECK: divisible).
int64_t split(int64_t global, int64_t parts, const char* what) {
  NDT_CHECK(
      parts >= 1 && global % parts == 0,
      ConfigError,
      what,
      " (",
      global,
      ") must be divisible by ",
      parts,
      " (the tensor-parallel split of the plan's layout)");
  return global / parts;
}

void add(
    ModuleShape& m,
    const std::string& name,
    int64_t numel,
    const std::vector<std::string>& axes) {
  m.params.push_back({name, numel, axes});
}

// The tensor-parallel split of the layers, as the mode's builder makes
// them: 1d over tp; 2d and 2.5d on a q x q grid (tp_row x tp_col); 3d on a
// p x p x p cube (tp_out x tp_in x tp_wt). side = q or p.
struct Split {
  TpMode mode = TpMode::k1d;
  int tp = 1;
  int side = 1;

  bool grid() const {
    return tp > 1 && (mode == TpMode::k2d || mode == TpMode::k2p5d);
  }
  bool cube() const {
    return tp > 1 && mode == TpMode::k3d;
  }
  const std::vector<std::string>& tp1d() const {
    static const std::vector<std::string> kTp = {"tp"};
    return tp > 1 ? kTp : kNone;
  }
  // A table or vector split by the hidden features only (embeddings).
  int64_t features(int64_t n, const char* what) const {
    if (grid() || cube())
      return split(n, side, what);
    return n;
  }
  const std::vector<std::string>& feature_axes() const {
    static const std::vector<std::string> kCol = {"tp_col"}, kOut = {"tp_out"};
    if (grid())
      return kCol;
    if (cube())
      return kOut;
    return kNone;
  }
};

// A dense layer of the pair role (first: column-parallel in 1d, side A in
// 3d; second: row-parallel, side B), its weight and bias, as the builder
// makes it; the output is `blocks` equal parts (q/k/v: 3).
void linear(
    ModuleShape& m,
    const std::string& name,
    int64_t in,
    int64_t out,
    bool first,
    int blocks,
    const Split& sp) {
  if (sp.grid()) {
    const int64_t q = sp.side;
    add(m,
        name + ".weight",
        split(out, blocks * q, "output features") * blocks *
            split(in, q, "input features"),
        kGrid);
    add(m,
        name + ".bias",
        split(out, blocks * q * q, "output features") * blocks,
        kGrid);
    return;
  }
  if (sp.cube()) {
    const int64_t p = sp.side;
    static const std::vector<std::string> kIn = {"tp_in"}, kOut = {"tp_out"};
    add(m,
        name + ".weight",
        split(out, blocks * p * p, "output features") * blocks *
            split(in, p, "input features"),
        kCube);
    add(m,
        name + ".bias",
        split(out, blocks * p, "output features") * blocks,
        first ? kIn : kOut);
    return;
  }
  if (first) {
    const int64_t out_local =
        split(out, blocks * sp.tp, "output features") * blocks;
    add(m, name + ".weight", out_local * in, sp.tp1d());
    add(m, name + ".bias", out_local, sp.tp1d());
  } else {
    add(m,
        name + ".weight",
        out * split(in, sp.tp, "input features"),
        sp.tp1d());
    add(m, name + ".bias", out, kNone);
  }
}

void layernorm(
    ModuleShape& m, const std::string& name, int64_t C, const Split& sp) {
  int64_t local = C;
  const std::vector<std::string>* axes = &kNone;
  if (sp.grid()) {
    local = split(C, int64_t(sp.side) * sp.side, "LayerNorm width");
    axes = &kGrid;
  } else if (sp.cube()) {
    local = split(C, sp.side, "LayerNorm width");
    axes = &sp.feature_axes();
  }
  add(m, name + ".weight", local, *axes);
  add(m, name + ".bias", local, *axes);
}

// TransformerBlock: ln1, attn.qkv, attn.proj, ln2, mlp.fc1, mlp.fc2.
ModuleShape block(
    int i, int64_t C, int64_t F, int heads, int64_t T, const Split& sp) {
  split(heads, sp.grid() || sp.cube() ? sp.side : sp.tp, "model.heads");
  const std::string n = "blocks." + std::to_string(i);
  ModuleShape m;
  m.kind = ModuleKind::kTransformerBlock;
  layernorm(m, n + ".ln1", C, sp);
  linear(m, n + ".attn.qkv", C, 3 * C, true, 3, sp);
  linear(m, n + ".attn.proj", C, C, false, 1, sp);
  layernorm(m, n + ".ln2", C, sp);
  linear(m, n + ".mlp.fc1", C, F, true, 1, sp);
  linear(m, n + ".mlp.fc2", F, C, false, 1, sp);
  // Each of the six layers has a weight and a bias; they are the block's
  // layers 0 to 5 (TransformerBlock::parameter_layers).
  NDT_ASSERT(m.params.size() == 12);
  for (size_t j = 0; j < m.params.size(); ++j)
    m.params[j].layer = static_cast<int>(j / 2);
  m.sample_out = {T, C};
  return m;
}

// The classifier's LayerNorm (ViT) follows the mode; its linear to the
// classes is replicated in every mode.
ModuleShape classifier_head(bool ln, int64_t C, int64_t K, const Split& sp) {
  ModuleShape m;
  m.kind = ModuleKind::kClassifierHead;
  if (ln)
    layernorm(m, "head.ln", C, sp);
  add(m, "head.out.weight", K * C, kNone);
  add(m, "head.out.bias", K, kNone);
  return m;
}

Split split_of(const ParallelConfig& p) {
  Split s;
  s.mode = p.tp > 1 ? p.tp_mode : TpMode::k1d;
  s.tp = p.tp;
  switch (s.mode) {
    case TpMode::k1d:
      break;
    case TpMode::k2d:
    case TpMode::k2p5d: {
      const int grids = s.mode == TpMode::k2p5d ? p.tp_depth : 1;
      while ((s.side + 1) * (s.side + 1) * grids <= p.tp)
        ++s.side;
      break;
    }
    case TpMode::k3d:
      while ((s.side + 1) * (s.side + 1) * (s.side + 1) <= p.tp)
        ++s.side;
      break;
  }
  return s;
}

ModelShape vit_shape(const VitOptions& o, const Split& sp);
ModelShape gpt_shape(const GptOptions& o, const Split& sp);

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
    add(lin, name + ".weight", o.hidden[i] * in, kNone);
    add(lin, name + ".bias", o.hidden[i], kNone);
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
  s.modules.push_back(classifier_head(false, in, o.classes, Split()));
  s.classes = o.classes;
  s.act = o.act;
  return s;
}

ModelShape vit_shape(const VitOptions& o, int tp) {
  Split sp;
  sp.tp = tp;
  return vit_shape(o, sp);
}

ModelShape gpt_shape(const GptOptions& o, int tp) {
  Split sp;
  sp.tp = tp;
  return gpt_shape(o, sp);
}

namespace {

ModelShape vit_shape(const VitOptions& o, const Split& sp) {
  ModelShape s;
  s.kind = ModelKind::kVit;
  s.tp = sp.tp;
  s.tp_mode = sp.mode;
  s.tp_side = sp.side;
  s.pool = o.pool;
  const bool cls = o.pool == HeadPool::kCls;
  const int64_t NP =
      int64_t(o.image_size / o.patch) * int64_t(o.image_size / o.patch);
  const int64_t T = NP + (cls ? 1 : 0), C = o.dim;
  s.tokens_per_sample = T;
  s.dim = C;
  s.mlp_dim = o.mlp_dim;
  ModuleShape embed;
  embed.kind = ModuleKind::kPatchEmbedding;
  const int64_t Cl = sp.features(C, "model.dim");
  const std::vector<std::string>& fa = sp.feature_axes();
  add(embed, "embed.patch.weight", Cl * o.channels * o.patch * o.patch, fa);
  add(embed, "embed.patch.bias", Cl, fa);
  if (cls)
    add(embed, "embed.cls_token", Cl, fa);
  add(embed, "embed.positions", T * Cl, fa);
  embed.sample_out = {T, C};
  s.modules.push_back(embed);
  for (int i = 0; i < o.depth; ++i)
    s.modules.push_back(block(i, C, o.mlp_dim, o.heads, T, sp));
  s.modules.push_back(classifier_head(true, C, o.classes, sp));
  s.classes = o.classes;
  s.patch_inputs = int64_t{o.channels} * o.patch * o.patch;
  return s;
}

ModelShape gpt_shape(const GptOptions& o, const Split& sp) {
  ModelShape s;
  s.kind = ModelKind::kGpt;
  s.tp = sp.tp;
  s.tp_mode = sp.mode;
  s.tp_side = sp.side;
  const int64_t T = o.seq_len, C = o.dim;
  s.tokens_per_sample = T;
  s.dim = C;
  s.mlp_dim = o.mlp_dim;
  s.loss_terms_per_sample = T;
  s.vocab = o.vocab;
  ModuleShape embed;
  embed.kind = ModuleKind::kTokenEmbedding;
  if (sp.grid() || sp.cube()) {
    const int64_t Cl = sp.features(C, "model.dim");
    add(embed, "embed.tokens.weight", o.vocab * Cl, sp.feature_axes());
    add(embed, "embed.positions.weight", T * Cl, sp.feature_axes());
  } else {
    add(embed,
        "embed.tokens.weight",
        split(o.vocab, sp.tp, "model.vocab") * C,
        sp.tp1d());
    add(embed, "embed.positions.weight", T * C, kNone);
  }
  embed.sample_out = {T, C};
  s.modules.push_back(embed);
  for (int i = 0; i < o.depth; ++i)
    s.modules.push_back(block(i, C, o.mlp_dim, o.heads, T, sp));
  ModuleShape head;
  head.kind = ModuleKind::kLmHead;
  layernorm(head, "head.ln", C, sp);
  if (sp.grid() || sp.cube()) {
    ModuleShape out;
    linear(out, "head.out", C, o.vocab, true, 1, sp);
    head.params.push_back(out.params.at(0));  // no bias
  } else {
    add(head,
        "head.out.weight",
        split(o.vocab, sp.tp, "model.vocab") * C,
        sp.tp1d());
  }
  s.modules.push_back(head);
  return s;
}

}  // namespace

ModelShape model_shape(const ModelConfig& c, int tp) {
  ParallelConfig p;
  p.tp = tp;
  return model_shape(c, p);
}

ModelShape model_shape(const ModelConfig& c, const ParallelConfig& p) {
  const Split sp = split_of(p);
  const int tp = p.tp;
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
      return vit_shape(vit_options(c), sp);
    case ModelKind::kGpt:
      return gpt_shape(gpt_options(c), sp);
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
