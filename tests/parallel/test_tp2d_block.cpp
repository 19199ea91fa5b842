// A pre-LN transformer block (nn/transformer_block.h) built by Tp2dBuilder
// on a q x q grid against the same block built serially: the 2D layers
// composed (LayerNorm2d, the fused q/k/v Linear2d split by heads,
// attention on the local heads and samples, the output projection and the
// MLP pair), master-vs-shard. Each rank feeds its block of x [B, T, C]
// (samples of row-block i, features of column-block j) and of dy, and
// compares its block of y and dx and every parameter gradient with the
// serial block's (Layout::take_local). Causal and not; q = 2 and 3; and
// 2.5D (grid_rank.h): q = 2 on d = 2 grids, each grid its row-blocks of
// the samples, the parameter gradients summed over the grids.
//
// Tolerance: max |a - b| / max |b| <= 1e-5 (sums over q blocks replace
// serial sums); 0 for the parameter values after init.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "comm/local_process_group.h"
#include "comm/mesh.h"
#include "grid_rank.h"
#include "nn/transformer_block.h"
#include "ops/ops.h"
#include "parallel/tp2d_builder.h"
#include "param_pairs.h"
#include "test_util.h"

namespace ndt {
namespace {

using test::rel_diff;

constexpr double kTol = 1e-5;
constexpr uint64_t kSeed = 9;

struct Case {
  test::GridCase grid;
  int B, T, C, heads, F;
  bool causal;
};

void check(const Case& k) {
  const int ranks = k.grid.d * k.grid.q * k.grid.q;
  std::vector<std::vector<std::pair<std::string, double>>> got(ranks);
  run_local(ranks, [&](ProcessGroup& pg) {
    Mesh mesh = test::grid_mesh(pg, k.grid);
    const test::GridRank me(mesh);
    TransformerBlockOptions o;
    o.name = "blocks.0";
    o.dim = k.C;
    o.heads = k.heads;
    o.mlp_dim = k.F;
    o.causal = k.causal;
    o.init_std = 0.2f;
    o.proj_init_std = 0.2f;
    SerialBuilder sb;
    Tp2dBuilder pb(mesh);
    TransformerBlock serial(o, sb), par(o, pb);
    std::vector<Parameter*> ps = serial.parameters(), pp = par.parameters();
    auto& res = got[pg.rank()];
    for (const auto& init : test::init_pair(ps, pp, kSeed))
      res.push_back(init);
    if (ps.size() != pp.size())
      return;
    const Tensor x = test::randn({k.B, k.T, k.C}, kSeed, "x");
    const Tensor dy = test::randn({k.B, k.T, k.C}, kSeed, "dy");
    Context cs, cp;
    Tensor ys = serial.forward(x, cs);
    Tensor yp = par.forward(me.block(x), cp);
    res.push_back({"y", rel_diff(yp, me.block(ys))});
    Tensor dxs = serial.backward(dy, cs);
    Tensor dxp = par.backward(me.block(dy), cp);
    res.push_back({"dx", rel_diff(dxp, me.block(dxs))});
    test::sum_over_depth(mesh, pp);
    for (size_t n = 0; n < ps.size(); ++n) {
      res.push_back(
          {pp[n]->name + " grad",
           rel_diff(pp[n]->grad, pp[n]->layout.take_local(ps[n]->grad))});
    }
  });
  for (int r = 0; r < ranks; ++r) {
    ASSERT_GT(got[r].size(), 2u) << "rank " << r << " checked nothing";
    for (const auto& [what, diff] : got[r]) {
      const double tol = what.find(" init") != std::string::npos ? 0 : kTol;
      EXPECT_LE(diff, tol) << test::grid_label(k.grid) << " causal=" << k.causal
                           << " rank " << r << ": " << what;
    }
  }
}

TEST(Tp2dBlock, MatchesSerialQ2) {
  check({{2, 1}, 4, 3, 16, 4, 32, false});
  check({{2, 1}, 2, 5, 16, 2, 32, true});
}

TEST(Tp2dBlock, MatchesSerialQ3) {
  check({{3, 1}, 3, 4, 36, 6, 72, true});
}

TEST(Tp2p5dBlock, MatchesSerialQ2D2) {
  check({{2, 2}, 8, 3, 16, 4, 32, false});
  check({{2, 2}, 4, 5, 16, 2, 32, true});
}

}  // namespace
}  // namespace ndt
