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

double grad_norm_from_squares(
    const std::vector<Parameter*>& params,
    std::vector<double> squares,
    const AxisSumFn& axis_sum,
    const std::function<void(double&)>& sum_holders) {
  NDT_ASSERT(
      squares.size() == params.size(),
      "grad_norm_from_squares: ",
      squares.size(),
      " sums for ",
      params.size(),
      " parameters");
  if (axis_sum) {
    PerTensorReducer(params, axis_sum).reduce(squares.data(), 1);
  } else {
    for (Parameter* p : params) {
      // Serial and pipeline layouts only: a sharded block needs its sum
      // over the groups that shard it.
      NDT_ASSERT(
          p->layout.is_full(),
          "grad_norm of a sharded parameter needs a process group");
    }
  }
  double sq = 0;
  for (double s : squares)
    sq += s;
  if (sum_holders)
    sum_holders(sq);
  return std::sqrt(sq);
}

double grad_norm(const std::vector<Parameter*>& params) {
  return grad_norm_from_squares(params, grad_squares_local(params));
}

double clip_grad_norm(
    const std::vector<Parameter*>& params,
    double max_norm,
    const AxisSumFn& axis_sum,
    const std::function<void(double&)>& sum_holders) {
  const double norm = grad_norm_from_squares(
      params, grad_squares_local(params), axis_sum, sum_holders);
  if (max_norm > 0 && norm > max_norm) {
    float s = static_cast<float>(max_norm / (norm + 1e-6));
    for (Parameter* p : params)
      ops::scale_(p->grad, s);
  }
  return norm;
}

}  // namespace ndt
