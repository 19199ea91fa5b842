// The 3D plan (plan/tp3d_comm.h) against the ledgers of the real layers on
// a 2 x 2 x 2 cube of threads: per rank, per group (the three axes and the
// two sample groups), forward and backward separately, exactly. Linear3d
// from either side with and without bias and input gradient, LayerNorm3d,
// and a whole transformer block built by Tp3dBuilder.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/local_process_group.h"
#include "comm/mesh.h"
#include "nn/transformer_block.h"
#include "parallel/tp3d_builder.h"
#include "parallel/tp3d_cube.h"
#include "parallel/tp3d_linear.h"
#include "parallel/tp3d_norm.h"
#include "plan/tp3d_comm.h"
#include "test_util.h"

namespace ndt {
namespace {

constexpr int kP = 2;
constexpr int64_t kN = 16;  // rows: kN / p^2 per rank

// One forward and backward of the module made by `make` on the cube (my
// input block x_local, my output gradient block dy_local); each rank's
// ledgers.
std::vector<Tp3dVolume> measure(
    Shape x_local,
    Shape dy_local,
    bool need_dx,
    const std::function<std::unique_ptr<Module>(Mesh&)>& make) {
  std::vector<Tp3dVolume> got(kP * kP * kP);
  run_local(kP * kP * kP, [&](ProcessGroup& pg) {
    Mesh mesh(pg, {kP, kP, kP}, {kTp3dOut, kTp3dIn, kTp3dWt});
    auto made = make(mesh);
    ProcessGroup* groups[] = {
        &mesh.group(kTp3dOut),
        &mesh.group(kTp3dIn),
        &mesh.group(kTp3dWt),
        &cube_sample_group(mesh, kSideA),
        &cube_sample_group(mesh, kSideB)};
    for (Parameter* p : made->parameters())
      init_parameter(*p, 3);
    const Tensor x = test::randn(x_local, 3, "x");
    const Tensor dy = test::randn(dy_local, 3, "dy");
    Context ctx;
    ctx.need_input_grad = need_dx;
    Tp3dVolume& v = got[pg.rank()];
    PassVolume* passes[] = {&v.out, &v.in, &v.wt, &v.samples_a, &v.samples_b};
    for (ProcessGroup* g : groups)
      g->reset_comm_ledger();
    made->forward(x, ctx);
    for (int k = 0; k < 5; ++k) {
      passes[k]->fwd = from_ledger(groups[k]->comm_ledger());
      groups[k]->reset_comm_ledger();
    }
    made->backward(dy, ctx);
    for (int k = 0; k < 5; ++k)
      passes[k]->bwd = from_ledger(groups[k]->comm_ledger());
  });
  return got;
}

void expect_plan(
    const std::vector<Tp3dVolume>& got,
    const Tp3dVolume& want,
    const std::string& label) {
  const char* names[] = {"tp_out", "tp_in", "tp_wt", "samples A", "samples B"};
  for (size_t r = 0; r < got.size(); ++r) {
    const PassVolume* g[] = {
        &got[r].out,
        &got[r].in,
        &got[r].wt,
        &got[r].samples_a,
        &got[r].samples_b};
    const PassVolume* w[] = {
        &want.out, &want.in, &want.wt, &want.samples_a, &want.samples_b};
    for (int k = 0; k < 5; ++k) {
      EXPECT_EQ(g[k]->fwd, w[k]->fwd)
          << label << " rank " << r << " " << names[k] << " fwd: measured "
          << to_string(g[k]->fwd) << ", plan " << to_string(w[k]->fwd);
      EXPECT_EQ(g[k]->bwd, w[k]->bwd)
          << label << " rank " << r << " " << names[k] << " bwd: measured "
          << to_string(g[k]->bwd) << ", plan " << to_string(w[k]->bwd);
    }
  }
}

TEST(Tp3dComm, Linear3dMatchesLedger) {
  const int64_t in = 8, out = 12;
  for (bool side_a : {true, false}) {
    for (bool bias : {false, true}) {
      for (bool need_dx : {false, true}) {
        expect_plan(
            measure(
                {kN / (kP * kP), in / kP},
                {kN / (kP * kP), out / kP},
                need_dx,
                [&](Mesh& mesh) {
                  return std::make_unique<Linear3d>(
                      "fc",
                      in,
                      out,
                      bias,
                      Act::kNone,
                      0.3f,
                      mesh,
                      side_a ? kSideA : kSideB);
                }),
            linear3d_comm(kP, kN, in, out, bias, side_a, need_dx),
            "linear side_a=" + std::to_string(side_a) + " bias=" +
                std::to_string(bias) + " need_dx=" + std::to_string(need_dx));
      }
    }
  }
}

TEST(Tp3dComm, LayerNorm3dMatchesLedger) {
  expect_plan(
      measure(
          {kN / (kP * kP), 8 / kP},
          {kN / (kP * kP), 8 / kP},
          true,
          [](Mesh& mesh) {
            return std::make_unique<LayerNorm3d>("ln", 8, mesh);
          }),
      layernorm3d_comm(kP, kN, 8),
      "layernorm");
}

// The block's input is [samples, T, C]: kN rows are 4 samples x 4 tokens.
TEST(Tp3dComm, TransformerBlockMatchesLedger) {
  const int64_t C = 8, F = 16;
  const auto got =
      measure({1, 4, C / kP}, {1, 4, C / kP}, true, [&](Mesh& mesh) {
        Tp3dBuilder b(mesh);
        TransformerBlockOptions o;
        o.name = "blocks.0";
        o.dim = C;
        o.heads = 2;
        o.mlp_dim = F;
        return std::make_unique<TransformerBlock>(o, b);
      });
  expect_plan(got, transformer_block3d_comm(kP, kN, C, F), "block");
}

}  // namespace
}  // namespace ndt
