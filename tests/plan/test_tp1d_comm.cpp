// The plan's per-layer 1D tensor-parallel volumes (plan/tp1d_comm.h)
// against the ledger: each layer built by Tp1dBuilder, alone, runs one
// forward and one backward on run_local(tp) threads; the tp group's
// CommLedger after each pass must equal the prediction exactly (calls,
// elements and bytes per OpType) on every rank, at tp 2 and 4, with and
// without token split. exact: counts, not values.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/local_process_group.h"
#include "nn/transformer_block.h"
#include "parallel/tp1d_builder.h"
#include "plan/tp1d_comm.h"
#include "test_util.h"

namespace ndt {
namespace {

using test::int_tensor;
using test::randn;

// Small shapes; N = B T = 16 tokens split over tp = 2 and 4.
constexpr int kB = 2, kT = 8, kC = 16, kF = 32, kHeads = 4, kV = 32;
constexpr int64_t kN = kB * kT;
constexpr uint64_t kSeed = 3;

// ViT head and embedding: 8x8 images, patch 4 -> 4 patches + class token.
constexpr int kImage = 8, kPatch = 4, kClasses = 4;
constexpr int kVitT = 5;

struct Passes {
  CommVolume fwd, bwd;
};

// A chain of modules run as one (fc1 -> fc2, qkv -> core -> proj).
class Chain final : public Module {
 public:
  explicit Chain(std::vector<std::unique_ptr<Module>> mods)
      : mods_(std::move(mods)) {}
  Tensor forward(const Tensor& x, Context& ctx) override {
    Tensor a = x;
    for (size_t i = 0; i < mods_.size(); ++i)
      a = mods_[i]->forward(a, ctx.child(i));
    return a;
  }
  Tensor backward(const Tensor& dy, Context& ctx) override {
    Tensor g = dy;
    for (size_t i = mods_.size(); i-- > 0;)
      g = mods_[i]->backward(g, ctx.child(i));
    return g;
  }
  void collect_parameters(std::vector<Parameter*>& out) override {
    for (auto& m : mods_)
      m->collect_parameters(out);
  }

 private:
  std::vector<std::unique_ptr<Module>> mods_;
};

// The input a module gets in the mode: [B, T, width] replicated, or my
// tokens [N/tp, width].
Tensor module_input(bool split, int64_t width, const ProcessGroup& tp) {
  Tensor full = randn({kB, kT, width}, kSeed, "x");
  if (!split)
    return full;
  const int64_t n = kN / tp.size();
  Tensor mine({n, width}, MemTag::kActs);
  mine.copy_(full.slice(tp.rank() * n * width, {n, width}));
  return mine;
}

Passes measure(Module& m, const Tensor& x, ProcessGroup& tp) {
  for (Parameter* p : m.parameters())
    init_parameter(*p, kSeed);
  Context ctx;
  ctx.run.training = true;
  ctx.run.seed = kSeed;
  tp.reset_comm_ledger();
  Tensor y = m.forward(x, ctx);
  Passes out;
  out.fwd = from_ledger(tp.comm_ledger());
  tp.reset_comm_ledger();
  m.backward(randn(y.shape(), kSeed, "dy"), ctx);
  out.bwd = from_ledger(tp.comm_ledger());
  return out;
}

Passes measure_head(
    LossHead& head, const Tensor& x, const Tensor& t, ProcessGroup& tp) {
  std::vector<Parameter*> ps;
  head.collect_parameters(ps);
  for (Parameter* p : ps)
    init_parameter(*p, kSeed);
  Context ctx;
  ctx.run.training = true;
  LossStats stats;
  tp.reset_comm_ledger();
  head.forward(x, t, ctx, stats);
  Passes out;
  out.fwd = from_ledger(tp.comm_ledger());
  tp.reset_comm_ledger();
  head.backward(ctx, 1.0f / float(stats.count));
  out.bwd = from_ledger(tp.comm_ledger());
  return out;
}

std::unique_ptr<Module> fc1(Builder& b) {
  return b.linear("fc1", kC, kF, true, Act::kGelu, LinearRole::kFirst, 0.02f);
}
std::unique_ptr<Module> fc2(Builder& b) {
  return b.linear("fc2", kF, kC, true, Act::kNone, LinearRole::kSecond, 0.02f);
}

// Runs `layer` (measured on each rank) and compares with `want`.
void check_case(
    const std::string& name,
    int tp,
    bool split,
    const PassVolume& want,
    const std::function<Passes(Tp1dBuilder&, ProcessGroup&)>& layer) {
  SCOPED_TRACE(name + " tp=" + std::to_string(tp) + (split ? " split" : ""));
  std::vector<Passes> got(tp);
  run_local(tp, [&](ProcessGroup& pg) {
    Tp1dBuilder b(pg, split, kT);
    got[pg.rank()] = layer(b, pg);
  });
  // Every case communicates in at least one pass: a prediction of nothing
  // would hide a layer that was never run.
  EXPECT_GT(want.fwd.total_calls() + want.bwd.total_calls(), 0);
  for (int r = 0; r < tp; ++r) {
    EXPECT_EQ(got[r].fwd, want.fwd)
        << "rank " << r << " forward: measured " << to_string(got[r].fwd)
        << ", plan " << to_string(want.fwd);
    EXPECT_EQ(got[r].bwd, want.bwd)
        << "rank " << r << " backward: measured " << to_string(got[r].bwd)
        << ", plan " << to_string(want.bwd);
  }
}

class Tp1dComm : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(Tp1dComm, EachLayerMatchesLedger) {
  const auto [tp, split] = GetParam();
  const Tp1dLayout l{tp, split};

