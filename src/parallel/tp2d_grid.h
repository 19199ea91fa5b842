// The q x q grid of 2D tensor parallelism (tp2d_linear.h): the Layouts of
// its parameters and the moves of a vector parameter split in q^2 pieces
// (biases, LayerNorm affine), shared by its layers.
//
// Groups: `row` = the ranks of my row (mesh axis "tp_col", rank j), `col`
// = the ranks of my column (mesh axis "tp_row", rank i).
//   matrix [out, in]: out-block j (of `blocks` equal parts, each split),
//                     in-block i
//   vector [features]: out-block j as above, then piece i of it:
//                     global element j*(features/q) + i*(features/q^2) + k
//                     (blocks = 1)
//   feature-sharded:  block j of dimension `dim` (the features), whole on
//                     every other dimension and replicated over my column
//                     (embedding tables: my column's ranks hold other
//                     samples, so their gradients are summed over it)
#pragma once

#include "comm/process_group.h"
#include "nn/module.h"

namespace ndt {

Layout grid_matrix_layout(
    int out,
    int in,
    const ProcessGroup& row,
    const ProcessGroup& col,
    int blocks = 1);
Layout grid_vector_layout(
    int features,
    const ProcessGroup& row,
    const ProcessGroup& col,
    int blocks = 1);

// Sharded on `dim` over `axis` (default "tp_col"), whose group is `row`.
Layout grid_feature_layout(
    Shape global,
    int dim,
    const ProcessGroup& row,
    const char* axis = "tp_col");

// My column's slice [features/q] of a vector from my piece [features/q^2]
// (all-gather along my column).
Tensor gather_column_slice(const Tensor& piece, ProcessGroup& col);
// Adds to p.grad (my piece) the sum over my column of the slice gradients
// slice_grad [features/q] (reduce-scatter along my column).
void add_column_piece_grad(
    Parameter& p, const Tensor& slice_grad, ProcessGroup& col);

}  // namespace ndt
