// The layers of 2D and 2.5D tensor parallelism outside the transformer
// block, each against its serial oracle, master-vs-shard (CONVENTIONS.md
// 5) on d grids of q x q threads (run_local, grid_rank.h): 2D at q = 2 and
// 3, 2.5D at q = 2, d = 2 (parameter gradients summed over the grids, as
// the engine's gradient reduction does): Dropout2d,
// the token and patch embeddings (tp2d_embedding.h), ReplicatedLinear2d,
// the classifier head built by Tp2dBuilder and LmHead2d. Every rank feeds
// its block of the global input (samples of row-block k q + i; features of
// column-block j where the input has features) and of the output gradient,
// and compares its block of the output, the input gradient and every
// parameter gradient (Layout::take_local of the serial tensor); the loss
// heads' statistics, summed over the grid rows, against the serial ones.
//
// Tolerances (max |a - b| / max |b| per tensor, test::rel_diff):
//   0     parameter values after init (counter RNG by global index);
//         dropout outputs and input gradients (the same mask, the same
//         multiply); embedding outputs (the same copies and adds);
//         the correct-prediction counts
//   1e-5  (kSumTol) everything else: sums over samples or features split
//         over the grid replace one serial sum.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/local_process_group.h"
#include "comm/mesh.h"
#include "grid_rank.h"
#include "nn/builder.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/head.h"
#include "nn/linear.h"
#include "ops/ops.h"
#include "parallel/tp2d_builder.h"
#include "parallel/tp2d_dropout.h"
#include "parallel/tp2d_embedding.h"
#include "parallel/tp2d_lm_head.h"
#include "parallel/tp2d_replicated_linear.h"
#include "param_pairs.h"
#include "test_util.h"

