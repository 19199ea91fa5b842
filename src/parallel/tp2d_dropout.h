// Dropout2d: dropout on the activations of 2D tensor parallelism, whose
// block on grid rank (i, j) is [B/q, T, C/q]: the samples of row-block i
// and the features of column-block j (tp2d_linear.h). Its mask is the
// serial Dropout's (nn/dropout.h: key (seed, name, step), element (b, t, c)
// of the step's global batch at mask index ((b0 + b) T + t) C + c), drawn
// only for my elements: each of my rows of C/q features is the run
// starting at global feature j C/q of its token, so the rows are C apart
// in the mask. b0 (RunState::sample_offset) is the global index of my
// first sample, row-block offset included.
//
//   x, y, dy, dx  [B/q, .., C/q]; no communication; identity when p == 0
//                 or when not training.
// 3D tensor parallelism uses the same layer for its side-A activations
// (tp3d_cube.h): features block coord("tp_out") of p.
#pragma once

#include <string>

#include "comm/mesh.h"
#include "nn/dropout.h"

namespace ndt {

class Dropout2d final : public Dropout {
 public:
  // The grid from mesh axes "tp_row" x "tp_col" (j = coord("tp_col")).
  Dropout2d(const std::string& name, float p, Mesh& mesh);
  // Any layout whose block is my samples' feature block `index` of
  // `parts` (3D: the side-A activations, features split over "tp_out").
  Dropout2d(const std::string& name, float p, int parts, int index);

 protected:
  uint64_t offset(const Tensor& x, const RunState& run) const override;
  int64_t mask_row_stride(const Tensor& x) const override;

 private:
  int q_;
  int j_;
};

}  // namespace ndt
