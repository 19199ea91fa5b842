// add, add_, scale_, zero_, sum_squares against plain loops; sum_squares does
// not depend on the thread count.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/ops.h"
#include "test_util.h"

namespace ndt {
namespace {

TEST(Elementwise, AddAddInPlaceScale) {
  const int64_t n = 40000;  // above the parallel threshold
  Tensor a = test::randn({n}, 1, "a");
  Tensor b = test::randn({n}, 1, "b");
  Tensor y({n});
  ops::add(y, a, b);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(y.data()[i], a.data()[i] + b.data()[i]);  // one fp32 op
  }
  ops::add_(y, a);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(y.data()[i], (a.data()[i] + b.data()[i]) + a.data()[i]);
  }
  Tensor z = a.clone(MemTag::kOther);
  ops::scale_(z, -0.25f);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(z.data()[i], a.data()[i] * -0.25f);
}

TEST(Elementwise, ZeroClearsEveryElementOfLargeAndSmallTensors) {
  for (int64_t n : {int64_t{5}, int64_t{300001}}) {
    Tensor y = test::randn({n}, 3, "y");
    y.data()[n - 1] = NAN;
    ops::zero_(y);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(y.data()[i], 0.0f) << "element " << i << " of " << n;
  }
}

TEST(Elementwise, SumSquaresMatchesAndIsThreadCountIndependent) {
  for (int64_t n : {int64_t{37}, int64_t{300001}}) {
    Tensor x = test::randn({n}, 2, "x");
    double expect = 0;
    for (int64_t i = 0; i < n; ++i) {
      expect += double(x.data()[i]) * x.data()[i];
    }
    const int before = ops::num_threads();
    ops::set_num_threads(1);
    const double one = ops::sum_squares(x);
    ops::set_num_threads(2);
    const double two = ops::sum_squares(x);
    ops::set_num_threads(before);
    EXPECT_EQ(one, two);  // bitwise: fixed chunks added in order
    // Double accumulation: only the order differs, rtol 1e-12.
    EXPECT_NEAR(one, expect, 1e-12 * expect);
  }
}

}  // namespace
}  // namespace ndt
