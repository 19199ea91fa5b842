// Bias add, GELU (tanh), fused bias + GELU, ReLU: forward values against
// references (GELU against the PyTorch fixture), finite-difference
// gradients for every backward, and the = / += contract.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/ops.h"
#include "test_util.h"

namespace ndt {
namespace {

double gelu_reference(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

TEST(BiasAdd, ForwardAddsPerColumn) {
  Tensor y = test::randn({3, 4, 6}, 1, "y");
  Tensor b = test::randn({6}, 1, "b");
  Tensor y0 = y.clone(MemTag::kOther);
  ops::bias_add_forward(y, b);
  for (int64_t i = 0; i < y.numel(); ++i) {
    EXPECT_EQ(y.data()[i], y0.data()[i] + b.data()[i % 6]);  // one add
  }
}

TEST(BiasAdd, BackwardMatchesFiniteDifferencesAndAccumulates) {
  Tensor x = test::randn({5, 7}, 2, "x");
  Tensor b = test::randn({7}, 2, "b");
  Tensor r = test::randn({5, 7}, 2, "r");
  Tensor y({5, 7});
  auto loss = [&] {
    y.copy_(x);
    ops::bias_add_forward(y, b);
    return test::dot(y, r);
  };
  Tensor db = Tensor::zeros({7});
  ops::bias_add_backward(db, r);
  // Linear in b: exact up to fp32 rounding of y; h 1e-2, atol 1e-4, rtol 1e-3.
  EXPECT_LE(test::grad_check(b, db, loss, 1e-2, 1e-4, 1e-3), 1.0);
  Tensor db1 = db.clone(MemTag::kOther);
  ops::bias_add_backward(db, r);
  for (int i = 0; i < 7; ++i)
    EXPECT_EQ(db.data()[i], 2 * db1.data()[i]);
}

TEST(BiasAdd, BackwardWideRowsMatchReference) {
  // N = 150 spans three chunks of rows (64 each), C = 600 many vectors.
  const int N = 150, C = 600;
  Tensor dy = test::randn({N, C}, 3, "dy");
  Tensor db = test::randn({C}, 3, "db0");
  Tensor expect = db.clone(MemTag::kOther);
  for (int c = 0; c < C; ++c) {
    double s = 0;
    for (int n = 0; n < N; ++n)
      s += dy.data()[n * C + c];
    expect.data()[c] = static_cast<float>(expect.data()[c] + s);
  }
  ops::bias_add_backward(db, dy);
  // 150 fp32 adds of size-1 terms in chunks of 64: error ~ 64 * 6e-8.
  EXPECT_LE(test::close_ratio(db, expect, 1e-5, 1e-5), 1.0);
}

// Bias gradients sum fixed chunks of rows, so 1 and 2 threads give the
// same bits (the rows split differently over the threads).
TEST(BiasGrads, IndependentOfThreadCount) {
  const int N = 333, C = 600;
  Tensor dy = test::randn({N, C}, 8, "dy");
  Tensor pre = test::randn({N, C}, 8, "pre", 2.0f);
  Tensor db[2], dbg[2], dpre[2];
  const int before = ops::num_threads();
  for (int t = 0; t < 2; ++t) {
    ops::set_num_threads(t + 1);
    db[t] = Tensor::zeros({C});
    dbg[t] = Tensor::zeros({C});
    dpre[t] = Tensor({N, C});
    ops::bias_add_backward(db[t], dy);
    ops::bias_gelu_backward(dpre[t], dbg[t], dy, pre);
  }
  ops::set_num_threads(before);
  EXPECT_EQ(test::max_abs_diff(db[0], db[1]), 0.0);
  EXPECT_EQ(test::max_abs_diff(dbg[0], dbg[1]), 0.0);
  EXPECT_EQ(test::max_abs_diff(dpre[0], dpre[1]), 0.0);
}

TEST(Gelu, MatchesPyTorchFixture) {
  auto f = test::read_fixture(test::source_path("tests/fixtures/gelu.txt"));
  ASSERT_TRUE(f.count("x") && f.count("y") && f.count("dy") && f.count("dx"));
  Tensor y(f["x"].shape()), dx(f["x"].shape());
  ops::gelu_forward(y, f["x"]);
  ops::gelu_backward(dx, f["dy"], f["x"]);
  // fp32 with a polynomial exp: within a few ulp; atol covers y ~ 0.
  EXPECT_LE(test::close_ratio(y, f["y"], 1e-6, 1e-5), 1.0);
  EXPECT_LE(test::close_ratio(dx, f["dx"], 1e-6, 1e-5), 1.0);
}

TEST(Gelu, ForwardMatchesTanhFormulaOverWideRange) {
  const int n = 4001;
  Tensor x({n}), y({n}), expect({n});
  for (int i = 0; i < n; ++i) {
    x.data()[i] = -20.0f + 40.0f * i / (n - 1);
    expect.data()[i] = static_cast<float>(gelu_reference(x.data()[i]));
  }
  ops::gelu_forward(y, x);
  EXPECT_LE(test::close_ratio(y, expect, 1e-6, 1e-5), 1.0);
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  Tensor x = test::randn({6, 9}, 4, "x", 2.0f);
  Tensor r = test::randn({6, 9}, 4, "r");
  Tensor y({6, 9}), dx({6, 9});
  auto loss = [&] {
    ops::gelu_forward(y, x);
    return test::dot(y, r);
  };
  ops::gelu_backward(dx, r, x);
  // Smooth, |gelu'''| <~ 1: h = 1e-2 gives truncation ~2e-5; fp32 rounding
  // of y adds ~1e-5. atol 1e-3, rtol 1e-2.
  EXPECT_LE(test::grad_check(x, dx, loss, 1e-2, 1e-3, 1e-2), 1.0);
}

TEST(BiasGelu, ForwardEqualsBiasAddThenGeluAndLeavesTheSlope) {
  Tensor pre = test::randn({8, 24}, 5, "pre", 2.0f);
  Tensor b = test::randn({24}, 5, "b");
  Tensor pre2 = pre.clone(MemTag::kOther);
  Tensor y({8, 24}), y2({8, 24});
  ops::bias_gelu_forward(y, pre, b);
  ops::bias_add_forward(pre2, b);
  ops::gelu_forward(y2, pre2);
  // pre now holds the slope gelu'(pre + b): GELU's backward of ones.
  Tensor ones({8, 24}), slope({8, 24});
  ones.fill_(1.0f);
  ops::gelu_backward(slope, ones, pre2);
  // Same formulas; only FMA contraction may differ between the loops.
  EXPECT_LE(test::close_ratio(y, y2, 1e-7, 1e-6), 1.0);
  EXPECT_LE(test::close_ratio(pre, slope, 1e-7, 1e-6), 1.0);
}

void check_bias_gelu_backward(int N, int C, int samples) {
  SCOPED_TRACE(testing::Message() << "N=" << N << " C=" << C);
  Tensor x = test::randn({N, C}, 6, "x", 2.0f);
  Tensor b = test::randn({C}, 6, "b");
  Tensor r = test::randn({N, C}, 6, "r");
  Tensor pre({N, C}), y({N, C});
  auto loss = [&] {
    pre.copy_(x);
    ops::bias_gelu_forward(y, pre, b);
    return test::dot(y, r);
  };
  loss();
  Tensor dpre({N, C});
  dpre.fill_(NAN);  // assigned
  Tensor db = Tensor::zeros({C});
  ops::bias_gelu_backward(dpre, db, r, pre);  // pre: the forward's slope
  // d loss / d x = dpre (pre = x + b); d loss / d b = db. Same tolerance
  // as GELU: h 1e-2, atol 1e-3, rtol 1e-2.
  EXPECT_LE(test::grad_check(x, dpre, loss, 1e-2, 1e-3, 1e-2, samples), 1.0);
  EXPECT_LE(test::grad_check(b, db, loss, 1e-2, 1e-3, 1e-2, samples), 1.0);
  loss();  // restore pre for the unperturbed inputs

  // db accumulates; without db, dpre is the same.
  Tensor db1 = db.clone(MemTag::kOther);
  Tensor dpre2({N, C}), none;
  ops::bias_gelu_backward(dpre2, db, r, pre);
  for (int c = 0; c < C; ++c)
    EXPECT_EQ(db.data()[c], 2 * db1.data()[c]);
  ops::bias_gelu_backward(dpre2, none, r, pre);
  EXPECT_LE(test::close_ratio(dpre2, dpre, 1e-7, 1e-6), 1.0);
}

TEST(BiasGelu, BackwardMatchesFiniteDifferences) {
  check_bias_gelu_backward(5, 7, -1);
  check_bias_gelu_backward(150, 600, 100);  // three chunks of rows, threads
}

TEST(Relu, ForwardAndBackward) {
  Tensor x = test::randn({4, 10}, 7, "x");
  for (int64_t i = 0; i < x.numel(); ++i) {
    // Keep inputs away from the kink so x +- h does not cross it.
    x.data()[i] += x.data()[i] >= 0 ? 0.05f : -0.05f;
  }
  Tensor r = test::randn({4, 10}, 7, "r");
  Tensor y({4, 10}), dx({4, 10});
  ops::relu_forward(y, x);
  for (int64_t i = 0; i < x.numel(); ++i) {
    EXPECT_EQ(y.data()[i], x.data()[i] > 0 ? x.data()[i] : 0.0f);
  }
  auto loss = [&] {
    ops::relu_forward(y, x);
    return test::dot(y, r);
  };
  loss();
  ops::relu_backward(dx, r, y);
  // Piecewise linear and h < 0.05: exact up to fp32 rounding.
  EXPECT_LE(test::grad_check(x, dx, loss, 1e-2, 1e-4, 1e-3), 1.0);
}

}  // namespace
}  // namespace ndt
