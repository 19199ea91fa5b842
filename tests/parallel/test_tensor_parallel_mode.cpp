// The tensor-parallel modes as units: the mesh axes each mode asks for,
// the activation shapes it sends between stages, the samples each rank
// takes, and the 1d and 2d modes' config rules (every split their layers
// make must be exact), each failing with a ConfigError naming the keys and
// values at fault.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "comm/local_process_group.h"
#include "parallel/tensor_parallel_mode.h"

namespace ndt {
namespace {

// A GPT on synthetic data with `more` overrides.
Config gpt(std::vector<std::string> more) {
  more.insert(
      more.begin(),
      {"model.kind=gpt",
       "data.name=synthetic",
       "model.dim=32",
       "model.depth=2",
       "model.heads=4",
       "model.mlp_dim=64",
       "model.seq_len=16",
       "train.batch_size=8"});
  return load_config("", more);
}

std::string mode_error(const Config& c) {
  try {
    make_tensor_parallel_mode(c);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError";
  return "";
}

void expect_has(const std::string& msg, const std::vector<std::string>& parts) {
  for (const std::string& p : parts) {
    EXPECT_NE(msg.find(p), std::string::npos)
        << "message: " << msg << "\nmissing: " << p;
  }
}

TEST(TensorParallelMode, AxesInOrderAndActivationShapes) {
  const Config c =
      gpt({"parallel.dp=2", "parallel.tp=4", "parallel.order=tp,dp,pp"});
  const std::vector<MeshAxis> axes = mesh_axes(c);
  ASSERT_EQ(axes.size(), 4u);  // then sp, innermost
  EXPECT_EQ(axes[0].name, "tp");
  EXPECT_EQ(axes[0].size, 4);
  EXPECT_EQ(axes[1].name, "dp");
  EXPECT_EQ(axes[1].size, 2);
  EXPECT_EQ(axes[2].name, "pp");
  EXPECT_EQ(axes[2].size, 1);
  EXPECT_EQ(axes[3].name, "sp");
  EXPECT_EQ(axes[3].size, 1);
  // Replicated activations without sequence-split regions, my tokens with.
  EXPECT_EQ(
      make_tensor_parallel_mode(c)->local_activation({2, 16, 32}),
      (Shape{2, 16, 32}));
  const Config seq = gpt({"parallel.tp=4", "parallel.tp_seq=true"});
  EXPECT_EQ(
      make_tensor_parallel_mode(seq)->local_activation({2, 16, 32}),
      (Shape{8, 32}));
  // Threads replicas are not ranks; no tensor parallelism is axis tp of 1.
  const Config threads = load_config(
      "",
      {"model.hidden=[8]",
       "data.name=synthetic",
       "parallel.dp=2",
       "parallel.dp_mode=threads"});
  for (const MeshAxis& a : mesh_axes(threads))
    EXPECT_EQ(a.size, 1) << a.name;
}

TEST(TensorParallelMode, Tp1dSplitsMustBeExact) {
  expect_has(
      mode_error(gpt({"model.heads=2", "parallel.tp=4"})),
      {"model.heads (2)", "parallel.tp (4)"});
  expect_has(
      mode_error(gpt({"model.mlp_dim=6", "parallel.tp=4"})),
      {"model.mlp_dim (6)", "parallel.tp (4)"});
  expect_has(
      mode_error(gpt(
          {"model.heads=3",
           "model.dim=48",
           "model.mlp_dim=96",
           "parallel.tp=3"})),
      {"model.vocab (256)", "parallel.tp (3)", "padding"});
  // 3 samples x 5 tokens per micro-batch do not split over 2 ranks.
  expect_has(
      mode_error(gpt(
          {"model.seq_len=5",
           "train.batch_size=3",
           "parallel.tp=2",
           "parallel.tp_seq=true"})),
      {"parallel.tp_seq", "15", "2"});
  expect_has(
      mode_error(load_config(
          "", {"model.kind=mlp", "data.name=synthetic", "parallel.tp=2"})),
      {"parallel.tp=2", "model.kind mlp"});
}

TEST(TensorParallelMode, Tp2dGridAxesBlocksAndSampleRows) {
  const Config c =
      gpt({"parallel.dp=2", "parallel.tp=4", "parallel.tp_mode=2d"});
  const std::vector<MeshAxis> axes = mesh_axes(c);
  ASSERT_EQ(axes.size(), 5u);
  const char* names[] = {"dp", "pp", "tp_row", "tp_col", "sp"};
  const int sizes[] = {2, 1, 2, 2, 1};
  for (size_t k = 0; k < axes.size(); ++k) {
    EXPECT_EQ(axes[k].name, names[k]);
    EXPECT_EQ(axes[k].size, sizes[k]) << axes[k].name;
  }
  const auto mode = make_tensor_parallel_mode(c);
  // [B/q, T, C/q]: my samples' block of my features.
  EXPECT_EQ(mode->local_activation({4, 16, 32}), (Shape{2, 16, 16}));
  EXPECT_EQ(mode->sample_axes(), std::vector<std::string>{"tp_row"});
  // Modes that do not split samples take them all and sum over no axis.
  const auto tp1d = make_tensor_parallel_mode(gpt({"parallel.tp=4"}));
  EXPECT_TRUE(tp1d->sample_axes().empty());
  std::vector<SampleRows> rows(4), all(4);
  std::vector<std::string> error(4);
  run_local(4, [&](ProcessGroup& pg) {
    Mesh mesh(pg, {2, 2}, {"tp_row", "tp_col"});
    rows[pg.rank()] = mode->sample_rows(mesh, 6);
    all[pg.rank()] = tp1d->sample_rows(mesh, 5);
    try {
      mode->sample_rows(mesh, 5);
    } catch (const ConfigError& e) {
      error[pg.rank()] = e.what();
    }
  });
  for (int r = 0; r < 4; ++r) {
    const int i = r / 2;  // tp_row is the outer axis
    EXPECT_EQ(rows[r].first, 3 * i) << "rank " << r;
    EXPECT_EQ(rows[r].count, 3) << "rank " << r;
    EXPECT_EQ(all[r].first, 0);
    EXPECT_EQ(all[r].count, 5);
    expect_has(error[r], {"parallel.tp_mode=2d", "5 samples", "2 grid rows"});
  }
}

TEST(TensorParallelMode, Tp2dSplitsMustBeExact) {
  const std::string mode = "parallel.tp_mode=2d";
  expect_has(
      mode_error(gpt({"parallel.tp=2", mode})),
      {"parallel.tp=2", "perfect square"});
  expect_has(
      mode_error(gpt({"parallel.tp=8", mode})),
      {"parallel.tp=8", "perfect square"});
  expect_has(
      mode_error(load_config(
          "",
          {"model.kind=mlp", "data.name=synthetic", "parallel.tp=4", mode})),
      {"parallel.tp_mode=2d", "model.kind mlp"});
  expect_has(
      mode_error(gpt(
          {"parallel.tp=4",
           mode,
           "parallel.dp=2",
           "parallel.dp_mode=threads"})),
      {"parallel.tp_mode=2d", "parallel.dp_mode=mpi"});
  expect_has(
      mode_error(gpt({"parallel.tp=4", mode, "parallel.tp_seq=true"})),
      {"parallel.tp_seq", "1d"});
  expect_has(
      mode_error(gpt({"parallel.tp=4", mode, "model.heads=1"})),
      {"model.heads (1)", "q = 2"});
  expect_has(
      mode_error(gpt({"parallel.tp=4", mode, "model.dim=34", "model.heads=2"})),
      {"model.dim (34)", "q^2 = 4", "parallel.tp=4"});
  expect_has(
      mode_error(gpt({"parallel.tp=4", mode, "model.mlp_dim=66"})),
      {"model.mlp_dim (66)", "q^2 = 4", "parallel.tp=4"});
  expect_has(
      mode_error(gpt({"parallel.tp=4", mode, "model.vocab=255"})),
      {"model.vocab (255)", "q = 2"});
  // 8 samples / 2 replicas / 4 micro-batches = 1 sample per micro-batch.
  expect_has(
      mode_error(gpt(
          {"parallel.tp=4", mode, "parallel.dp=2", "parallel.microbatches=4"})),
      {"train.batch_size (8)", "parallel.microbatches (4)", "= 1 samples"});
  // A valid 3 x 3 grid.
  EXPECT_NO_THROW(make_tensor_parallel_mode(gpt(
      {"parallel.tp=9",
       mode,
       "model.dim=36",
       "model.heads=3",
       "model.mlp_dim=72",
       "model.vocab=255",
       "train.batch_size=9"})));
}

// 2.5D: d grids of q x q on axes tp_dep x tp_row x tp_col (depth
// outermost); grid k, row i takes row-block k q + i of d q; gradients are
// summed over tp_dep, the statistics over tp_dep and tp_row.
TEST(TensorParallelMode, Tp2p5dAxesSampleRowsAndReplicaAxis) {
  const Config c =
      gpt({"parallel.tp=8", "parallel.tp_mode=2.5d", "parallel.tp_depth=2"});
  const std::vector<MeshAxis> axes = mesh_axes(c);
  ASSERT_EQ(axes.size(), 6u);
  const char* names[] = {"dp", "pp", "tp_dep", "tp_row", "tp_col", "sp"};
  const int sizes[] = {1, 1, 2, 2, 2, 1};
  for (size_t k = 0; k < axes.size(); ++k) {
    EXPECT_EQ(axes[k].name, names[k]);
    EXPECT_EQ(axes[k].size, sizes[k]) << axes[k].name;
  }
  const auto mode = make_tensor_parallel_mode(c);
  // [B/(d q), T, C/q].
  EXPECT_EQ(mode->local_activation({8, 16, 32}), (Shape{2, 16, 16}));
  EXPECT_EQ(
      mode->sample_axes(), (std::vector<std::string>{"tp_dep", "tp_row"}));
  EXPECT_EQ(mode->replica_axes(), std::vector<std::string>{"tp_dep"});
  // 2D has no replica axis.
  EXPECT_TRUE(
      make_tensor_parallel_mode(gpt({"parallel.tp=4", "parallel.tp_mode=2d"}))
          ->replica_axes()
          .empty());
  std::vector<SampleRows> rows(8);
  std::vector<std::string> error(8);
  run_local(8, [&](ProcessGroup& pg) {
    Mesh mesh(pg, {2, 2, 2}, {"tp_dep", "tp_row", "tp_col"});
    rows[pg.rank()] = mode->sample_rows(mesh, 12);
    try {
      mode->sample_rows(mesh, 6);
    } catch (const ConfigError& e) {
      error[pg.rank()] = e.what();
    }
  });
  for (int r = 0; r < 8; ++r) {
    const int k = r / 4, i = (r / 2) % 2;
    EXPECT_EQ(rows[r].first, 3 * (2 * k + i)) << "rank " << r;
    EXPECT_EQ(rows[r].count, 3) << "rank " << r;
    expect_has(
        error[r],
        {"parallel.tp_mode=2.5d", "6 samples", "4 grid rows of all grids"});
  }
}

TEST(TensorParallelMode, Tp2p5dSplitsMustBeExact) {
  const std::string mode = "parallel.tp_mode=2.5d";
  expect_has(
      mode_error(gpt({"parallel.tp=8", mode, "parallel.tp_depth=3"})),
      {"parallel.tp=8", "parallel.tp_depth=3", "q^2 x 3", "12, 27"});
  expect_has(
      mode_error(gpt({"parallel.tp=6", mode, "parallel.tp_depth=2"})),
      {"parallel.tp=6", "q^2 x 2"});
  // 8 samples / 4 micro-batches = 2 do not split over d q = 4 grid rows.
  expect_has(
      mode_error(gpt(
          {"parallel.tp=8",
           mode,
           "parallel.tp_depth=2",
           "parallel.microbatches=4"})),
      {mode, "4 grid rows of all grids", "= 2 samples"});
  expect_has(
      mode_error(gpt(
          {"parallel.tp=8", mode, "parallel.tp_depth=2", "model.mlp_dim=66"})),
      {"model.mlp_dim (66)", "q^2 = 4", mode});
  // tp_depth belongs to 2.5d.
  std::string msg;
  try {
    gpt({"parallel.tp=4", "parallel.tp_mode=2d", "parallel.tp_depth=2"});
  } catch (const ConfigError& e) {
    msg = e.what();
  }
  expect_has(
      msg, {"parallel.tp_depth=2", "parallel.tp_mode=2d", "leave it at 1"});
  // A valid 3 x 3 x 2.
  EXPECT_NO_THROW(make_tensor_parallel_mode(gpt(
      {"parallel.tp=18",
       mode,
       "parallel.tp_depth=2",
       "model.dim=36",
       "model.heads=3",
       "model.mlp_dim=72",
       "model.vocab=255",
       "train.batch_size=18"})));
}

}  // namespace
}  // namespace ndt
