// The ViT (README "Models"): patch embedding, pre-LN transformer blocks,
// a classifier head on the class token (or the token mean). Declared in
// nn/model.h.
#include <string>
#include <utility>

#include "base/check.h"
#include "nn/model.h"
#include "nn/transformer_block.h"

namespace ndt {

std::unique_ptr<Model> build_vit(
    const VitOptions& o, Builder& b, KeepModule keep) {
  NDT_ASSERT(o.image_size % o.patch == 0 && o.dim % o.heads == 0);
  auto m = std::make_unique<Model>(std::move(keep));
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
  m->add_embed(b.patch_embedding(pe));
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
    m->add_block(std::make_unique<TransformerBlock>(t, b));
  }
  m->sample_shapes.assign(1 + o.depth, Shape{T, o.dim});
  ClassifierHeadOptions h;
  h.dim = o.dim;
  h.classes = o.classes;
  h.layernorm = true;
  h.pool = o.pool;
  h.init_std = o.init_std;
  m->add_head(b.classifier_head(h));
  // The patch embedding's input (the pixels) needs no gradient, so its
  // matmul is done twice (forward, weight gradient), not three times.
  double K = double(o.channels) * o.patch * o.patch;
  const double blocks =
      T * detail::transformer_flops_per_token(o.depth, o.dim, o.mlp_dim, T);
  m->flops_per_sample = blocks + 4.0 * NP * K * o.dim + 6.0 * o.dim * o.classes;
  m->recompute_flops_per_sample = blocks / 3;
  return m;
}

}  // namespace ndt
