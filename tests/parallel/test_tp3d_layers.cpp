// Every layer of 3D tensor parallelism against its serial oracle, master-
// vs-shard (CONVENTIONS.md 5), on a p x p x p cube of threads (run_local,
// mesh axes tp_out x tp_in x tp_wt as the 3d mode lays them out), p = 2:
// Linear3d from side A and from side B (with and without bias, GELU, the
// fused q/k/v blocks), LayerNorm3d, dropout, the token and patch
// embeddings, a whole transformer block (causal and not), the classifier
// head (class token and mean pooling) and the LM head. Each rank feeds its
// block of the global input (tp3d_cube.h: side A = samples block wt p +
// in of p^2, features block out; side B = samples block wt p + out,
// features block in) and of the output gradient, and compares its block of
// the output, the input gradient and every parameter gradient
// (Layout::take_local of the serial tensor); the heads' loss statistics
// summed over tp_wt x tp_in equal the serial ones on every tp_out.
//
// Tolerances, max |a - b| / max |b| per tensor:
//   0     parameter values after init and dropout (the same numbers, no
//         arithmetic reordered), the embeddings' outputs
//   1e-5  everything else (sums over p or p^2 blocks replace serial sums)
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "comm/local_process_group.h"
#include "comm/mesh.h"
#include "nn/builder.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/head.h"
#include "nn/layernorm.h"
#include "nn/linear.h"
#include "nn/transformer_block.h"
#include "ops/ops.h"
#include "parallel/tp3d_builder.h"
#include "parallel/tp3d_cube.h"
#include "parallel/tp3d_linear.h"
#include "parallel/tp3d_lm_head.h"
#include "parallel/tp3d_norm.h"
#include "param_pairs.h"
#include "test_util.h"

