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

double grad_norm(const std::vector<Parameter*>& params) {
  double total = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    // Serial layout only for now: a sharded block would need a reduction
    // over its shard groups, which the parallel issues add.
    NDT_ASSERT(
        params[i]->layout.is_full(),
        "grad_norm of a sharded parameter needs a process group");
  }
  for (double s : grad_squares_local(params))
    total += s;
  return std::sqrt(total);
}

double clip_grad_norm(const std::vector<Parameter*>& params, double max_norm) {
  double norm = grad_norm(params);
  if (max_norm > 0 && norm > max_norm) {
    float s = static_cast<float>(max_norm / (norm + 1e-6));
    for (Parameter* p : params)
      ops::scale_(p->grad, s);
  }
  return norm;
}

}  // namespace ndt
