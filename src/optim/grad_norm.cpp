#include "optim/grad_norm.h"

#include <cmath>

#include "base/check.h"
#include "ops/ops.h"

namespace ndt {

std::vector<double> grad_squares_local(const std::vector<Parameter*>& params) {
  std::vector<double> out;
  out.reserve(params.size());
  for (Parameter* p : params)
    out.push_back(ops::sum_squares(p->grad));
  return out;
}

namespace {

double grad_squares_total(const std::vector<Parameter*>& params) {
  for (Parameter* p : params) {
    // Serial and pipeline layouts only: a sharded block would need a
    // reduction over its shard groups (tensor-parallel layouts add it).
    NDT_ASSERT(
        p->layout.is_full(),
        "grad_norm of a sharded parameter needs a process group");
  }
  double total = 0;
  for (double s : grad_squares_local(params))
    total += s;
  return total;
}

}  // namespace

double grad_norm(const std::vector<Parameter*>& params) {
  return std::sqrt(grad_squares_total(params));
}

double clip_grad_norm(
    const std::vector<Parameter*>& params,
    double max_norm,
    const AxisSumFn& axis_sum,
    const std::function<void(double&)>& sum_holders) {
  double sq = 0;
  if (axis_sum) {
    std::vector<const Tensor*> grads;
    for (Parameter* p : params)
      grads.push_back(&p->grad);
    for (double v : layer_norms_squared(params, grads, axis_sum))
      sq += v;
  } else {
    sq = grad_squares_total(params);
  }
  if (sum_holders)
    sum_holders(sq);
  const double norm = std::sqrt(sq);
  if (max_norm > 0 && norm > max_norm) {
    float s = static_cast<float>(max_norm / (norm + 1e-6));
    for (Parameter* p : params)
      ops::scale_(p->grad, s);
  }
  return norm;
}

}  // namespace ndt
