// Cross-entropy: losses, probabilities and their sum against a double
// reference (large logits too), finite differences for dlogits, aliasing
// dlogits with probs, and DataError on a bad target.
#include <gtest/gtest.h>

#include <cmath>

#include "base/error.h"
#include "ops/ops.h"
#include "test_util.h"

namespace ndt {
namespace {

Tensor make_targets(int64_t N, int V, uint64_t seed) {
  Tensor t({N}, MemTag::kOther, DType::kI32);
  for (int64_t n = 0; n < N; ++n) {
    t.data_i32()[n] = static_cast<int32_t>((n * 7 + seed) % V);
  }
  return t;
}

TEST(CrossEntropy, ForwardMatchesReference) {
  for (auto [N, V, spread] :
       {std::tuple{6, 11, 1.0f},
        std::tuple{6, 11, 40.0f},
        std::tuple{30, 1000, 3.0f}}) {
    SCOPED_TRACE(testing::Message() << "N=" << N << " V=" << V);
    Tensor logits = test::randn({N, V}, 1, "logits", spread);
    Tensor targets = make_targets(N, V, 3);
    Tensor losses({N}), probs({N, V});
    const double total =
        ops::cross_entropy_forward(losses, probs, logits, targets);
    Tensor ref_losses({N}, MemTag::kOther), ref_probs({N, V}, MemTag::kOther);
    double ref_total = 0;
    for (int n = 0; n < N; ++n) {
      const float* x = logits.data() + n * V;
      double m = -INFINITY, z = 0;
      for (int v = 0; v < V; ++v)
        m = std::max(m, double(x[v]));
      for (int v = 0; v < V; ++v)
        z += std::exp(x[v] - m);
      for (int v = 0; v < V; ++v) {
        ref_probs.data()[n * V + v] =
            static_cast<float>(std::exp(x[v] - m) / z);
      }
      const double l = std::log(z) - (x[targets.data_i32()[n]] - m);
      ref_losses.data()[n] = static_cast<float>(l);
      ref_total += l;
    }
    // fp32 with a polynomial exp: rtol 1e-5; atol 1e-6 for tiny losses.
    EXPECT_LE(test::close_ratio(losses, ref_losses, 1e-6, 1e-5), 1.0);
    EXPECT_LE(test::close_ratio(probs, ref_probs, 1e-8, 1e-5), 1.0);
    EXPECT_NEAR(total, ref_total, 1e-5 * (1 + std::fabs(ref_total)));
  }
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferences) {
  const int N = 5, V = 13;
  const float scale = 1.0f / N;
  Tensor logits = test::randn({N, V}, 2, "logits", 2.0f);
  Tensor targets = make_targets(N, V, 1);
  Tensor losses({N}), probs({N, V}), dlogits({N, V});
  auto loss = [&] {
    return scale * ops::cross_entropy_forward(losses, probs, logits, targets);
  };
  loss();
  dlogits.fill_(NAN);  // assigned
  ops::cross_entropy_backward(dlogits, probs, targets, scale);
  // Smooth; h = 1e-2: truncation ~1e-6, rounding of the fp32 losses
  // ~1e-7 / h. atol 1e-4, rtol 1e-2 (gradients are O(0.1)).
  EXPECT_LE(test::grad_check(logits, dlogits, loss, 1e-2, 1e-4, 1e-2), 1.0);

  // In place over probs gives the same result.
  loss();
  ops::cross_entropy_backward(probs, probs, targets, scale);
  EXPECT_EQ(test::max_abs_diff(probs, dlogits), 0.0);
}

TEST(CrossEntropy, TargetOutOfRangeIsDataError) {
  const int N = 4, V = 10;
  Tensor logits = test::randn({N, V}, 3, "logits");
  Tensor losses({N}), probs({N, V});
  for (int32_t bad : {-1, V}) {
    Tensor targets = make_targets(N, V, 0);
    targets.data_i32()[3] = bad;
    try {
      ops::cross_entropy_forward(losses, probs, logits, targets);
      ADD_FAILURE() << "no error for target " << bad;
    } catch (const DataError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("index 3"), std::string::npos) << msg;
      EXPECT_NE(msg.find("[0, 10)"), std::string::npos) << msg;
    }
    EXPECT_THROW(
        ops::cross_entropy_backward(probs, probs, targets, 1.0f), DataError);
  }
}

}  // namespace
}  // namespace ndt
