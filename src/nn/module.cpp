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
  // Local block of a possibly sharded tensor: each element takes the
  // value of its global flat index, so every layout draws the serial values.
  uint64_t key = rng_key(seed, p.name);
  float* out = p.value.data();
  p.layout.for_each_local([&](int64_t i, int64_t global) {
    out[i] = spec.std * rng_normal(key, static_cast<uint64_t>(global));
  });
}

}  // namespace ndt
