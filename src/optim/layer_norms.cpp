#include "optim/layer_norms.h"

#include <map>

#include "base/check.h"
#include "ops/ops.h"

namespace ndt {
namespace {

std::string join_axes(const std::vector<std::string>& axes) {
  std::string s;
  for (const std::string& a : axes)
    s += (s.empty() ? "" : ",") + a;
  return s;
}

}  // namespace

std::vector<std::string> sharded_axes(const Layout& layout) {
  std::vector<std::string> axes;
  for (const Placement& p : layout.placements) {
    if (p.kind == Placement::Kind::kShard && p.parts > 1) {
      axes.push_back(p.axis);
    }
  }
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return axes;
}

PerTensorReducer::PerTensorReducer(
    const std::vector<Parameter*>& params, AxisSumFn sum)
    : sum_(std::move(sum)) {
  // std::map orders the sets, so every rank issues its calls in the same
  // order whatever its parameter order.
  std::map<std::vector<std::string>, std::vector<size_t>> sets;
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<std::string> axes = sharded_axes(params[i]->layout);
    if (axes.empty())
      continue;
    NDT_ASSERT(
        sum_ != nullptr,
        "parameter '",
        params[i]->name,
        "' is sharded over mesh axes {",
        join_axes(axes),
        "} but the optimizer got no AxisSumFn to sum its per-tensor norms "
        "over those axes");
    sets[axes].push_back(i);
  }
  for (auto& [axes, members] : sets)
    groups_.push_back({axes, members});
}

void PerTensorReducer::reduce(double* values, int k) {
  for (const Group& g : groups_) {
    const size_t n = g.members.size() * static_cast<size_t>(k);
    if (scratch_.size() < n)
      scratch_.resize(n);
    for (size_t m = 0; m < g.members.size(); ++m) {
      for (int q = 0; q < k; ++q) {
        scratch_[m * k + q] = values[g.members[m] * k + q];
      }
    }
    sum_(g.axes, scratch_.data(), static_cast<int64_t>(n));
    for (size_t m = 0; m < g.members.size(); ++m) {
      for (int q = 0; q < k; ++q) {
        values[g.members[m] * k + q] = scratch_[m * k + q];
      }
    }
  }
}

std::vector<double> layer_norms_squared(
    const std::vector<Parameter*>& params,
    const std::vector<const Tensor*>& tensors,
    const AxisSumFn& sum) {
  NDT_ASSERT(
      params.size() == tensors.size(),
      "layer_norms_squared: ",
      params.size(),
      " params but ",
      tensors.size(),
      " tensors");
  std::vector<double> out(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    NDT_ASSERT(
        tensors[i]->shape() == params[i]->layout.local_shape(),
        "layer_norms_squared: tensor ",
        shape_str(tensors[i]->shape()),
        " is not the local block ",
        shape_str(params[i]->layout.local_shape()),
        " of '",
        params[i]->name,
        "'");
    out[i] = ops::sum_squares(*tensors[i]);
  }
  PerTensorReducer(params, sum).reduce(out.data(), 1);
  return out;
}

}  // namespace ndt
