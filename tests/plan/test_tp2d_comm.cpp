// The 2D plan (plan/tp2d_comm.h) against the ledgers of the real Linear2d
// on the threads backend: per rank, per group (row and column), forward
// and backward separately, exactly. q = 2 and 3, with and without bias,
// with and without the input gradient.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/local_process_group.h"
#include "comm/mesh.h"
#include "parallel/tp2d_linear.h"
#include "parallel/tp2d_norm.h"
#include "plan/tp2d_comm.h"
#include "test_util.h"

namespace ndt {
namespace {

constexpr int64_t kN = 12, kIn = 12, kOut = 36;

struct Measured {
  CommVolume row_fwd, col_fwd, row_bwd, col_bwd;
};

// One forward and backward of the layer made by `make` on q x q threads;
// each rank's ledgers of its row and column groups per pass.
template <typename Make>
std::vector<Measured> measure(
    int q, int64_t in, int64_t out, bool need_dx, Make make) {
  std::vector<Measured> got(q * q);
  run_local(q * q, [&](ProcessGroup& pg) {
    Mesh mesh(pg, {q, q}, {"tp_row", "tp_col"});
    ProcessGroup& row = mesh.group("tp_col");
    ProcessGroup& col = mesh.group("tp_row");
    auto made = make(mesh);
    Module& layer = *made;
    for (Parameter* p : layer.parameters())
      init_parameter(*p, 3);
    const Tensor x = test::randn({kN / q, in / q}, 3, "x");
    const Tensor dy = test::randn({kN / q, out / q}, 3, "dy");
    Context ctx;
    ctx.need_input_grad = need_dx;
    row.reset_comm_ledger();
    col.reset_comm_ledger();
    layer.forward(x, ctx);
    Measured& m = got[pg.rank()];
    m.row_fwd = from_ledger(row.comm_ledger());
    m.col_fwd = from_ledger(col.comm_ledger());
    row.reset_comm_ledger();
    col.reset_comm_ledger();
    layer.backward(dy, ctx);
    m.row_bwd = from_ledger(row.comm_ledger());
    m.col_bwd = from_ledger(col.comm_ledger());
  });
  return got;
}

void expect_plan(
    const std::vector<Measured>& got,
    const Tp2dVolume& want,
    const std::string& label) {
  for (size_t r = 0; r < got.size(); ++r) {
    SCOPED_TRACE(label + " rank " + std::to_string(r));
    EXPECT_EQ(got[r].row_fwd, want.row.fwd) << to_string(got[r].row_fwd);
    EXPECT_EQ(got[r].col_fwd, want.col.fwd) << to_string(got[r].col_fwd);
    EXPECT_EQ(got[r].row_bwd, want.row.bwd) << to_string(got[r].row_bwd);
    EXPECT_EQ(got[r].col_bwd, want.col.bwd) << to_string(got[r].col_bwd);
  }
}

void check(int q, bool bias, bool need_dx) {
  expect_plan(
      measure(
          q,
          kIn,
          kOut,
          need_dx,
          [&](Mesh& mesh) {
            return std::make_unique<Linear2d>(
                "fc", kIn, kOut, bias, Act::kNone, 0.3f, mesh);
          }),
      linear2d_comm(q, kN, kIn, kOut, bias, need_dx),
      "linear q=" + std::to_string(q) + " bias=" + std::to_string(bias) +
          " need_dx=" + std::to_string(need_dx));
}

TEST(Tp2dComm, LayerNorm2dMatchesLedger) {
  for (int q : {2, 3}) {
    expect_plan(
        measure(
            q,
            kOut,
            kOut,
            true,
            [](Mesh& mesh) {
              return std::make_unique<LayerNorm2d>("ln", kOut, mesh);
            }),
        layernorm2d_comm(q, kN, kOut),
        "layernorm q=" + std::to_string(q));
  }
}

TEST(Tp2dComm, Linear2dMatchesLedger) {
  for (int q : {2, 3}) {
    for (bool bias : {false, true}) {
      for (bool need_dx : {false, true})
        check(q, bias, need_dx);
    }
  }
}

}  // namespace
}  // namespace ndt
