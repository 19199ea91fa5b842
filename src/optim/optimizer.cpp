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
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, t] : state)
    given[name] = &t;
  const size_t expected = this->state().size();
  NDT_CHECK(
      given.size() == expected,
      CheckpointError,
      "optimizer state has ",
      given.size(),
      " tensors, expected ",
      expected);
  load_state(
      [&given](const std::string& name) {
        auto it = given.find(name);
        NDT_CHECK(
            it != given.end(),
            CheckpointError,
            "optimizer state is missing '",
            name,
            "'");
        return *it->second;
      },
      step);
}

void Optimizer::load_state(
    const std::function<Tensor(const std::string& name)>& read, int64_t step) {
  for (auto& [name, t] : this->state()) {
    const Tensor v = read(name);
    NDT_CHECK(
        v.shape() == t.shape(),
        CheckpointError,
        "optimizer state '",
        name,
        "' has shape ",
        shape_str(v.shape()),
        ", expected ",
        shape_str(t.shape()));
    t.copy_(v);
  }
  step_ = step;
}

}  // namespace ndt
