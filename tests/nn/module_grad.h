// Finite-difference checks for whole modules: the loss is
// sum(forward(x) * r) for a fixed random r, so backward(r) must return
// d loss / dx and accumulate d loss / dparam into every parameter's grad.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "nn/module.h"
#include "test_util.h"

namespace ndt::test {

inline double weighted_sum(const Tensor& y, const Tensor& r) {
  double s = 0;
  for (int64_t i = 0; i < y.numel(); ++i) s += double(y.data()[i]) * r.data()[i];
  return s;
}

// Checks dx (when x is fp32 and `check_input`) and every parameter grad.
// Tolerance: |num - ana| <= atol + rtol * |num| with central differences
// of step h; `samples` elements per tensor.
inline void check_module_grads(
    Module& m,
    Tensor x,
    RunState run,
    double h,
    double atol,
    double rtol,
    int samples,
    bool check_input = true) {
  auto params = m.parameters();
  for (Parameter* p : params) p->grad.zero_();
  Context ctx;
  ctx.run = run;
  Tensor y = m.forward(x, ctx);
  Tensor r = randn(y.shape(), 99, "module_grad.r");
  Tensor dx = m.backward(r, ctx);
  auto loss = [&]() {
    Context c;
    c.run = run;
    Tensor out = m.forward(x, c);
    return weighted_sum(out, r);
  };
  if (check_input) {
    ASSERT_TRUE(dx.defined());
    double worst = grad_check(x, dx, loss, h, atol, rtol, samples);
    EXPECT_LE(worst, 1.0) << "input gradient";
  }
  for (Parameter* p : params) {
    Tensor g = p->grad.clone(MemTag::kOther);
    double worst = grad_check(p->value, g, loss, h, atol, rtol, samples);
    EXPECT_LE(worst, 1.0) << "gradient of " << p->name;
  }
}

}  // namespace ndt::test