  check_case(
      "column",
      tp,
      split,
      column_linear_comm(l, kN, kC),
      [&](auto& b, auto& pg) {
        auto m = fc1(b);
        return measure(*m, module_input(split, kC, pg), pg);
      });
  // Its input is a column layer's output, [B, T, F/tp] in both modes.
  check_case(
      "row",
      tp,
      split,
      row_linear_comm(l, kN, kC, true),
      [&](auto& b, auto& pg) {
        auto m = fc2(b);
        return measure(*m, randn({kB, kT, kF / tp}, kSeed, "h"), pg);
      });
  check_case("mlp", tp, split, mlp_comm(l, kN, kC), [&](auto& b, auto& pg) {
    std::vector<std::unique_ptr<Module>> mods;
    mods.push_back(fc1(b));
    mods.push_back(fc2(b));
    Chain m(std::move(mods));
    return measure(m, module_input(split, kC, pg), pg);
  });
  check_case(
      "attention",
      tp,
      split,
      attention_comm(l, kN, kC),
      [&](auto& b, auto& pg) {
        std::vector<std::unique_ptr<Module>> mods;
        mods.push_back(b.linear(
            "qkv", kC, 3 * kC, true, Act::kNone, LinearRole::kFirstQkv, 0.02f));
        mods.push_back(b.attention_core(kHeads, true));
        mods.push_back(b.linear(
            "proj", kC, kC, true, Act::kNone, LinearRole::kSecond, 0.02f));
        Chain m(std::move(mods));
        return measure(m, module_input(split, kC, pg), pg);
      });
  check_case(
      "layernorm",
      tp,
      split,
      layernorm_comm(l, kC) + column_linear_comm(l, kN, kC),
      [&](auto& b, auto& pg) {
        // LayerNorm alone communicates only with split, so it runs in front
        // of a column layer (whose volume is checked above).
        std::vector<std::unique_ptr<Module>> mods;
        mods.push_back(b.layernorm("ln", kC));
        mods.push_back(fc1(b));
        Chain m(std::move(mods));
        return measure(m, module_input(split, kC, pg), pg);
      });
  check_case(
      "block",
      tp,
      split,
      transformer_block_comm(l, kN, kC),
      [&](auto& b, auto& pg) {
        TransformerBlockOptions o;
        o.name = "blocks.0";
        o.dim = kC;
        o.heads = kHeads;
        o.mlp_dim = kF;
        o.causal = true;
        o.dropout = 0.1f;
        TransformerBlock m(o, b);
        return measure(m, module_input(split, kC, pg), pg);
      });
  check_case(
      "embedding",
      tp,
      split,
      vocab_embedding_comm(l, kN, kC),
      [&](auto& b, auto& pg) {
        auto m = b.token_embedding("embed", kV, kT, kC, 0.02f);
        return measure(*m, int_tensor({kB, kT}, kV, 7, 1), pg);
      });
  check_case(
      "lm_head",
      tp,
      split,
      vocab_lm_head_comm(l, kN, kC),
      [&](auto& b, auto& pg) {
        LmHeadOptions o;
        o.dim = kC;
        o.vocab = kV;
        auto head = b.lm_head(o);
        return measure_head(
            *head,
            module_input(split, kC, pg),
            int_tensor({kB, kT}, kV, 5, 2),
            pg);
      });
}

// ViT's input layer and head: replicated, they communicate only with
// token split (the embedding's output is cut to my tokens, the head
// gathers them); without it the plan and the ledger must both be empty.
TEST_P(Tp1dComm, VitEmbeddingAndHeadMatchLedger) {
  const auto [tp, split] = GetParam();
  const Tp1dLayout l{tp, split};
  // N = B x 5 tokens must split over tp: 4 images.
  constexpr int kImages = 4;
  const int64_t N = int64_t{kImages} * kVitT;
  std::vector<Passes> embed(tp), head(tp);
  run_local(tp, [&](ProcessGroup& pg) {
    Tp1dBuilder b(pg, split, kVitT);
    PatchEmbeddingOptions pe;
    pe.image_size = kImage;
    pe.patch = kPatch;
    pe.dim = kC;
    auto e = b.patch_embedding(pe);
    embed[pg.rank()] =
        measure(*e, randn({kImages, 1, kImage, kImage}, kSeed, "images"), pg);
    ClassifierHeadOptions h;
    h.dim = kC;
    h.classes = kClasses;
    h.pool = HeadPool::kCls;
    auto c = b.classifier_head(h);
    // Replicated: all tokens [B, T, C]; split: my tokens [N/tp, C].
    const Tensor x =
        split ? randn({N / tp, kC}, kSeed, "x" + std::to_string(pg.rank()))
              : randn({kImages, kVitT, kC}, kSeed, "x");
    head[pg.rank()] =
        measure_head(*c, x, int_tensor({kImages}, kClasses, 1, 0), pg);
  });
  const PassVolume want_embed = patch_embedding_comm(l, N, kC);
  const PassVolume want_head = classifier_head_comm(l, N, kC);
  for (int r = 0; r < tp; ++r) {
    EXPECT_EQ(embed[r].fwd, want_embed.fwd) << to_string(embed[r].fwd);
    EXPECT_EQ(embed[r].bwd, want_embed.bwd) << to_string(embed[r].bwd);
    EXPECT_EQ(head[r].fwd, want_head.fwd) << to_string(head[r].fwd);
    EXPECT_EQ(head[r].bwd, want_head.bwd) << to_string(head[r].bwd);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts,
    Tp1dComm,
    ::testing::Combine(::testing::Values(2, 4), ::testing::Bool()),
    [](const auto& info) {
      return "tp" + std::to_string(std::get<0>(info.param)) +
             (std::get<1>(info.param) ? "_split" : "_replicated");
    });

// With tp = 1 there is no group: every layer predicts nothing.
TEST(Tp1dCommPure, NoGroupNoVolume) {
  const Tp1dLayout l{1, true};
  EXPECT_EQ(transformer_block_comm(l, kN, kC), PassVolume{});
  EXPECT_EQ(vocab_lm_head_comm(l, kN, kC), PassVolume{});
  EXPECT_EQ(vocab_embedding_comm(l, kN, kC), PassVolume{});
}

}  // namespace
}  // namespace ndt
