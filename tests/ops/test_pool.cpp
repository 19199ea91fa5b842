// mean_tokens: forward against a double reference, finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/ops.h"
#include "test_util.h"

namespace ndt {
namespace {

TEST(MeanTokens, ForwardMatchesReference) {
  for (auto [B, T, C] : {std::tuple{2, 5, 3}, std::tuple{3, 40, 300}}) {
    Tensor x = test::randn({B, T, C}, 1, "x");
    Tensor y({B, C}), expect({B, C}, MemTag::kOther);
    ops::mean_tokens_forward(y, x);
    for (int b = 0; b < B; ++b) {
      for (int c = 0; c < C; ++c) {
        double s = 0;
        for (int t = 0; t < T; ++t)
          s += x.data()[(b * T + t) * C + c];
        expect.data()[b * C + c] = static_cast<float>(s / T);
      }
    }
    // T fp32 adds: rtol 1e-5, atol 1e-6.
    EXPECT_LE(test::close_ratio(y, expect, 1e-6, 1e-5), 1.0)
        << B << "x" << T << "x" << C;
  }
}

TEST(MeanTokens, BackwardMatchesFiniteDifferences) {
  const int B = 2, T = 5, C = 3;
  Tensor x = test::randn({B, T, C}, 2, "x");
  Tensor r = test::randn({B, C}, 2, "r");
  Tensor y({B, C}), dx({B, T, C});
  auto loss = [&] {
    ops::mean_tokens_forward(y, x);
    return test::dot(y, r);
  };
  dx.fill_(NAN);  // assigned
  ops::mean_tokens_backward(dx, r);
  // Linear: exact up to fp32 rounding; atol 1e-4, rtol 1e-3.
  EXPECT_LE(test::grad_check(x, dx, loss, 1e-2, 1e-4, 1e-3), 1.0);
}

}  // namespace
}  // namespace ndt
