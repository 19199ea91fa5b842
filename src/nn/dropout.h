// Dropout with masks from the counter RNG, keyed by (seed, layer name,
// step) and indexed by the element's position in the step's global batch
// (RunState::sample_offset), so no mask is stored and every layout draws
// the serial run's mask. Identity when p == 0 or when not training.
#pragma once

#include <string>

#include "nn/module.h"

namespace ndt {

class Dropout final : public Module {
 public:
  Dropout(const std::string& name, float p);
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  uint64_t key(const RunState& run) const;
  static uint64_t offset(const Tensor& x, const RunState& run);
  std::string name_;
  float p_;
};

}  // namespace ndt
