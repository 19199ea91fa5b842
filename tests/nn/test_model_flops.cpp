// A model's flops_per_sample (the numerator of every MFU ndtrain prints)
// against the matmul work one forward + backward really does: 2 M N K of
// every ops::gemm call, counted by ops::gemm_flops_done(). Exact equality:
// both are sums of integers far below 2^53. Under activation
// recompute (parallel.recompute=block) the step does
// recompute_flops_per_sample more, the blocks' forward once again.
#include <gtest/gtest.h>

#include "nn/model.h"
#include "ops/ops.h"
#include "test_util.h"

namespace ndt {
namespace {

// GEMM FLOPs of one forward + backward over `input`.
int64_t step_gemm_flops(
    Model& m,
    const Tensor& input,
    const Tensor& targets,
    bool recompute = false) {
  m.init(1);
  m.zero_grad();
  Context ctx;
  ctx.run.training = true;
  LossStats stats;
  const int head = m.num_modules() - 1;
  const int64_t before = ops::gemm_flops_done();
  m.forward_range(0, head, input, targets, ctx, stats, recompute);
  m.backward_range(0, head, Tensor(), ctx, 1.0f);
  return ops::gemm_flops_done() - before;
}

// Both with and without recompute.
void expect_step_flops(
    Model& m, const Tensor& input, const Tensor& targets, int64_t B) {
  EXPECT_EQ(
      static_cast<double>(step_gemm_flops(m, input, targets)),
      m.flops_per_sample * B);
  EXPECT_GT(m.recompute_flops_per_sample, 0);
  EXPECT_EQ(
      static_cast<double>(step_gemm_flops(m, input, targets, true)),
      (m.flops_per_sample + m.recompute_flops_per_sample) * B);
}

TEST(ModelFlops, MlpCountsNoInputGradientForTheFirstLayer) {
  SerialBuilder b;
  MlpOptions o;
  o.inputs = 3 * 4 * 4;
  o.hidden = {24, 20};
  o.classes = 7;
  auto m = build_mlp(o, b);
  const int64_t B = 5;
  expect_step_flops(
      *m,
      test::randn({B, 3, 4, 4}, 1, "img"),
      test::int_tensor({B}, 7, 1, 0),
      B);
}

TEST(ModelFlops, VitWithClassTokenAndWithMeanPool) {
  SerialBuilder b;
  for (HeadPool pool : {HeadPool::kCls, HeadPool::kMean}) {
    VitOptions o;
    o.image_size = 8;
    o.channels = 3;
    o.patch = 2;
    o.dim = 12;
    o.depth = 2;
    o.heads = 3;
    o.mlp_dim = 20;
    o.classes = 4;
    o.pool = pool;
    auto m = build_vit(o, b);
    const int64_t B = 3;
    SCOPED_TRACE(static_cast<int>(pool));
    expect_step_flops(
        *m,
        test::randn({B, 3, 8, 8}, 2, "img"),
        test::int_tensor({B}, 4, 1, 0),
        B);
  }
}

TEST(ModelFlops, GptCountsTheCausalScoresItsKernelComputes) {
  SerialBuilder b;
  GptOptions o;
  o.vocab = 11;
  o.seq_len = 130;  // query blocks of 64, 64 and 2
  o.dim = 16;
  o.depth = 2;
  o.heads = 2;
  o.mlp_dim = 24;
  auto m = build_gpt(o, b);
  const int64_t B = 2;
  expect_step_flops(
      *m,
      test::int_tensor({B, o.seq_len}, o.vocab, 3, 1),
      test::int_tensor({B, o.seq_len}, o.vocab, 5, 2),
      B);
}

}  // namespace
}  // namespace ndt
