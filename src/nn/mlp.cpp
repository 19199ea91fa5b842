// The MLP (README "Models"): flatten, one Linear (+ optional dropout) per
// hidden width, a classifier head. Declared in nn/model.h.
#include <cmath>
#include <string>
#include <utility>

#include "nn/embedding.h"
#include "nn/model.h"

namespace ndt {

std::unique_ptr<Model> build_mlp(
    const MlpOptions& o, Builder& b, KeepModule keep) {
  auto m = std::make_unique<Model>(std::move(keep));
  m->kind = "mlp";
  m->add_embed(std::make_unique<Flatten>());
  int in = o.inputs;
  m->sample_shapes.push_back({in});
  double flops = 0;
  for (size_t i = 0; i < o.hidden.size(); ++i) {
    std::string name = "layers." + std::to_string(i);
    m->add_block(b.linear(
        name,
        in,
        o.hidden[i],
        true,
        o.act,
        LinearRole::kReplicated,
        1.0f / std::sqrt(float(in))));
    m->sample_shapes.push_back({o.hidden[i]});
    if (o.dropout > 0) {
      m->add_block(b.dropout(name + ".drop", o.dropout));
      m->sample_shapes.push_back({o.hidden[i]});
    }
    // Forward, weight gradient and input gradient (2 FLOPs per
    // multiply-add each), except that nothing needs the first layer's
    // input gradient (the pixels), so it is not computed.
    flops += (i == 0 ? 4.0 : 6.0) * in * o.hidden[i];
    m->recompute_flops_per_sample += 2.0 * in * o.hidden[i];
    in = o.hidden[i];
  }
  ClassifierHeadOptions h;
  h.dim = in;
  h.classes = o.classes;
  h.layernorm = false;
  h.pool = HeadPool::kNone;
  h.init_std = 1.0f / std::sqrt(float(in));
  m->add_head(b.classifier_head(h));
  flops += 6.0 * in * o.classes;
  m->flops_per_sample = flops;
  return m;
}

}  // namespace ndt
