#include "io/model_options.h"

namespace ndt {

MlpOptions mlp_options(const ModelConfig& c) {
  MlpOptions o;
  o.inputs = c.channels * c.image_size * c.image_size;
  o.hidden = c.hidden;
  o.classes = c.num_classes;
  o.act = c.activation;
  o.dropout = c.dropout;
  return o;
}

VitOptions vit_options(const ModelConfig& c) {
  VitOptions o;
  o.image_size = c.image_size;
  o.channels = c.channels;
  o.patch = c.patch;
  o.dim = c.dim;
  o.depth = c.depth;
  o.heads = c.heads;
  o.mlp_dim = c.mlp_dim;
  o.classes = c.num_classes;
  o.pool = c.pool;
  o.dropout = c.dropout;
  o.init_std = c.init_std;
  return o;
}

GptOptions gpt_options(const ModelConfig& c) {
  GptOptions o;
  o.vocab = c.vocab;
  o.seq_len = c.seq_len;
  o.dim = c.dim;
  o.depth = c.depth;
  o.heads = c.heads;
  o.mlp_dim = c.mlp_dim;
  o.dropout = c.dropout;
  o.init_std = c.init_std;
  return o;
}

}  // namespace ndt
