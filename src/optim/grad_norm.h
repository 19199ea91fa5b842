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

namespace ndt {

// Sum of squares of the local grad blocks, per parameter, in double.
std::vector<double> grad_squares_local(const std::vector<Parameter*>& params);
double grad_norm(const std::vector<Parameter*>& params);
// Scales grads by max_norm / norm when norm > max_norm. Returns the norm
// before clipping. sum_holders (pipelines): sums a squared norm in place
// over the ranks that hold the model's other parameters (each parameter is
// held by exactly one of them, so each is counted once); every such rank
// calls clip_grad_norm together.
double clip_grad_norm(
    const std::vector<Parameter*>& params,
    double max_norm,
    const std::function<void(double&)>& sum_holders = nullptr);

}  // namespace ndt
