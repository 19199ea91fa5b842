// LayerNorm and residual + LayerNorm: forward and all gradients against the
// PyTorch fixture, finite differences for dx, dw, db (serial and threaded
// sizes), the += contract and run-to-run determinism.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/ops.h"
#include "test_util.h"

namespace ndt {
namespace {

constexpr float kEps = 1e-5f;

TEST(LayerNorm, MatchesPyTorchFixture) {
  auto f =
      test::read_fixture(test::source_path("tests/fixtures/layernorm.txt"));
  for (const char* key :
       {"eps", "x", "w", "b", "dy", "y", "mean", "rstd", "dx", "dw", "db"}) {
    ASSERT_TRUE(f.count(key)) << key;
  }
  const Tensor& x = f["x"];
  const int64_t C = x.dim(-1), N = x.numel() / C;
  Tensor y(x.shape()), mean({N}), rstd({N}), dx(x.shape());
  ops::layernorm_forward(y, mean, rstd, x, f["w"], f["b"], f["eps"].data()[0]);
  Tensor dw = Tensor::zeros({C}), db = Tensor::zeros({C});
  dx.fill_(NAN);
  ops::layernorm_backward(dx, dw, db, f["dy"], x, f["w"], mean, rstd);
  // fp32 against float64 torch on O(1) values; atol for entries near 0.
  EXPECT_LE(test::close_ratio(y, f["y"], 1e-6, 1e-5), 1.0);
  EXPECT_LE(test::close_ratio(mean, f["mean"], 1e-6, 1e-5), 1.0);
  EXPECT_LE(test::close_ratio(rstd, f["rstd"], 1e-6, 1e-5), 1.0);
  EXPECT_LE(test::close_ratio(dx, f["dx"], 1e-6, 1e-5), 1.0);
  EXPECT_LE(test::close_ratio(dw, f["dw"], 1e-6, 1e-5), 1.0);
  EXPECT_LE(test::close_ratio(db, f["db"], 1e-6, 1e-5), 1.0);
}

void check_layernorm_grads(int N, int C, int samples) {
  SCOPED_TRACE(testing::Message() << "N=" << N << " C=" << C);
  Tensor x = test::randn({N, C}, 1, "x", 1.5f);
  Tensor w = test::randn({C}, 1, "w");
  Tensor b = test::randn({C}, 1, "b");
  Tensor r = test::randn({N, C}, 1, "r");
  Tensor y({N, C}), mean({N}), rstd({N});
  auto loss = [&] {
    ops::layernorm_forward(y, mean, rstd, x, w, b, kEps);
    return test::dot(y, r);
  };
  loss();
  Tensor dx({N, C}), dw = Tensor::zeros({C}), db = Tensor::zeros({C});
  ops::layernorm_backward(dx, dw, db, r, x, w, mean, rstd);
  // h = 1e-2 on inputs of size ~1: truncation ~1e-5 relative; fp32
  // rounding of the C outputs that move adds ~1e-5. atol 1e-3, rtol 1e-2.
  EXPECT_LE(test::grad_check(x, dx, loss, 1e-2, 1e-3, 1e-2, samples), 1.0);
  EXPECT_LE(test::grad_check(w, dw, loss, 1e-2, 1e-3, 1e-2, samples), 1.0);
  EXPECT_LE(test::grad_check(b, db, loss, 1e-2, 1e-3, 1e-2, samples), 1.0);
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  check_layernorm_grads(3, 10, -1);
  check_layernorm_grads(200, 100, 60);  // threaded: per-thread partials
}

TEST(LayerNorm, ParamGradsAccumulateDxAssignedAndDeterministic) {
  const int N = 300, C = 96;  // above the parallel threshold
  Tensor x = test::randn({N, C}, 2, "x");
  Tensor w = test::randn({C}, 2, "w");
  Tensor b = test::randn({C}, 2, "b");
  Tensor dy = test::randn({N, C}, 2, "dy");
  Tensor y({N, C}), mean({N}), rstd({N});
  ops::layernorm_forward(y, mean, rstd, x, w, b, kEps);
  Tensor dx1({N, C}), dx2({N, C});
  Tensor dw = Tensor::zeros({C}), db = Tensor::zeros({C});
  ops::layernorm_backward(dx1, dw, db, dy, x, w, mean, rstd);
  Tensor dw1 = dw.clone(MemTag::kOther), db1 = db.clone(MemTag::kOther);
  dx2.fill_(NAN);
  ops::layernorm_backward(dx2, dw, db, dy, x, w, mean, rstd);
  // Same thread count, same partition: bitwise equal, and 0 + s + s = 2s.
  EXPECT_EQ(test::max_abs_diff(dx1, dx2), 0.0);
  for (int c = 0; c < C; ++c) {
    EXPECT_EQ(dw.data()[c], 2 * dw1.data()[c]);
    EXPECT_EQ(db.data()[c], 2 * db1.data()[c]);
  }
  // Only some outputs requested.
  Tensor none, dw_only = Tensor::zeros({C});
  ops::layernorm_backward(none, dw_only, none, dy, x, w, mean, rstd);
  EXPECT_EQ(test::max_abs_diff(dw_only, dw1), 0.0);
}

TEST(LayerNorm, ResidualFusedEqualsAddThenLayerNorm) {
  const int N = 200, C = 100;
  Tensor a = test::randn({N, C}, 3, "a");
  Tensor r = test::randn({N, C}, 3, "r");
  Tensor w = test::randn({C}, 3, "w");
  Tensor b = test::randn({C}, 3, "b");
  Tensor sum({N, C}), y({N, C}), mean({N}), rstd({N});
  ops::residual_layernorm_forward(sum, y, mean, rstd, a, r, w, b, kEps);
  Tensor sum2({N, C}), y2({N, C}), mean2({N}), rstd2({N});
  ops::add(sum2, a, r);
  ops::layernorm_forward(y2, mean2, rstd2, sum2, w, b, kEps);
  EXPECT_EQ(test::max_abs_diff(sum, sum2), 0.0);  // one fp32 add each
  // Same arithmetic in a different loop: allow FMA-contraction differences.
  EXPECT_LE(test::close_ratio(y, y2, 1e-6, 1e-6), 1.0);
  EXPECT_LE(test::close_ratio(mean, mean2, 1e-7, 1e-6), 1.0);
  EXPECT_LE(test::close_ratio(rstd, rstd2, 1e-7, 1e-6), 1.0);
}

}  // namespace
}  // namespace ndt
