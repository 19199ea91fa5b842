// The tensor-parallel modes as units: the mesh axes each mode asks for,
// the activation shapes it sends between stages, and the 1d mode's config
// rules (every split its layers make must be exact), each failing with a
// ConfigError naming the keys and values at fault.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
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

}  // namespace
}  // namespace ndt
