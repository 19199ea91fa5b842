// Per-tensor (layer-wise) norms of sharded parameters, for LARS and LAMB.
//
// A trust ratio needs ||x||^2 of the LOGICAL tensor. Each rank holds one
// block; the logical value is the local sum of squares summed over the mesh
// axes the parameter is SHARDED on (Placement kShard with parts > 1) and
// never over axes it is replicated on (kReplicate, or an axis its Layout
// does not name): 1D-TP LayerNorm weights, 2.5D weights over depth, 3D
// biases. The summation itself is the caller's (an AxisSumFn, later
// mesh.group(axes).all_reduce); serial runs never call it. This file does
// not compute global (all-parameter) norms: see grad_norm.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nn/module.h"

namespace ndt {

// Sums `n` doubles at `data` elementwise, in place, over the ranks that
// share this rank's coordinates on every mesh axis except `axes` (the group
// spanned by `axes`). `axes` is sorted and unique. Every rank of that group
// makes the same sequence of calls with the same `n`.
using AxisSumFn = std::function<void(
    const std::vector<std::string>& axes, double* data, int64_t n)>;

// Mesh axes on which `layout` holds a proper shard (kShard, parts > 1),
// sorted and unique. Empty: the local block's sums are already logical.
std::vector<std::string> sharded_axes(const Layout& layout);

// Sums per-parameter partial values over each parameter's sharded axes.
// Parameters are grouped by their sharded-axis set once, at construction;
// reduce() then costs one `sum` call per distinct non-empty set, made in
// sorted set order (the same on every rank), and allocates nothing after
// its first call.
class PerTensorReducer {
 public:
  // NDT_ASSERT: a parameter with sharded axes needs a non-null `sum`.
  PerTensorReducer(const std::vector<Parameter*>& params, AxisSumFn sum);
  // values[i * k + q] holds local partial q of params[i]; on return each is
  // the sum over params[i]'s sharded axes.
  void reduce(double* values, int k);
  // Number of distinct non-empty sharded-axis sets (sum calls per reduce).
  size_t num_groups() const {
    return groups_.size();
  }

 private:
  struct Group {
    std::vector<std::string> axes;
    std::vector<size_t> members;  // parameter indices, ascending
  };
  std::vector<Group> groups_;
  AxisSumFn sum_;
  std::vector<double> scratch_;
};

// For each parameter, ||tensors[i]||^2 of the logical tensor: the local sum
// of squares (double) of tensors[i] (params[i]'s local block: its value, its
// grad or an update buffer), summed over params[i]'s sharded axes.
std::vector<double> layer_norms_squared(
    const std::vector<Parameter*>& params,
    const std::vector<const Tensor*>& tensors,
    const AxisSumFn& sum);

namespace detail {

constexpr int64_t kNormMaxChunks = 256;
constexpr int64_t kNormMinChunk = 4096;
constexpr int kNormLanes = 8;

// Two fused sums over j in [0, n): f(j, a, b) adds element j's terms to
// the double accumulators a and b (and may update state at j). Chunk and
// lane boundaries depend on n only and partials are added in a fixed
// order, so the result does not depend on the OpenMP thread count.
template <typename F>
void fused_sums2(int64_t n, F f, double& s0, double& s1) {
  const int64_t chunk =
      std::max(kNormMinChunk, (n + kNormMaxChunks - 1) / kNormMaxChunks);
  const int64_t chunks = (n + chunk - 1) / chunk;
  double part0[kNormMaxChunks];
  double part1[kNormMaxChunks];
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t i0 = ch * chunk, i1 = std::min(n, i0 + chunk);
    double a[kNormLanes] = {}, b[kNormLanes] = {};
    int64_t j = i0;
    for (; j + kNormLanes <= i1; j += kNormLanes) {
      for (int l = 0; l < kNormLanes; ++l)
        f(j + l, a[l], b[l]);
    }
    for (; j < i1; ++j)
      f(j, a[0], b[0]);
    double ta = 0, tb = 0;
    for (int l = 0; l < kNormLanes; ++l) {
      ta += a[l];
      tb += b[l];
    }
    part0[ch] = ta;
    part1[ch] = tb;
  }
  s0 = 0;
  s1 = 0;
  for (int64_t ch = 0; ch < chunks; ++ch) {
    s0 += part0[ch];
    s1 += part1[ch];
  }
}

}  // namespace detail
}  // namespace ndt
