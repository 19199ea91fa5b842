// The GPT (README "Models"): token and position embeddings, causal pre-LN
// transformer blocks, an LM head with cross-entropy over every token.
// Declared in nn/model.h.
#include <cmath>
#include <string>
#include <utility>

#include "base/check.h"
#include "nn/model.h"
#include "nn/transformer_block.h"
#include "ops/ops.h"

namespace ndt {

std::unique_ptr<Model> build_gpt(
    const GptOptions& o, Builder& b, KeepModule keep) {
  NDT_ASSERT(o.dim % o.heads == 0);
  auto m = std::make_unique<Model>(std::move(keep));
  m->kind = "gpt";
  m->add_embed(
      b.token_embedding("embed", o.vocab, o.seq_len, o.dim, o.init_std));
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
    m->add_block(std::make_unique<TransformerBlock>(t, b));
  }
  m->sample_shapes.assign(1 + o.depth, Shape{o.seq_len, o.dim});
  LmHeadOptions h;
  h.dim = o.dim;
  h.vocab = o.vocab;
  h.init_std = o.init_std;
  m->add_head(b.lm_head(h));
  m->loss_terms_per_sample = o.seq_len;
  // Causal attention: the scores the mask leaves, T (T + 1) / 2.
  const double keys =
      static_cast<double>(ops::attention_scores(o.seq_len, true)) / o.seq_len;
  const double blocks = o.seq_len * detail::transformer_flops_per_token(
                                        o.depth, o.dim, o.mlp_dim, keys);
  m->flops_per_sample = blocks + o.seq_len * 6.0 * o.dim * o.vocab;
  m->recompute_flops_per_sample = blocks / 3;
  return m;
}

}  // namespace ndt
