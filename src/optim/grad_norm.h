// Global gradient norm and clipping.
//
// The norm is sqrt(sum over parameters of ||grad||^2) for the logical
// (global) tensors. Each parameter's Layout says how its local block relates
// to the global tensor; in a serial run every block is whole. Parallel
// runs (later) sum the squares over the groups a parameter is sharded on,
// never over groups it is replicated on.
#pragma once

#include <functional>
#include <vector>

#include "nn/module.h"
#include "optim/layer_norms.h"

namespace ndt {

// Sum of squares of the local grad blocks, per parameter, in double.
std::vector<double> grad_squares_local(const std::vector<Parameter*>& params);
double grad_norm(const std::vector<Parameter*>& params);
// The global norm from per-parameter local sums of squares (params' order,
// e.g. from Optimizer::step_with_grad_squares): each summed over the mesh
// axes its Layout shards it on (axis_sum; layouts with no sharded
// parameter need none), the total then over sum_holders as below.
double grad_norm_from_squares(
    const std::vector<Parameter*>& params,
    std::vector<double> squares,
    const AxisSumFn& axis_sum = nullptr,
    const std::function<void(double&)>& sum_holders = nullptr);
// Scales grads by max_norm / norm when norm > max_norm. Returns the norm
// before clipping. Each parameter's squared norm is that of its logical
// tensor: summed with axis_sum over the mesh axes its Layout shards it on
// (tensor parallel), never over axes that replicate it (layer_norms.h).
// sum_holders (pipelines): sums the total in place over the ranks that
// hold the model's other parameters (each parameter is held by exactly one
// of them, so each is counted once). Every rank of those groups calls
// clip_grad_norm together.
double clip_grad_norm(
    const std::vector<Parameter*>& params,
    double max_norm,
    const AxisSumFn& axis_sum = nullptr,
    const std::function<void(double&)>& sum_holders = nullptr);

}  // namespace ndt
