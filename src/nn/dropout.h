// Dropout with masks from the counter RNG, keyed by (seed, layer name,
// step) and indexed by the element's position in the step's global batch
// (RunState::sample_offset), so no mask is stored and every layout draws
// the serial run's mask. Identity when p == 0 or when not training.
#pragma once

#include <string>

#include "nn/module.h"

namespace ndt {

class Dropout : public Module {
 public:
  Dropout(const std::string& name, float p);
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 protected:
  // Global index of x's first element in the step's mask: x is whole
  // samples, so sample_offset times the elements per sample. Layouts that
  // hold part of a sample (a token split) override it.
  virtual uint64_t offset(const Tensor& x, const RunState& run) const;
  // 0: x's elements are consecutive in the mask. s > 0: x is rows of
  // x.dim(-1) elements whose first elements are s apart in the mask (a
  // block of the features: a feature split), offset() giving the first.
  virtual int64_t mask_row_stride(const Tensor& x) const;
  // The step's mask key, and the drop probability.
  uint64_t key(const RunState& run) const;
  float p() const {
    return p_;
  }

 private:
  std::string name_;
  float p_;
};

}  // namespace ndt
