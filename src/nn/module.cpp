#include "nn/module.h"

#include "tensor/rng.h"

namespace ndt {

Parameter::Parameter(
    std::string name_, Shape shape, bool decay_, InitSpec init_)
    : name(std::move(name_)),
      value(shape, MemTag::kParams),
      grad(Tensor::zeros(shape, MemTag::kGrads)),
      layout(Layout::full(shape)),
      decay(decay_),
      init(init_) {}

Context& Context::child(size_t i) {
  while (children_.size() <= i) {
    children_.push_back(std::make_unique<Context>());
  }
  children_[i]->run = run;
  return *children_[i];
}

void Context::clear() {
  saved.clear();
  ints.clear();
  recompute_input = Tensor();
  for (auto& c : children_)
    c->clear();
}

void init_parameter(Parameter& p, uint64_t seed) {
  const InitSpec& spec = p.init;
  p.grad.zero_();
  switch (spec.kind) {
    case Init::kZeros:
      p.value.zero_();
      return;
    case Init::kOnes:
      p.value.fill_(1.0f);
      return;
    case Init::kNormal:
      break;
  }
  // Local block of a possibly sharded tensor: element (i0, i1, ...) of the
  // block takes the global flat index of its global position.
  const Shape& g = p.layout.global_shape;
  Shape l = p.value.shape();
  std::vector<int64_t> off = p.layout.local_offset();
  uint64_t key = rng_key(seed, p.name);
  float* out = p.value.data();
  int64_t n = p.value.numel();
  int nd = static_cast<int>(l.size());
  std::vector<int64_t> idx(nd, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t flat = 0;
    for (int d = 0; d < nd; ++d)
      flat = flat * g[d] + idx[d] + off[d];
    out[i] = spec.std * rng_normal(key, static_cast<uint64_t>(flat));
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < l[d])
        break;
      idx[d] = 0;
    }
  }
}

}  // namespace ndt
