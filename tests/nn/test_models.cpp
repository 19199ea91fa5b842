// Gradient tests for the loss heads and the three models end to end:
// d(scale * summed loss)/dparam from forward_backward against central
// differences of forward_eval, for every parameter tensor.
// Tolerance: |num - ana| <= 1e-3 + 2e-2 |num| (fp32, h = 1e-2); every
// tensor's largest gradient element must be >= 10 x that 1e-3, so that a
// gradient lost entirely could not pass on the absolute term.
#include <gtest/gtest.h>

#include <cmath>

#include "nn/model.h"
#include "test_util.h"

namespace ndt {
namespace {

using test::randn;

constexpr double kH = 1e-2, kAtol = 1e-3, kRtol = 2e-2;

Tensor labels(int64_t n, int classes, int salt) {
  Tensor t({n}, MemTag::kOther, DType::kI32);
  for (int64_t i = 0; i < n; ++i)
    t.data_i32()[i] = (i * 5 + salt) % classes;
  return t;
}

void check_model(
    Model& m, const Tensor& input, const Tensor& targets, double h = kH) {
  m.init(3);
  // Lift LayerNorm/bias parameters off their ones/zeros init.
  for (Parameter* p : m.parameters()) {
    if (p->init.kind == Init::kNormal)
      continue;
    Tensor n = randn(p->value.shape(), 4, p->name, 0.3f);
    for (int64_t i = 0; i < n.numel(); ++i)
      p->value.data()[i] += n.data()[i];
  }
  const float scale = 0.7f;
  m.zero_grad();
  Context ctx;
  LossStats stats;
  m.forward_backward(input, targets, ctx, scale, stats);
  EXPECT_EQ(stats.count, targets.numel());
  auto loss = [&]() {
    Context c;
    LossStats s;
    m.forward_eval(input, targets, c, s);
    return scale * s.loss_sum;
  };
  EXPECT_NEAR(loss(), scale * stats.loss_sum, 1e-4 * std::fabs(loss()));
  for (Parameter* p : m.parameters()) {
    Tensor g = p->grad.clone(MemTag::kOther);
    double largest = 0;
    for (int64_t i = 0; i < g.numel(); ++i)
      largest = std::max(largest, std::fabs(double(g.data()[i])));
    EXPECT_GE(largest, 10 * kAtol)
        << "gradient of " << p->name << " too small for this test's tolerance";
    double worst = test::grad_check(p->value, g, loss, h, kAtol, kRtol, 12);
    EXPECT_LE(worst, 1.0) << "gradient of " << p->name;
  }
}

TEST(ModelGrad, Mlp) {
  SerialBuilder b;
  MlpOptions o;
  o.inputs = 2 * 4 * 4;
  o.hidden = {16, 12};
  o.classes = 5;
  for (Act act : {Act::kGelu, Act::kRelu}) {
    o.act = act;
    auto m = build_mlp(o, b);
    EXPECT_EQ(m->parameters().size(), 6u);
    // ReLU: a small step keeps the differences off the kink.
    check_model(
        *m,
        randn({4, 2, 4, 4}, 1, "img"),
        labels(4, 5, 1),
        act == Act::kRelu ? 1e-3 : kH);
  }
}

TEST(ModelGrad, VitClassTokenAndMeanPool) {
  SerialBuilder b;
  for (HeadPool pool : {HeadPool::kCls, HeadPool::kMean}) {
    VitOptions o;
    o.image_size = 8;
    o.channels = 1;
    o.patch = 4;
    o.dim = 8;
    o.depth = 2;
    o.heads = 2;
    o.mlp_dim = 16;
    o.classes = 3;
    o.pool = pool;
    o.init_std = 0.2f;
    auto m = build_vit(o, b);
    check_model(*m, randn({3, 1, 8, 8}, 2, "img"), labels(3, 3, 2));
  }
}

TEST(ModelGrad, Gpt) {
  SerialBuilder b;
  GptOptions o;
  o.vocab = 7;
  o.seq_len = 5;
  o.dim = 8;
  o.depth = 2;
  o.heads = 2;
  o.mlp_dim = 16;
  o.init_std = 0.2f;
  auto m = build_gpt(o, b);
  Tensor ids({2, 5}, MemTag::kOther, DType::kI32);
  Tensor next({2, 5}, MemTag::kOther, DType::kI32);
  for (int i = 0; i < 10; ++i) {
    ids.data_i32()[i] = (i * 3 + 1) % 7;
    next.data_i32()[i] = (i * 3 + 4) % 7;
  }
  check_model(*m, ids, next);
}

TEST(ModelInit, DependsOnlyOnSeedAndName) {
  SerialBuilder b;
  VitOptions o;
  o.image_size = 8;
  o.patch = 4;
  o.dim = 8;
  o.depth = 2;
  o.heads = 2;
  o.mlp_dim = 16;
  auto a = build_vit(o, b);
  o.depth = 3;  // one more block must not change the others
  auto c = build_vit(o, b);
  a->init(42);
  c->init(42);
  auto pa = a->parameters();
  int matched = 0;
  for (Parameter* p : pa) {
    for (Parameter* q : c->parameters()) {
      if (q->name != p->name)
        continue;
      ++matched;
      EXPECT_EQ(test::max_abs_diff(p->value, q->value), 0.0) << p->name;
    }
  }
  EXPECT_EQ(matched, static_cast<int>(pa.size()));
  c->init(43);
  EXPECT_GT(test::max_abs_diff(pa[0]->value, c->parameters()[0]->value), 0.0);
}

}  // namespace
}  // namespace ndt
