// The products' slowdown on fewer rows (train/product_rate.h), the
// planner's MachineCost::product_slowdown: 1 at and beyond the reference
// rows without measuring, never below 1, and what it times.
#include <gtest/gtest.h>

#include "base/error.h"
#include "ops/ops.h"
#include "train/product_rate.h"

namespace ndt {
namespace {

ModelConfig small_gpt() {
  ModelConfig m;
  m.kind = ModelKind::kGpt;
  m.dim = 32;
  m.heads = 2;
  m.mlp_dim = 64;
  m.seq_len = 16;
  return m;
}

TEST(ProductRate, SlowdownIsOneFromTheReferenceOnAndNeverBelow) {
  ProductSlowdown s(small_gpt(), 256);
  EXPECT_EQ(s(256), 1.0);
  EXPECT_EQ(s(4096), 1.0);
  const double few = s(4);
  EXPECT_GE(few, 1.0);
  EXPECT_EQ(s(4), few);  // measured once
}

// Every run is each linear layer's forward, input and weight gradient: 3
// products of 2 rows in out FLOPs.
TEST(ProductRate, TimesTheModelsLinearLayers) {
  const auto gemm_flops = [](const ModelConfig& m, int64_t rows) {
    const int64_t before = ops::gemm_flops_done();
    EXPECT_GT(measure_products_seconds(m, rows), 0);
    return ops::gemm_flops_done() - before;
  };
  ModelConfig mlp;
  mlp.kind = ModelKind::kMlp;
  mlp.image_size = 4;
  mlp.channels = 1;
  mlp.hidden = {8, 5};
  const int64_t runs = 1 + kProductRuns;
  EXPECT_EQ(gemm_flops(mlp, 3), runs * 3 * 2 * 3 * (16 * 8 + 8 * 5));
  // qkv, proj, fc1, fc2 of C = 32, F = 64.
  EXPECT_EQ(
      gemm_flops(small_gpt(), 3),
      runs * 3 * 2 * 3 * (32 * 96 + 32 * 32 + 32 * 64 + 64 * 32));
  EXPECT_THROW(measure_products_seconds(small_gpt(), 0), ConfigError);
}

}  // namespace
}  // namespace ndt
