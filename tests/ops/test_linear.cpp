// Linear: forward against a reference loop, finite-difference gradients for
// dx, dw, db, and the += contract for parameter gradients.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/ops.h"
#include "test_util.h"

namespace ndt {
namespace {

constexpr int kIC = 5, kOC = 4;

Tensor linear_reference(const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t N = x.numel() / kIC;
  Tensor y({N, kOC}, MemTag::kOther);
  for (int64_t n = 0; n < N; ++n) {
    for (int o = 0; o < kOC; ++o) {
      double acc = b.defined() ? b.data()[o] : 0.0;
      for (int i = 0; i < kIC; ++i) {
        acc += double(x.data()[n * kIC + i]) * w.data()[o * kIC + i];
      }
      y.data()[n * kOC + o] = static_cast<float>(acc);
    }
  }
  return y;
}

TEST(Linear, ForwardMatchesReference) {
  Tensor x = test::randn({2, 3, kIC}, 1, "x");
  Tensor w = test::randn({kOC, kIC}, 1, "w");
  Tensor b = test::randn({kOC}, 1, "b");
  for (bool with_bias : {true, false}) {
    Tensor bias = with_bias ? b : Tensor();
    Tensor y({2, 3, kOC});
    y.fill_(NAN);  // assigned, never read
    ops::linear_forward(y, x, w, bias);
    // fp32 dot products of 5 terms of size ~1.
    EXPECT_LE(
        test::close_ratio(y, linear_reference(x, w, bias), 1e-6, 1e-5), 1.0)
        << "with_bias=" << with_bias;
  }
}

TEST(Linear, BackwardMatchesFiniteDifferences) {
  Tensor x = test::randn({2, 3, kIC}, 2, "x");
  Tensor w = test::randn({kOC, kIC}, 2, "w");
  Tensor b = test::randn({kOC}, 2, "b");
  Tensor r = test::randn({2, 3, kOC}, 2, "r");
  Tensor y({2, 3, kOC});
  auto loss = [&] {
    ops::linear_forward(y, x, w, b);
    return test::dot(y, r);
  };
  Tensor dx({2, 3, kIC});
  dx.fill_(NAN);  // assigned
  Tensor dw = Tensor::zeros({kOC, kIC});
  Tensor db = Tensor::zeros({kOC});
  ops::linear_backward(dx, dw, db, r, x, w);
  // The loss is linear in each input, so central differences are exact up
  // to fp32 rounding of y (~1e-7 / h); h = 1e-2, atol 1e-4, rtol 1e-3.
  EXPECT_LE(test::grad_check(x, dx, loss, 1e-2, 1e-4, 1e-3), 1.0);
  EXPECT_LE(test::grad_check(w, dw, loss, 1e-2, 1e-4, 1e-3), 1.0);
  EXPECT_LE(test::grad_check(b, db, loss, 1e-2, 1e-4, 1e-3), 1.0);
}

TEST(Linear, ParameterGradsAccumulateAndDxIsOptional) {
  Tensor x = test::randn({7, kIC}, 3, "x");
  Tensor w = test::randn({kOC, kIC}, 3, "w");
  Tensor dy = test::randn({7, kOC}, 3, "dy");
  Tensor dx1({7, kIC}), dx2({7, kIC});
  Tensor dw = Tensor::zeros({kOC, kIC}), db = Tensor::zeros({kOC});
  ops::linear_backward(dx1, dw, db, dy, x, w);
  Tensor dw1 = dw.clone(MemTag::kOther), db1 = db.clone(MemTag::kOther);
  dx2.fill_(NAN);
  ops::linear_backward(dx2, dw, db, dy, x, w);
  EXPECT_EQ(test::max_abs_diff(dx1, dx2), 0.0);  // dx assigned, not summed
  // Second call adds the same product again: equal to 2x within 4 ulp.
  for (int64_t i = 0; i < dw.numel(); ++i) {
    EXPECT_FLOAT_EQ(dw.data()[i], 2 * dw1.data()[i]);
  }
  for (int64_t i = 0; i < db.numel(); ++i) {
    EXPECT_FLOAT_EQ(db.data()[i], 2 * db1.data()[i]);
  }
  Tensor none;
  ops::linear_backward(none, dw, db, dy, x, w);  // skips dx
  for (int64_t i = 0; i < db.numel(); ++i) {
    EXPECT_FLOAT_EQ(db.data()[i], 3 * db1.data()[i]);
  }
}

}  // namespace
}  // namespace ndt