namespace ndt {
namespace {

using test::GridCase;
using test::GridRank;
using test::kGridCases;
using test::randn;
using test::rel_diff;

constexpr double kSumTol = 1e-5;
constexpr uint64_t kSeed = 11;

// What one rank measured: (what, difference, tolerance).
struct Check {
  std::string what;
  double diff;
  double tol;
};
using Checks = std::vector<std::vector<Check>>;  // per rank

// Runs `body` on every rank of the grids and expects every check.
void on_grid(
    const GridCase& g,
    const std::string& label,
    const std::function<void(Mesh&, std::vector<Check>&)>& body) {
  const int n = g.d * g.q * g.q;
  Checks got(n);
  run_local(n, [&](ProcessGroup& pg) {
    Mesh mesh = test::grid_mesh(pg, g);
    body(mesh, got[pg.rank()]);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_FALSE(got[r].empty()) << label << " rank " << r << " checked none";
    for (const Check& c : got[r]) {
      EXPECT_LE(c.diff, c.tol) << label << " " << test::grid_label(g)
                               << " rank " << r << ": " << c.what;
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

// After the gradients of pp are summed over the grids.
void check_grads(
    Mesh& mesh,
    const std::vector<Parameter*>& ps,
    const std::vector<Parameter*>& pp,
    std::vector<Check>& out) {
  test::sum_over_depth(mesh, pp);
  for (size_t k = 0; k < ps.size() && k < pp.size(); ++k) {
    out.push_back(
        {pp[k]->name + " grad",
         rel_diff(pp[k]->grad, pp[k]->layout.take_local(ps[k]->grad)),
         kSumTol});
  }
}

TEST(Dropout2d, DrawsTheSerialMaskOnMyBlock) {
  for (const GridCase& g : kGridCases) {
    const int q = g.q;
    on_grid(g, "dropout", [&g, q](Mesh& mesh, std::vector<Check>& out) {
      const GridRank me(mesh);
      const int B = 2 * q * g.d, T = 5, C = 4 * q;
      const Tensor x = randn({B, T, C}, kSeed, "x");
      const Tensor dy = randn({B, T, C}, kSeed, "dy");
      Dropout serial("blocks.0.mlp.drop", 0.3f);
      Dropout2d par("blocks.0.mlp.drop", 0.3f, mesh);
      Context cs, cp;
      cs.run.seed = cp.run.seed = kSeed;
      cs.run.step = cp.run.step = 4;
      cs.run.sample_offset = 6;  // the micro-batch's first global sample
      cp.run.sample_offset = 6 + me.row() * (B / (q * g.d));  // mine
      const Tensor ys = serial.forward(x, cs);
      const Tensor yp = par.forward(me.block(x), cp);
      out.push_back({"y", rel_diff(yp, me.block(ys)), 0});
      const Tensor dxs = serial.backward(dy, cs);
      const Tensor dxp = par.backward(me.block(dy), cp);
      out.push_back({"dx", rel_diff(dxp, me.block(dxs)), 0});
    });
  }
}

// Two micro-batches accumulate into the table gradients (the column sum
// adds each call's contribution once).
TEST(TokenEmbedding2d, MatchesSerial) {
  for (const GridCase& g : kGridCases) {
    const int q = g.q;
    on_grid(g, "token embedding", [&g, q](Mesh& mesh, std::vector<Check>& out) {
      const GridRank me(mesh);
      const int B = 2 * q * g.d, T = 5, Tmax = 7, V = 11, C = 6 * q;
      TokenEmbedding serial("embed", V, Tmax, C, 0.2f);
      auto par = token_embedding_2d("embed", V, Tmax, C, 0.2f, mesh);
      const std::vector<Parameter*> ps = serial.parameters();
      const std::vector<Parameter*> pp = par->parameters();
      init_pair(ps, pp, out);
      for (int m = 0; m < 2; ++m) {
        const std::string mb = " mb" + std::to_string(m);
        const Tensor ids = test::int_tensor({B, T}, V, 7 + m, 3 * m);
        const Tensor dy = randn({B, T, C}, kSeed, "dy" + mb);
        Context cs, cp;
        const Tensor ys = serial.forward(ids, cs);
        const Tensor yp = par->forward(me.samples(ids), cp);
        out.push_back({"y" + mb, rel_diff(yp, me.block(ys)), 0});
        serial.backward(dy, cs);
        par->backward(me.block(dy), cp);
      }
      check_grads(mesh, ps, pp, out);
    });
  }
}

TEST(PatchEmbedding2d, MatchesSerialWithAndWithoutClassToken) {
  for (const GridCase& g : kGridCases) {
    const int q = g.q;
    for (bool cls : {true, false}) {
      on_grid(g, "patch embedding", [&](Mesh& mesh, std::vector<Check>& out) {
        const GridRank me(mesh);
        PatchEmbeddingOptions o;
        o.image_size = 8;
        o.channels = 2;
        o.patch = 4;
        o.dim = 4 * q;
        o.cls_token = cls;
        o.init_std = 0.2f;
        const int B = 2 * q * g.d;
        PatchEmbedding serial(o);
        auto par = patch_embedding_2d(o, mesh);
        const std::vector<Parameter*> ps = serial.parameters();
        const std::vector<Parameter*> pp = par->parameters();
        init_pair(ps, pp, out);
        const Tensor images = randn({B, 2, 8, 8}, kSeed, "images");
        const Tensor dy = randn({B, serial.tokens(), o.dim}, kSeed, "dy");
        Context cs, cp;
        const Tensor ys = serial.forward(images, cs);
        const Tensor yp = par->forward(me.samples(images), cp);
        out.push_back({"y", rel_diff(yp, me.block(ys)), kSumTol});
        serial.backward(dy, cs);
        par->backward(me.block(dy), cp);
        check_grads(mesh, ps, pp, out);
      });
    }
  }
}

TEST(ReplicatedLinear2d, MatchesSerial) {
  for (const GridCase& g : kGridCases) {
    const int q = g.q;
    on_grid(
        g, "replicated linear", [&g, q](Mesh& mesh, std::vector<Check>& out) {
          const GridRank me(mesh);
          const int N = 3 * q * g.d, IC = 4 * q, OC = 10;
          Linear serial("head.out", IC, OC, true, Act::kNone, 0.3f);
          ReplicatedLinear2d par(
              "head.out", IC, OC, true, Act::kNone, 0.3f, mesh);
          const std::vector<Parameter*> ps = serial.parameters();
          const std::vector<Parameter*> pp = par.parameters();
          init_pair(ps, pp, out);
          const Tensor x = randn({N, IC}, kSeed, "x");
          const Tensor dy = randn({N, OC}, kSeed, "dy");
          Context cs, cp;
          const Tensor ys = serial.forward(x, cs);
          const Tensor yp = par.forward(me.block(x), cp);
          // The whole output features of my samples, on every rank of my row.
          out.push_back({"y", rel_diff(yp, me.samples(ys)), kSumTol});
          const Tensor dxs = serial.backward(dy, cs);
          const Tensor dxp = par.backward(me.samples(dy), cp);
          out.push_back({"dx", rel_diff(dxp, me.block(dxs)), kSumTol});
          check_grads(mesh, ps, pp, out);
        });
  }
}

// A loss head on x [B, T, C] (its block on each rank) with `targets` (B
// rows): LossStats summed over the grid rows equal the serial ones, and
// the input and parameter gradients of scale * loss match.
void check_head(
    const GridCase& g,
    const std::string& label,
    const Tensor& x,
    const Tensor& targets,
    const std::function<std::unique_ptr<LossHead>()>& make_serial,
    const std::function<std::unique_ptr<LossHead>(Mesh&)>& make_par) {
  const int q = g.q, rows = g.d * g.q;
  std::vector<LossStats> stats(rows * q);
  LossStats want;
  on_grid(g, label, [&](Mesh& mesh, std::vector<Check>& out) {
    const GridRank me(mesh);
    auto serial = make_serial();
    auto par = make_par(mesh);
    std::vector<Parameter*> ps, pp;
    serial->collect_parameters(ps);
    par->collect_parameters(pp);
    init_pair(ps, pp, out);
    Context cs, cp;
    LossStats s;
    serial->forward(x, targets, cs, s);
    par->forward(me.block(x), me.samples(targets), cp, stats[mesh.rank()]);
    if (mesh.rank() == 0)
      want = s;
    const float scale = 1.0f / float(s.count);
    const Tensor dxs = serial->backward(cs, scale);
    const Tensor dxp = par->backward(cp, scale);
    out.push_back({"dx", rel_diff(dxp, me.block(dxs)), kSumTol});
    check_grads(mesh, ps, pp, out);
  });
  // Every rank of a grid row holds its row block's statistics (rank
  // r q + j: row-block r, column j).
  for (int j = 0; j < q; ++j) {
    LossStats sum;
    for (int i = 0; i < rows; ++i) {
      const LossStats& r = stats[i * q + j];
      sum.loss_sum += r.loss_sum;
      sum.count += r.count;
      sum.correct += r.correct;
    }
    EXPECT_EQ(sum.count, want.count) << label << " column " << j;
    EXPECT_EQ(sum.correct, want.correct) << label << " column " << j;
    EXPECT_LE(
        std::fabs(sum.loss_sum - want.loss_sum),
        kSumTol * std::fabs(want.loss_sum))
        << label << " column " << j;
  }
}

TEST(ClassifierHead2d, MatchesSerialWithClassTokenAndMeanPooling) {
  for (const GridCase& g : kGridCases) {
    const int q = g.q;
    for (HeadPool pool : {HeadPool::kCls, HeadPool::kMean}) {
      ClassifierHeadOptions o;
      o.dim = 2 * q * q;
      o.classes = 10;
      o.pool = pool;
      o.init_std = 0.3f;
      const int B = 2 * q * g.d, T = 4;
      const Tensor x = randn({B, T, o.dim}, kSeed, "x");
      const Tensor labels = test::int_tensor({B}, 10, 3, 1);
      check_head(
          g,
          pool == HeadPool::kCls ? "classifier (cls)" : "classifier (mean)",
          x,
          labels,
          [&] {
            SerialBuilder b;
            return b.classifier_head(o);
          },
          [&](Mesh& mesh) {
            Tp2dBuilder b(mesh);
            return b.classifier_head(o);
          });
    }
  }
}

TEST(LmHead2d, MatchesSerial) {
  for (const GridCase& g : kGridCases) {
    const int q = g.q;
    LmHeadOptions o;
    o.dim = 2 * q * q;
    o.vocab = 4 * q;
    o.init_std = 0.3f;
    const int B = 2 * q * g.d, T = 5;
    const Tensor x = randn({B, T, o.dim}, kSeed, "x");
    const Tensor ids = test::int_tensor({B, T}, o.vocab, 5, 2);
    check_head(
        g,
        "LM head",
        x,
        ids,
        [&] {
          SerialBuilder b;
          return b.lm_head(o);
        },
        [&](Mesh& mesh) { return std::make_unique<LmHead2d>(o, mesh); });
  }
}

}  // namespace
}  // namespace ndt