namespace ndt {
namespace {

using test::randn;
using test::rel_diff;

constexpr double kTol = 1e-5;
constexpr uint64_t kSeed = 13;
constexpr int kP = 2;

struct Check {
  std::string what;
  double diff;
  double tol;
};

// My place in the cube.
struct CubeRank {
  int p, wt, in, out;
  explicit CubeRank(const Mesh& mesh)
      : p(mesh.size(kTp3dWt)),
        wt(mesh.coord(kTp3dWt)),
        in(mesh.coord(kTp3dIn)),
        out(mesh.coord(kTp3dOut)) {}
  int sample_block(CubeSide side) const {
    return wt * p + (side.gather == kSideA.gather ? in : out);
  }
  int feature_block(CubeSide side) const {
    return side.features == kSideA.features ? out : in;
  }
  // My block of an activation [B, .., C] on `side`.
  Tensor block(const Tensor& t, CubeSide side) const {
    return test::grid_block(
        t, p * p, sample_block(side), p, feature_block(side));
  }
  // My side-A samples of t (ids, images, targets).
  Tensor samples(const Tensor& t) const {
    const int64_t b = t.dim(0) / (p * p);
    return t.rows(sample_block(kSideA) * b, b);
  }
};

void on_cube(
    const std::string& label,
    const std::function<void(Mesh&, std::vector<Check>&)>& body) {
  const int n = kP * kP * kP;
  std::vector<std::vector<Check>> got(n);
  run_local(n, [&](ProcessGroup& pg) {
    Mesh mesh(pg, {kP, kP, kP}, {kTp3dOut, kTp3dIn, kTp3dWt});
    body(mesh, got[pg.rank()]);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_GT(got[r].size(), 1u) << label << " rank " << r << " checked none";
    for (const Check& c : got[r]) {
      EXPECT_LE(c.diff, c.tol) << label << " rank " << r << ": " << c.what;
    }
  }
}

// Inits both modules' parameters alike (param_pairs.h) and records that
// my blocks hold the serial values.
void init_pair(
    const std::vector<Parameter*>& ps,
    const std::vector<Parameter*>& pp,
    std::vector<Check>& out) {
  for (const auto& [what, diff] : test::init_pair(ps, pp, kSeed))
    out.push_back({what, diff, 0});
}

void check_grads(
    const std::vector<Parameter*>& ps,
    const std::vector<Parameter*>& pp,
    std::vector<Check>& out) {
  for (size_t k = 0; k < ps.size() && k < pp.size(); ++k) {
    out.push_back(
        {pp[k]->name + " grad",
         rel_diff(pp[k]->grad, pp[k]->layout.take_local(ps[k]->grad)),
         kTol});
  }
}

// A module from `side` to `out_side` on x [B, T, in] against its serial
// form, with two micro-batches accumulating into the gradients.
void check_module(
    const std::string& label,
    CubeSide side,
    CubeSide out_side,
    Shape x_shape,
    int out_features,
    const std::function<std::unique_ptr<Module>()>& make_serial,
    const std::function<std::unique_ptr<Module>(Mesh&)>& make_par) {
  on_cube(label, [&](Mesh& mesh, std::vector<Check>& out) {
    const CubeRank me(mesh);
    auto serial = make_serial();
    auto par = make_par(mesh);
    const std::vector<Parameter*> ps = serial->parameters();
    const std::vector<Parameter*> pp = par->parameters();
    init_pair(ps, pp, out);
    Shape y_shape = x_shape;
    y_shape.back() = out_features;
    for (const std::string mb : {"0", "1"}) {
      const Tensor x = randn(x_shape, kSeed, "x" + mb);
      const Tensor dy = randn(y_shape, kSeed, "dy" + mb);
      Context cs, cp;
      const Tensor ys = serial->forward(x, cs);
      const Tensor yp = par->forward(me.block(x, side), cp);
      out.push_back({"y" + mb, rel_diff(yp, me.block(ys, out_side)), kTol});
      const Tensor dxs = serial->backward(dy, cs);
      const Tensor dxp = par->backward(me.block(dy, out_side), cp);
      out.push_back({"dx" + mb, rel_diff(dxp, me.block(dxs, side)), kTol});
    }
    check_grads(ps, pp, out);
  });
}

// The fused q/k/v form (blocks = 3, output features blocked by part) is
// checked inside the transformer block below.
struct LinearCase {
  CubeSide side;
  bool bias;
  Act act;
};

TEST(Linear3d, MatchesSerialFromEitherSide) {
  const int B = 8, T = 3, IC = 12, OC = 24;
  const LinearCase cases[] = {
      {kSideA, false, Act::kNone},
      {kSideA, true, Act::kGelu},
      {kSideB, true, Act::kNone},
      {kSideB, false, Act::kNone},
  };
  for (const LinearCase& c : cases) {
    const std::string label = std::string("linear from side ") +
                              (c.side.features == kSideA.features ? "A" : "B") +
                              " bias=" + std::to_string(c.bias) +
                              " gelu=" + std::to_string(c.act == Act::kGelu);
    check_module(
        label,
        c.side,
        other_side(c.side),
        {B, T, IC},
        OC,
        [&] {
          return std::make_unique<Linear>("l", IC, OC, c.bias, c.act, 0.3f);
        },
        [&](Mesh& mesh) {
          return std::make_unique<Linear3d>(
              "l", IC, OC, c.bias, c.act, 0.3f, mesh, c.side);
        });
  }
}

TEST(LayerNorm3d, MatchesSerial) {
  const int C = 12;
  check_module(
      "layernorm",
      kSideA,
      kSideA,
      {8, 3, C},
      C,
      [&] { return std::make_unique<LayerNorm>("ln", C); },
      [&](Mesh& mesh) { return std::make_unique<LayerNorm3d>("ln", C, mesh); });
}

TEST(Dropout3d, DrawsTheSerialMaskOnMyBlock) {
  on_cube("dropout", [](Mesh& mesh, std::vector<Check>& out) {
    const CubeRank me(mesh);
    const int B = 8, T = 5, C = 6;
    const Tensor x = randn({B, T, C}, kSeed, "x");
    const Tensor dy = randn({B, T, C}, kSeed, "dy");
    SerialBuilder sb;
    Tp3dBuilder pb(mesh);
    auto serial = sb.dropout("blocks.0.mlp.drop", 0.3f);
    auto par = pb.dropout("blocks.0.mlp.drop", 0.3f);
    Context cs, cp;
    cs.run.seed = cp.run.seed = kSeed;
    cs.run.step = cp.run.step = 4;
    cs.run.sample_offset = 8;  // the micro-batch's first global sample
    cp.run.sample_offset = 8 + me.sample_block(kSideA) * (B / 4);  // mine
    const Tensor ys = serial->forward(x, cs);
    const Tensor yp = par->forward(me.block(x, kSideA), cp);
    out.push_back({"y", rel_diff(yp, me.block(ys, kSideA)), 0});
    const Tensor dxs = serial->backward(dy, cs);
    const Tensor dxp = par->backward(me.block(dy, kSideA), cp);
    out.push_back({"dx", rel_diff(dxp, me.block(dxs, kSideA)), 0});
  });
}

// Two micro-batches accumulate into the table gradients.
TEST(TokenEmbedding3d, MatchesSerial) {
  on_cube("token embedding", [](Mesh& mesh, std::vector<Check>& out) {
    const CubeRank me(mesh);
    const int B = 8, T = 5, Tmax = 7, V = 11, C = 6;
    SerialBuilder sb;
    Tp3dBuilder pb(mesh);
    auto serial = sb.token_embedding("embed", V, Tmax, C, 0.2f);
    auto par = pb.token_embedding("embed", V, Tmax, C, 0.2f);
    const std::vector<Parameter*> ps = serial->parameters();
    const std::vector<Parameter*> pp = par->parameters();
    init_pair(ps, pp, out);
    for (const std::string mb : {"0", "1"}) {
      const Tensor ids = test::int_tensor({B, T}, V, mb == "0" ? 3 : 5, 1);
      const Tensor dy = randn({B, T, C}, kSeed, "dy" + mb);
      Context cs, cp;
      const Tensor ys = serial->forward(ids, cs);
      const Tensor yp = par->forward(me.samples(ids), cp);
      out.push_back({"y" + mb, rel_diff(yp, me.block(ys, kSideA)), 0});
      serial->backward(dy, cs);
      par->backward(me.block(dy, kSideA), cp);
    }
    check_grads(ps, pp, out);
  });
}

TEST(PatchEmbedding3d, MatchesSerialWithAndWithoutClassToken) {
  for (bool cls : {true, false}) {
    on_cube("patch embedding", [&](Mesh& mesh, std::vector<Check>& out) {
      const CubeRank me(mesh);
      PatchEmbeddingOptions o;
      o.image_size = 8;
      o.channels = 2;
      o.patch = 4;
      o.dim = 8;
      o.cls_token = cls;
      o.init_std = 0.2f;
      const int B = 8;
      SerialBuilder sb;
      Tp3dBuilder pb(mesh);
      auto serial = sb.patch_embedding(o);
      auto par = pb.patch_embedding(o);
      const std::vector<Parameter*> ps = serial->parameters();
      const std::vector<Parameter*> pp = par->parameters();
      init_pair(ps, pp, out);
      const Tensor images = randn({B, 2, 8, 8}, kSeed, "images");
      PatchEmbedding shape_of(o);
      const Tensor dy = randn({B, shape_of.tokens(), o.dim}, kSeed, "dy");
      Context cs, cp;
      const Tensor ys = serial->forward(images, cs);
      const Tensor yp = par->forward(me.samples(images), cp);
      out.push_back({"y", rel_diff(yp, me.block(ys, kSideA)), kTol});
      serial->backward(dy, cs);
      par->backward(me.block(dy, kSideA), cp);
      check_grads(ps, pp, out);
    });
  }
}

TEST(Tp3dBlock, MatchesSerial) {
  for (bool causal : {false, true}) {
    on_cube("block", [&](Mesh& mesh, std::vector<Check>& out) {
      const CubeRank me(mesh);
      TransformerBlockOptions o;
      o.name = "blocks.0";
      o.dim = 16;
      o.heads = 4;
      o.mlp_dim = 32;
      o.causal = causal;
      o.init_std = 0.2f;
      o.proj_init_std = 0.2f;
      SerialBuilder sb;
      Tp3dBuilder pb(mesh);
      TransformerBlock serial(o, sb), par(o, pb);
      const std::vector<Parameter*> ps = serial.parameters();
      const std::vector<Parameter*> pp = par.parameters();
      init_pair(ps, pp, out);
      const Tensor x = randn({8, 5, 16}, kSeed, "x");
      const Tensor dy = randn({8, 5, 16}, kSeed, "dy");
      Context cs, cp;
      const Tensor ys = serial.forward(x, cs);
      const Tensor yp = par.forward(me.block(x, kSideA), cp);
      out.push_back({"y", rel_diff(yp, me.block(ys, kSideA)), kTol});
      const Tensor dxs = serial.backward(dy, cs);
      const Tensor dxp = par.backward(me.block(dy, kSideA), cp);
      out.push_back({"dx", rel_diff(dxp, me.block(dxs, kSideA)), kTol});
      check_grads(ps, pp, out);
    });
  }
}

// A loss head on x [B, T, C] (side A) with `targets` (B rows): LossStats
// summed over tp_wt x tp_in equal the serial ones on every tp_out, and the
// input and parameter gradients of scale * loss match.
void check_head(
    const std::string& label,
    const Tensor& x,
    const Tensor& targets,
    const std::function<std::unique_ptr<LossHead>(Builder&)>& make) {
  const int n = kP * kP * kP;
  std::vector<LossStats> stats(n);
  LossStats want;
  on_cube(label, [&](Mesh& mesh, std::vector<Check>& out) {
    const CubeRank me(mesh);
    SerialBuilder sb;
    Tp3dBuilder pb(mesh);
    auto serial = make(sb);
    auto par = make(pb);
    std::vector<Parameter*> ps, pp;
    serial->collect_parameters(ps);
    par->collect_parameters(pp);
    init_pair(ps, pp, out);
    Context cs, cp;
    LossStats s;
    serial->forward(x, targets, cs, s);
    par->forward(
        me.block(x, kSideA), me.samples(targets), cp, stats[mesh.rank()]);
    if (mesh.rank() == 0)
      want = s;
    const float scale = 1.0f / float(s.count);
    const Tensor dxs = serial->backward(cs, scale);
    const Tensor dxp = par->backward(cp, scale);
    out.push_back({"dx", rel_diff(dxp, me.block(dxs, kSideA)), kTol});
    check_grads(ps, pp, out);
  });
  // Rank out p^2 + in p + wt holds the statistics of side-A block wt p +
  // in.
  for (int o = 0; o < kP; ++o) {
    LossStats sum;
    for (int r = o * kP * kP; r < (o + 1) * kP * kP; ++r) {
      sum.loss_sum += stats[r].loss_sum;
      sum.count += stats[r].count;
      sum.correct += stats[r].correct;
    }
    EXPECT_EQ(sum.count, want.count) << label << " tp_out " << o;
    EXPECT_EQ(sum.correct, want.correct) << label << " tp_out " << o;
    EXPECT_LE(
        std::fabs(sum.loss_sum - want.loss_sum),
        kTol * std::fabs(want.loss_sum))
        << label << " tp_out " << o;
  }
}

TEST(ClassifierHead3d, MatchesSerialWithClassTokenAndMeanPooling) {
  for (HeadPool pool : {HeadPool::kCls, HeadPool::kMean}) {
    ClassifierHeadOptions o;
    o.dim = 8;
    o.classes = 10;
    o.pool = pool;
    o.init_std = 0.3f;
    const Tensor x = randn({8, 4, o.dim}, kSeed, "x");
    const Tensor labels = test::int_tensor({8}, 10, 3, 1);
    check_head(
        pool == HeadPool::kCls ? "classifier (cls)" : "classifier (mean)",
        x,
        labels,
        [&](Builder& b) { return b.classifier_head(o); });
  }
}

TEST(LmHead3d, MatchesSerial) {
  LmHeadOptions o;
  o.dim = 8;
  o.vocab = 12;
  o.init_std = 0.3f;
  const Tensor x = randn({8, 5, o.dim}, kSeed, "x");
  const Tensor ids = test::int_tensor({8, 5}, o.vocab, 5, 2);
  check_head("LM head", x, ids, [&](Builder& b) { return b.lm_head(o); });
}

}  // namespace
}  // namespace ndt
