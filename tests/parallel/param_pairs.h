// The parameters of a serial layer and of its parallel form, initialised
// alike for the master-vs-shard layer tests (CONVENTIONS.md 5).
#pragma once

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"
#include "ops/ops.h"
#include "test_util.h"

namespace ndt::test {

// Inits both sets from `seed`; parameters whose init is not normal
// (LayerNorm, biases) are lifted off their constant by a global
// perturbation ("<name>.perturb", std 0.3) sliced with each layout. Returns,
// per parallel parameter, ("<name> init", the relative difference of its
// block from the serial tensor's), which must be 0; ("parameter count",
// inf) when the two sets differ in length.
inline std::vector<std::pair<std::string, double>> init_pair(
    const std::vector<Parameter*>& serial,
    const std::vector<Parameter*>& parallel,
    uint64_t seed) {
  if (serial.size() != parallel.size())
    return {{"parameter count", INFINITY}};
  std::vector<std::pair<std::string, double>> out;
  for (size_t k = 0; k < serial.size(); ++k) {
    Parameter& s = *serial[k];
    Parameter& p = *parallel[k];
    init_parameter(s, seed);
    init_parameter(p, seed);
    if (s.init.kind != Init::kNormal) {
      Tensor g = randn(s.layout.global_shape, seed, s.name + ".perturb", 0.3f);
      ops::add_(s.value, g);
      ops::add_(p.value, p.layout.take_local(g));
    }
    out.push_back(
        {p.name + " init", rel_diff(p.value, p.layout.take_local(s.value))});
  }
  return out;
}

}  // namespace ndt::test
