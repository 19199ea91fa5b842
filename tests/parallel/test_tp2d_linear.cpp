// 2D tensor-parallel layers (tp2d_linear.h, SUMMA on a q x q grid;
// tp2d_norm.h) against the serial Linear and LayerNorm, master-vs-shard
// (CONVENTIONS.md 5): run_local (q^2) gives every rank a thread and a real
// ProcessGroup on a mesh with axes tp_row x tp_col; each rank builds the serial
// layer and its 2D block with the same names and seed, checks that init drew
// the serial values for its blocks, runs both on the same random input and
// output gradient (x [N, IC] as rows, the rank's block x_ij = row-block i,
// column-block j), and compares its block of the output, the input gradient and
// every parameter gradient. q = 2 and 3, with and without bias, and with GELU;
// LayerNorm at q = 2 and 3. 2.5D runs the same layers on d grids (grid_rank.h):
// each grid its row-blocks of x, the parameter gradients summed over the
// grids; q = 2, d = 2.
//
// Tolerances, max |a - b| / max |b| per tensor:
//   0     parameter values after init (the counter RNG draws each global
//         element by its index);
//   1e-5  (kSumTol) y, dx, dW and db: each is a sum over q blocks (or over
//         the row blocks) where the serial layer sums in one GEMM. A wrong
//         block, root or reduction is O(1) in these relative terms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "comm/local_process_group.h"
#include "comm/mesh.h"
#include "grid_rank.h"
#include "nn/layernorm.h"
#include "nn/linear.h"
#include "ops/ops.h"
#include "parallel/tp2d_linear.h"
#include "parallel/tp2d_norm.h"
#include "test_util.h"

namespace ndt {
namespace {

using test::randn;
using test::rel_diff;

constexpr double kSumTol = 1e-5;
constexpr uint64_t kSeed = 5;
constexpr int kN = 12, kIn = 12, kOut = 36;

struct Result {
  std::vector<std::string> what;
  std::vector<double> diff;
  void add(std::string w, double d) {
    what.push_back(std::move(w));
    diff.push_back(d);
  }
};

// Runs serial and 2D layer (made by `make`) on q x q threads and checks
// every rank's blocks; in/out: the layer's input and output features.
template <typename MakeSerial, typename MakePar>
void check_layer(
    const test::GridCase& g,
    int in,
    int out,
    MakeSerial make_serial,
    MakePar make_par) {
  const int n = g.d * g.q * g.q;
  std::vector<Result> results(n);
  run_local(n, [&](ProcessGroup& pg) {
    Mesh mesh = test::grid_mesh(pg, g);
    const test::GridRank me(mesh);
    Result& res = results[pg.rank()];
    auto serial_ptr = make_serial();
    auto par_ptr = make_par(mesh);
    Module& serial = *serial_ptr;
    Module& par = *par_ptr;
    std::vector<Parameter*> ps = serial.parameters(), pp = par.parameters();
    ASSERT_EQ(ps.size(), pp.size());
    for (size_t k = 0; k < ps.size(); ++k) {
      init_parameter(*ps[k], kSeed);
      init_parameter(*pp[k], kSeed);
      if (ps[k]->init.kind != Init::kNormal) {  // lift the bias off zero
        Tensor g = randn(ps[k]->layout.global_shape, kSeed, "perturb", 0.5f);
        ops::add_(ps[k]->value, g);
        ops::add_(pp[k]->value, pp[k]->layout.take_local(g));
      }
      res.add(
          pp[k]->name + " init",
          rel_diff(pp[k]->value, pp[k]->layout.take_local(ps[k]->value)));
    }
    const Tensor x = randn({kN, in}, kSeed, "x");
    const Tensor dy = randn({kN, out}, kSeed, "dy");
    Context cs, cp;
    Tensor ys = serial.forward(x, cs);
    Tensor yp = par.forward(me.block(x), cp);
    res.add("y", rel_diff(yp, me.block(ys)));
    Tensor dxs = serial.backward(dy, cs);
    Tensor dxp = par.backward(me.block(dy), cp);
    res.add("dx", rel_diff(dxp, me.block(dxs)));
    test::sum_over_depth(mesh, pp);
    for (size_t k = 0; k < ps.size(); ++k) {
      res.add(
          pp[k]->name + " grad",
          rel_diff(pp[k]->grad, pp[k]->layout.take_local(ps[k]->grad)));
    }
  });
  for (int r = 0; r < n; ++r) {
    const Result& res = results[r];
    ASSERT_FALSE(res.what.empty()) << "rank " << r << " checked nothing";
    for (size_t k = 0; k < res.what.size(); ++k) {
      const double tol =
          res.what[k].find("init") != std::string::npos ? 0.0 : kSumTol;
      EXPECT_LE(res.diff[k], tol)
          << test::grid_label(g) << " rank " << r << ": " << res.what[k];
    }
  }
}

void check(const test::GridCase& g, bool bias, Act act) {
  check_layer(
      g,
      kIn,
      kOut,
      [&] {
        return std::make_unique<Linear>("fc", kIn, kOut, bias, act, 0.3f);
      },
      [&](Mesh& mesh) {
        return std::make_unique<Linear2d>(
            "fc", kIn, kOut, bias, act, 0.3f, mesh);
      });
}

TEST(LayerNorm2d, MatchesSerial) {
  for (const test::GridCase& g : test::kGridCases) {
    check_layer(
        g,
        kOut,
        kOut,
        [] { return std::make_unique<LayerNorm>("ln", kOut); },
        [](Mesh& mesh) {
          return std::make_unique<LayerNorm2d>("ln", kOut, mesh);
        });
  }
}

TEST(Linear2d, MatchesSerialQ2) {
  check({2, 1}, false, Act::kNone);
  check({2, 1}, true, Act::kNone);
  check({2, 1}, true, Act::kGelu);
}

TEST(Linear2d, MatchesSerialQ3) {
  check({3, 1}, false, Act::kNone);
  check({3, 1}, true, Act::kGelu);
}

TEST(Linear2p5d, MatchesSerialQ2D2) {
  check({2, 2}, false, Act::kNone);
  check({2, 2}, true, Act::kGelu);
}

}  // namespace
}  // namespace ndt
