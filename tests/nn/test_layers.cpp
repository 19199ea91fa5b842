// Finite-difference gradient tests for every nn layer: input gradient and
// every parameter gradient, in fp32 with central differences (h = 1e-2).
// Tolerance: |num - ana| <= 2e-3 + 2e-2 |num| unless stated.
#include <gtest/gtest.h>

#include <algorithm>

#include "module_grad.h"
#include "nn/attention_core.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/layernorm.h"
#include "nn/linear.h"
#include "nn/transformer_block.h"
#include "ops/ops.h"

namespace ndt {
namespace {

using test::check_module_grads;
using test::randn;

constexpr double kH = 1e-2, kAtol = 2e-3, kRtol = 2e-2;

void init_all(Module& m, uint64_t seed) {
  for (Parameter* p : m.parameters()) {
    init_parameter(*p, seed);
    // Non-trivial LayerNorm/bias values so their grads are exercised.
    if (p->init.kind != Init::kNormal) {
      Tensor n = randn(p->value.shape(), seed, p->name + ".perturb", 0.5f);
      for (int64_t i = 0; i < n.numel(); ++i) p->value.data()[i] += n.data()[i];
    }
  }
}

TEST(LayerGrad, LinearEachActivation) {
  for (Act act : {Act::kNone, Act::kGelu, Act::kRelu}) {
    SCOPED_TRACE(static_cast<int>(act));
    Linear m("fc", 12, 7, true, act, 0.3f);
    init_all(m, 1);
    // ReLU is piecewise linear: a small step keeps the differences off its
    // kink (h = 1e-2 moves pre-activations across zero).
    double h = act == Act::kRelu ? 1e-3 : kH;
    check_module_grads(m, randn({3, 4, 12}, 2, "x"), {}, h, kAtol, kRtol, 60);
  }
  Linear nobias("fc", 12, 7, false, Act::kNone, 0.3f);
  init_all(nobias, 3);
  EXPECT_EQ(nobias.parameters().size(), 1u);
  check_module_grads(nobias, randn({5, 12}, 4, "x"), {}, kH, kAtol, kRtol, 60);
}

TEST(LayerGrad, LinearSkipsInputGradWhenNotNeeded) {
  Linear m("fc", 6, 4, true, Act::kNone, 0.3f);
  init_all(m, 1);
  Context ctx;
  ctx.need_input_grad = false;
  Tensor y = m.forward(randn({2, 6}, 1, "x"), ctx);
  EXPECT_FALSE(m.backward(y, ctx).defined());
}

TEST(LayerGrad, LayerNorm) {
  LayerNorm m("ln", 16);
  init_all(m, 5);
  check_module_grads(m, randn({2, 3, 16}, 6, "x"), {}, kH, kAtol, kRtol, 60);
}

TEST(LayerGrad, AttentionCoreCausalAndFull) {
  for (bool causal : {false, true}) {
    AttentionCore m(2, causal);
    check_module_grads(m, randn({2, 5, 3 * 8}, 7, "qkv"), {}, kH, kAtol,
                       kRtol, 80);
  }
}

TEST(LayerGrad, DropoutSameMaskInBackward) {
  Dropout m("drop", 0.3f);
  RunState run;
  run.seed = 4;
  run.step = 11;
  check_module_grads(m, randn({4, 32}, 8, "x"), run, kH, kAtol, kRtol, 128);
  // Different steps draw different masks; eval is the identity.
  Context a, b, e;
  a.run = run;
  b.run = run;
  b.run.step = 12;
  e.run = run;
  e.run.training = false;
  Tensor x = randn({4, 32}, 8, "x");
  EXPECT_GT(test::max_abs_diff(m.forward(x, a), m.forward(x, b)), 0.0);
  EXPECT_EQ(test::max_abs_diff(m.forward(x, e), x), 0.0);
}

// exact: a batch split in two with sample offsets draws the whole batch's
// mask, as a data-parallel rank must.
TEST(LayerGrad, DropoutMaskIndependentOfBatchSplit) {
  Dropout m("drop", 0.5f);
  Tensor x = randn({6, 10}, 3, "x");
  Context whole;
  whole.run.seed = 2;
  whole.run.step = 5;
  Tensor y = m.forward(x, whole);
  for (int64_t first : {0, 2, 5}) {
    int64_t n = first == 5 ? 1 : 2;
    Tensor part({n, 10}, MemTag::kOther);
    std::copy(x.data() + first * 10, x.data() + (first + n) * 10, part.data());
    Context c;
    c.run = whole.run;
    c.run.sample_offset = first;
    Tensor yp = m.forward(part, c);
    for (int64_t i = 0; i < n * 10; ++i) {
      EXPECT_EQ(yp.data()[i], y.data()[first * 10 + i]);
    }
  }
}

TEST(LayerGrad, TransformerBlock) {
  SerialBuilder builder;
  for (bool causal : {false, true}) {
    TransformerBlockOptions o;
    o.name = "blocks.0";
    o.dim = 8;
    o.heads = 2;
    o.mlp_dim = 16;
    o.causal = causal;
    o.init_std = 0.3f;
    o.proj_init_std = 0.3f;
    TransformerBlock m(o, builder);
    init_all(m, 9);
    EXPECT_EQ(m.parameters().size(), 12u);
    check_module_grads(m, randn({2, 4, 8}, 10, "x"), {}, kH, kAtol, kRtol, 40);
  }
}

TEST(LayerGrad, TokenEmbedding) {
  TokenEmbedding m("embed", 11, 6, 8, 0.5f);
  init_all(m, 11);
  Tensor ids({2, 6}, MemTag::kOther, DType::kI32);
  for (int i = 0; i < 12; ++i) ids.data_i32()[i] = (i * 7 + 3) % 11;
  check_module_grads(m, ids, {}, kH, kAtol, kRtol, -1, false);
}

TEST(LayerGrad, PatchEmbeddingWithAndWithoutClassToken) {
  for (bool cls : {true, false}) {
    PatchEmbeddingOptions o;
    o.image_size = 8;
    o.channels = 2;
    o.patch = 4;
    o.dim = 6;
    o.cls_token = cls;
    o.init_std = 0.5f;
    PatchEmbedding m(o);
    init_all(m, 12);
    EXPECT_EQ(m.tokens(), cls ? 5 : 4);
    check_module_grads(m, randn({2, 2, 8, 8}, 13, "img"), {}, kH, kAtol,
                       kRtol, 60, false);
  }
}

}  // namespace
}  // namespace ndt
