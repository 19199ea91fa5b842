// Pipeline keys of the config (parallel.pp, pp_chunks, pp_split, schedule,
// microbatches, recompute, train.trace) and tensor-parallel keys
// (parallel.tp, tp_mode, tp_seq, order): a valid config loads and
// round-trips, and every rule of check_pipeline() and
// check_tensor_parallel() fails with a ConfigError naming the keys and the
// values at fault (the 1d mode's own rules: tests/parallel,
// test_tensor_parallel_mode.cpp); parallel.zero likewise.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "base/error.h"
#include "io/config.h"

namespace ndt {
namespace {

// The ConfigError message of load_config("", overrides); fails the test if
// it throws nothing.
std::string override_error(const std::vector<std::string>& overrides) {
  try {
    load_config("", overrides);
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

// A GPT of `depth` blocks on synthetic data, plus `more` overrides.
std::vector<std::string> gpt(int depth, std::vector<std::string> more) {
  std::vector<std::string> out = {
      "model.kind=gpt",
      "data.name=synthetic",
      "model.depth=" + std::to_string(depth)};
  out.insert(out.end(), more.begin(), more.end());
  return out;
}

TEST(ConfigPipeline, Defaults) {
  Config c = load_config("", {});
  EXPECT_EQ(c.parallel.pp, 1);
  EXPECT_EQ(c.parallel.pp_chunks, 1);
  EXPECT_TRUE(c.parallel.pp_split.empty());
  EXPECT_EQ(c.parallel.schedule, PipeSchedule::kOneFOneB);
  EXPECT_EQ(c.parallel.microbatches, 1);
  EXPECT_EQ(c.parallel.recompute, Recompute::kNone);
  EXPECT_FALSE(c.train.trace);
}

TEST(ConfigPipeline, ValidPipelineLoads) {
  Config c = load_config(
      "",
      gpt(8,
          {"parallel.dp=2",
           "parallel.pp=2",
           "parallel.pp_chunks=2",
           "parallel.pp_split=[1, 3, 3, 1]",
           "parallel.schedule=interleaved",
           "parallel.microbatches=4",
           "parallel.recompute=block",
           "train.trace=true",
           "train.batch_size=16"}));
  EXPECT_EQ(c.parallel.dp, 2);
  EXPECT_EQ(c.parallel.pp, 2);
  EXPECT_EQ(c.parallel.pp_chunks, 2);
  EXPECT_EQ(c.parallel.pp_split, (std::vector<int>{1, 3, 3, 1}));
  EXPECT_EQ(c.parallel.schedule, PipeSchedule::kInterleaved);
  EXPECT_EQ(c.parallel.microbatches, 4);
  EXPECT_EQ(c.parallel.recompute, Recompute::kBlock);
  EXPECT_TRUE(c.train.trace);
  EXPECT_EQ(
      config_to_json(config_from_json(config_to_json(c))), config_to_json(c));

  // Every schedule with one chunk; pp as large as the blocks allow.
  for (const char* s : {"naive", "gpipe", "1f1b", "interleaved"}) {
    SCOPED_TRACE(s);
    Config k = load_config(
        "",
        gpt(4,
            {"parallel.pp=4",
             "parallel.microbatches=2",
             std::string("parallel.schedule=") + s}));
    EXPECT_STREQ(to_string(k.parallel.schedule), s);
  }
  // An MLP with dropout has two blocks per hidden layer (linear, dropout).
  EXPECT_NO_THROW(load_config(
      "", {"model.hidden=[64, 32]", "model.dropout=0.1", "parallel.pp=4"}));
}

TEST(ConfigPipeline, PipelineKeysNeedAPipeline) {
  for (const char* key : {"parallel.pp_chunks=2", "parallel.pp_split=[1, 1]"}) {
    SCOPED_TRACE(key);
    expect_has(
        override_error({key}),
        {"parallel.pp_chunks and parallel.pp_split need a pipeline "
         "(parallel.pp > 1)"});
  }
  // Recompute serves any layout.
  EXPECT_EQ(
      load_config("", {"parallel.recompute=block"}).parallel.recompute,
      Recompute::kBlock);
}

TEST(ConfigPipeline, ChunksNeedInterleavedSchedule) {
  for (const char* s : {"naive", "gpipe", "1f1b"}) {
    SCOPED_TRACE(s);
    expect_has(
        override_error(
            gpt(8,
                {"parallel.pp=2",
                 "parallel.pp_chunks=2",
                 std::string("parallel.schedule=") + s})),
        {"parallel.pp_chunks=2",
         "needs parallel.schedule=interleaved",
         std::string("got ") + s});
  }
}

// One key splits a replica's batch, with or without a pipeline; the old
// key names its replacement.
TEST(ConfigPipeline, MicrobatchesAreTheOneKey) {
  EXPECT_NO_THROW(load_config("", {"parallel.microbatches=4"}));
  expect_has(
      override_error({"parallel.grad_accum=2"}),
      {"'parallel.grad_accum' was replaced by 'parallel.microbatches'"});
}

TEST(ConfigPipeline, ThreadsDataParallelWithPipeline) {
  expect_has(
      override_error(
          {"parallel.pp=2", "parallel.dp=2", "parallel.dp_mode=threads"}),
      {"parallel.pp=2 needs parallel.dp_mode=mpi"});
}

TEST(ConfigPipeline, MoreStagesThanBlocks) {
  // Default MLP: two hidden layers, no dropout: 2 blocks.
  expect_has(
      override_error({"parallel.pp=3"}),
      {"parallel.pp (3) x parallel.pp_chunks (1) = 3 stages",
       "model.kind mlp has only 2 blocks",
       "at most 2 stages"});
  expect_has(
      override_error(
          gpt(6,
              {"parallel.pp=2",
               "parallel.pp_chunks=4",
               "parallel.schedule=interleaved"})),
      {"parallel.pp (2) x parallel.pp_chunks (4) = 8 stages",
       "model.kind gpt has only 6 blocks",
       "at most 6 stages"});
  expect_has(
      override_error({"model.kind=vit", "model.depth=2", "parallel.pp=4"}),
      {"= 4 stages", "model.kind vit has only 2 blocks"});
}

TEST(ConfigPipeline, SplitMustMatchStagesAndBlocks) {
  // Wrong length (sum right).
  expect_has(
      override_error(gpt(4, {"parallel.pp=2", "parallel.pp_split=[1, 1, 2]"})),
      {"parallel.pp_split has 3 entries summing to 4",
       "parallel.pp x parallel.pp_chunks = 2 entries",
       "the model's 4 blocks"});
  // Wrong sum (length right).
  expect_has(
      override_error(gpt(4, {"parallel.pp=2", "parallel.pp_split=[1, 2]"})),
      {"parallel.pp_split has 2 entries summing to 3",
       "= 2 entries",
       "the model's 4 blocks"});
  // With chunks: pp x pp_chunks entries.
  expect_has(
      override_error(
          gpt(8,
              {"parallel.pp=2",
               "parallel.pp_chunks=2",
               "parallel.schedule=interleaved",
               "parallel.pp_split=[4, 4]"})),
      {"parallel.pp_split has 2 entries summing to 8",
       "parallel.pp x parallel.pp_chunks = 4 entries"});
  // Each entry >= 1.
  expect_has(
      override_error(gpt(4, {"parallel.pp=2", "parallel.pp_split=[0, 4]"})),
      {"config key 'parallel.pp_split' entries must be >= 1, got 0"});
}

TEST(ConfigPipeline, BatchMustSplitOverReplicasAndMicroBatches) {
  expect_has(
      override_error(
          gpt(4,
              {"parallel.dp=2",
               "parallel.pp=2",
               "parallel.microbatches=3",
               "train.batch_size=16"})),
      {"train.batch_size (16)",
       "parallel.dp (2) x parallel.microbatches (3) = 6"});
  EXPECT_NO_THROW(load_config(
      "",
      gpt(4,
          {"parallel.dp=2",
           "parallel.pp=2",
           "parallel.microbatches=3",
           "train.batch_size=18"})));
}

TEST(ConfigPipeline, BadEnumsListAllowedValues) {
  expect_has(
      override_error({"parallel.schedule=zigzag"}),
      {"config key 'parallel.schedule' must be one of naive, gpipe, 1f1b, "
       "interleaved, got 'zigzag'"});
  expect_has(
      override_error({"parallel.recompute=full"}),
      {"config key 'parallel.recompute' must be one of none, block, got "
       "'full'"});
}

TEST(ConfigTensorParallel, ValidHybridLoads) {
  Config c = load_config(
      "",
      gpt(4,
          {"model.heads=4",
           "parallel.tp=2",
           "parallel.tp_seq=true",
           "parallel.dp=2",
           "parallel.pp=2",
           "parallel.microbatches=2",
           "parallel.order=tp,pp,dp"}));
  EXPECT_EQ(c.parallel.tp, 2);
  EXPECT_EQ(c.parallel.tp_mode, TpMode::k1d);
  EXPECT_TRUE(c.parallel.tp_seq);
  EXPECT_EQ(c.parallel.order, "tp,pp,dp");
  Config back = config_from_json(config_to_json(c));
  EXPECT_EQ(config_to_json(back), config_to_json(c));
}

TEST(ConfigTensorParallel, RejectsWhatCannotSplit) {
  expect_has(
      override_error(gpt(2, {"parallel.tp_seq=true"})),
      {"parallel.tp_seq", "parallel.tp > 1"});
  expect_has(
      override_error(gpt(2, {"parallel.order=dp,tp"})),
      {"parallel.order", "dp,tp"});
  expect_has(
      override_error(gpt(2, {"parallel.tp_mode=4d"})),
      {"parallel.tp_mode", "1d", "2d", "2.5d", "3d"});
}

TEST(ConfigZero, ValuesAndLayouts) {
  EXPECT_EQ(load_config("", {}).parallel.zero, 0);
  EXPECT_EQ(
      load_config("", {"parallel.dp=2", "parallel.zero=1"}).parallel.zero, 1);
  // One replica: nothing to shard over, and nothing to reject.
  EXPECT_NO_THROW(load_config("", {"parallel.zero=1"}));
  EXPECT_EQ(
      load_config("", {"parallel.dp=2", "parallel.zero=2"}).parallel.zero, 2);
  EXPECT_EQ(
      load_config("", {"parallel.dp=2", "parallel.zero=3"}).parallel.zero, 3);
  expect_has(override_error({"parallel.zero=4"}), {"parallel.zero", "4"});
  // Stages 2 and 3 with pipelines, also interleaved.
  for (const char* stage : {"parallel.zero=2", "parallel.zero=3"}) {
    EXPECT_NO_THROW(load_config(
        "",
        gpt(4,
            {stage,
             "parallel.pp=2",
             "parallel.dp=2",
             "parallel.microbatches=2"})));
    EXPECT_NO_THROW(load_config(
        "",
        gpt(4,
            {stage,
             "parallel.pp=2",
             "parallel.pp_chunks=2",
             "parallel.schedule=interleaved",
             "parallel.microbatches=2"})));
  }
  expect_has(
      override_error(
          {"parallel.zero=1", "parallel.dp=2", "parallel.dp_mode=threads"}),
      {"parallel.zero=1", "parallel.dp_mode=mpi", "threads"});
  // Every layout of MPI ranks.
  EXPECT_NO_THROW(load_config(
      "", gpt(4, {"parallel.zero=1", "parallel.pp=2", "parallel.dp=2"})));
  EXPECT_NO_THROW(load_config(
      "",
      gpt(4,
          {"parallel.zero=1",
           "parallel.tp=2",
           "parallel.dp=2",
           "model.heads=4"})));
  EXPECT_NO_THROW(
      load_config("", gpt(2, {"parallel.zero=1", "parallel.sp=2"})));
}

}  // namespace
}  // namespace ndt
