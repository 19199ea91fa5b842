#include "optim/optimizer.h"

#include <map>

#include "base/check.h"
#include "optim/grad_norm.h"

namespace ndt {

void Optimizer::step_with_grad_squares(
    float lr, std::vector<double>& grad_squares) {
  grad_squares = grad_squares_local(params_);
  step(lr);
}

void Optimizer::load_state(const NamedState& state, int64_t step) {
  NamedState mine = this->state();
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, t] : state)
    given[name] = &t;
  NDT_CHECK(
      given.size() == mine.size(),
      CheckpointError,
      "optimizer state has ",
      given.size(),
      " tensors, expected ",
      mine.size());
  for (auto& [name, t] : mine) {
    auto it = given.find(name);
    NDT_CHECK(
        it != given.end(),
        CheckpointError,
        "optimizer state is missing '",
        name,
        "'");
    NDT_CHECK(
        it->second->shape() == t.shape(),
        CheckpointError,
        "optimizer state '",
        name,
        "' has shape ",
        shape_str(it->second->shape()),
        ", expected ",
        shape_str(t.shape()));
    t.copy_(*it->second);
  }
  step_ = step;
}

}  // namespace ndt
