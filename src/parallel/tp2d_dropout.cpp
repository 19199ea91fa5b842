#include "parallel/tp2d_dropout.h"

#include "base/fault.h"

namespace ndt {

Dropout2d::Dropout2d(const std::string& name, float p, Mesh& mesh)
    : Dropout2d(name, p, mesh.size("tp_col"), mesh.coord("tp_col")) {}

Dropout2d::Dropout2d(const std::string& name, float p, int parts, int index)
    : Dropout(name, p), q_(parts), j_(index) {}

// My first element: sample b0's first element (a sample holds q times my
// elements per sample) plus the features of the column blocks before j.
uint64_t Dropout2d::offset(const Tensor& x, const RunState& run) const {
  const uint64_t per_sample =
      static_cast<uint64_t>(x.numel() / x.dim(0)) * static_cast<uint64_t>(q_);
  const uint64_t j = NDT_FAULT(kTp2dDropoutColumn) ? 0 : j_;
  return static_cast<uint64_t>(run.sample_offset) * per_sample +
         j * static_cast<uint64_t>(x.dim(-1));
}

int64_t Dropout2d::mask_row_stride(const Tensor& x) const {
  return x.dim(-1) * q_;
}

}  // namespace ndt
