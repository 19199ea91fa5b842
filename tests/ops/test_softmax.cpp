// Row softmax: values against a double reference (including large logits),
// finite differences for the backward.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/ops.h"
#include "test_util.h"

namespace ndt {
namespace {

Tensor softmax_reference(const Tensor& x) {
  const int64_t C = x.dim(-1), N = x.numel() / C;
  Tensor y(x.shape(), MemTag::kOther);
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x.data() + n * C;
    double m = -INFINITY, z = 0;
    for (int64_t c = 0; c < C; ++c)
      m = std::max(m, double(xr[c]));
    for (int64_t c = 0; c < C; ++c)
      z += std::exp(xr[c] - m);
    for (int64_t c = 0; c < C; ++c) {
      y.data()[n * C + c] = static_cast<float>(std::exp(xr[c] - m) / z);
    }
  }
  return y;
}

TEST(Softmax, ForwardMatchesReference) {
  // Spread 30 makes logits up to ~100 apart: stability and underflow to 0.
  for (float spread : {1.0f, 30.0f}) {
    Tensor x = test::randn({3, 4, 77}, 1, "x", spread);
    Tensor y(x.shape());
    ops::softmax_forward(y, x);
    // Probabilities: rtol 1e-5 (polynomial exp ~2 ulp), atol 1e-7.
    EXPECT_LE(test::close_ratio(y, softmax_reference(x), 1e-7, 1e-5), 1.0)
        << "spread " << spread;
  }
}

TEST(Softmax, BackwardMatchesFiniteDifferences) {
  for (auto [N, C, samples] :
       {std::tuple{4, 9, -1}, std::tuple{200, 90, 200}}) {
    SCOPED_TRACE(testing::Message() << "N=" << N << " C=" << C);
    Tensor x = test::randn({N, C}, 2, "x", 2.0f);
    Tensor r = test::randn({N, C}, 2, "r");
    Tensor y({N, C}), dx({N, C});
    auto loss = [&] {
      ops::softmax_forward(y, x);
      return test::dot(y, r);
    };
    loss();
    dx.fill_(NAN);  // assigned
    ops::softmax_backward(dx, r, y);
    // Smooth; h = 1e-2: truncation ~1e-5, fp32 rounding ~1e-6. atol 1e-4,
    // rtol 1e-2 (gradients are O(0.1)).
    EXPECT_LE(test::grad_check(x, dx, loss, 1e-2, 1e-4, 1e-2, samples), 1.0);
  }
}

}  // namespace
}  // namespace ndt
