// End-to-end trainer tests on real data: an interrupted-and-resumed run is
// bit-identical to an uninterrupted one, the loop allocates no fresh memory
// after its first step, and training actually learns.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "comm/local_process_group.h"
#include "comm/mesh.h"
#include "io/checkpoint.h"
#include "io/config.h"
#include "parallel/tensor_parallel_mode.h"
#include "tensor/memory.h"
#include "train/trainer.h"

namespace ndt {
namespace {

namespace fs = std::filesystem;

struct Interrupt {};

std::string temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() /
               ("ndt_trainer_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

Config small_config(const std::vector<std::string>& overrides) {
  return load_config("", overrides);
}

// Runs `steps` steps, interrupted (by an exception, like a crash) right
// after step `stop_after` when >= 0.
TrainSummary run(Config c, int64_t stop_after) {
  std::ostringstream log;
  TrainOptions o;
  o.out = &log;
  o.on_step = [&](const StepInfo& s) {
    if (s.step == stop_after)
      throw Interrupt{};
  };
  return run_training(c, o);
}

void expect_resume_bit_identical(const std::vector<std::string>& base) {
  const std::string a = temp_dir("full"), b = temp_dir("resumed");
  std::vector<std::string> oa = base, ob = base;
  oa.push_back("run.dir=" + a);
  ob.push_back("run.dir=" + b);
  ob.push_back("train.checkpoint_every=3");
  TrainSummary full = run(small_config(oa), -1);
  ASSERT_EQ(full.losses.size(), 7u);
  // Interrupted after step index 4: the step-3 checkpoint is the last one.
  EXPECT_THROW(run(small_config(ob), 4), Interrupt);
  EXPECT_EQ(latest_checkpoint(b + "/checkpoints"), b + "/checkpoints/step-3");
  ob.push_back("train.resume=latest");
  TrainSummary resumed = run(small_config(ob), -1);
  ASSERT_EQ(resumed.losses.size(), 4u);  // steps 3, 4, 5, 6
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(resumed.losses[i], full.losses[3 + i]) << "step " << 3 + i;
  }
  EXPECT_EQ(resumed.eval_loss, full.eval_loss);
  Checkpoint ca = load_checkpoint(full.checkpoint);
  Checkpoint cb = load_checkpoint(resumed.checkpoint);
  ASSERT_EQ(ca.model.size(), cb.model.size());
  for (size_t i = 0; i < ca.model.size(); ++i) {
    const Tensor& x = ca.model[i].tensor;
    const Tensor& y = cb.model[i].tensor;
    ASSERT_EQ(x.numel(), y.numel());
    EXPECT_EQ(0, std::memcmp(x.data(), y.data(), x.numel() * 4))
        << ca.model[i].name;
  }
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(Resume, MlpWithAugmentationAndDropoutIsBitIdentical) {
  expect_resume_bit_identical(
      {"model.kind=mlp",
       "model.hidden=[64]",
       "model.dropout=0.2",
       "data.augment=true",
       "train.steps=7",
       "train.batch_size=32",
       "train.eval_samples=256",
       "optim.name=sgd",
       "optim.lr=0.05",
       "optim.nesterov=true",
       "optim.warmup_steps=2",
       "train.log_every=2"});
}

TEST(Resume, GptWithDropoutIsBitIdentical) {
  expect_resume_bit_identical(
      {"model.kind=gpt",
       "data.name=fortunes",
       "model.dim=32",
       "model.depth=2",
       "model.heads=2",
       "model.mlp_dim=64",
       "model.seq_len=32",
       "model.dropout=0.1",
       "train.steps=7",
       "train.batch_size=4",
       "train.eval_samples=16",
       "optim.clip_grad_norm=0.5",
       "optim.weight_decay=0.1"});
}

TEST(TrainLoop, NoFreshAllocationAfterFirstStep) {
  const std::string dir = temp_dir("alloc");
  Config c = small_config(
      {"model.kind=vit",
       "model.dim=32",
       "model.depth=2",
       "model.heads=2",
       "model.mlp_dim=64",
       "train.steps=6",
       "train.batch_size=16",
       "train.eval_samples=32",
       "train.log_every=2",
       "run.dir=" + dir});
  std::vector<int64_t> fresh;
  TrainOptions o;
  std::ostringstream log;
  o.out = &log;
  o.on_step = [&](const StepInfo&) {
    fresh.push_back(memory_stats().fresh_allocs);
  };
  run_training(c, o);
  ASSERT_EQ(fresh.size(), 6u);
  EXPECT_EQ(fresh.back(), fresh.front()) << "steps 2..6 allocated fresh memory";
  fs::remove_all(dir);
}

// The start-up's sgemm measurement (three 768 x 768 matrices, 6.75 MiB)
// runs only where it fits under train.mem_cap_mb beside what is live: a
// small GPT under a cap 4 MiB above the live bytes trains, its log says
// the rate was not measured (before, the run ended at start-up: "an
// allocation of 2.25 MiB (other)"); without a cap the rate is printed.
TEST(TrainLoop, SgemmIsMeasuredOnlyWhereItFitsTheCap) {
  const std::string dir = temp_dir("sgemm_cap");
  const Config c = small_config(
      {"model.kind=gpt",
       "model.dim=32",
       "model.depth=1",
       "model.heads=2",
       "model.mlp_dim=64",
       "model.seq_len=16",
       "model.vocab=64",
       "data.name=synthetic",
       "train.batch_size=4",
       "train.steps=2",
       "train.threads=1",
       "run.dir=" + dir});
  struct Uncap {
    ~Uncap() {
      memory_set_cap(0);
    }
  } uncap;
  for (const bool capped : {true, false}) {
    fs::remove_all(dir);
    memory_set_cap(
        capped ? memory_stats().total_current_bytes + (int64_t{4} << 20) : 0);
    std::ostringstream log;
    TrainOptions o;
    o.out = &log;
    const TrainSummary r = run_training(c, o);
    EXPECT_EQ(r.losses.size(), 2u) << log.str();
    if (capped) {
      EXPECT_NE(log.str().find("sgemm not measured"), std::string::npos)
          << log.str();
    } else {
      EXPECT_EQ(log.str().find("sgemm not measured"), std::string::npos)
          << log.str();
      EXPECT_NE(log.str().find(" GFLOP/s\n"), std::string::npos) << log.str();
    }
  }
  fs::remove_all(dir);
}

// What rank 0 of a 2-rank run of `c` prints.
std::string rank0_log(const Config& c) {
  std::ostringstream log;
  run_local(2, [&](ProcessGroup& pg) {
    const std::unique_ptr<Mesh> mesh = make_layout_mesh(pg, c);
    std::ostringstream quiet;
    TrainOptions o;
    o.out = pg.rank() == 0 ? &log : &quiet;
    run_training(c, o, *mesh);
  });
  return log.str();
}

// The log of rank 0 of a 2-rank run of a small GPT (width 32, heads 4,
// MLP 64, 16 tokens of a 64-symbol vocabulary, batch 8) with `layout`.
std::string two_rank_log(const std::vector<std::string>& layout) {
  const std::string dir = temp_dir("two_ranks");
  std::vector<std::string> overrides = {
      "model.kind=gpt",
      "model.dim=32",
      "model.heads=4",
      "model.mlp_dim=64",
      "model.seq_len=16",
      "model.vocab=64",
      "data.name=synthetic",
      "train.batch_size=8",
      "train.threads=1",
      "run.dir=" + dir};
  overrides.insert(overrides.end(), layout.begin(), layout.end());
  const std::string log = rank0_log(small_config(overrides));
  fs::remove_all(dir);
  return log;
}

// The start-up names the tensor-parallel mode (its axes, the heads a rank
// holds) and the sequence split (core, split, tokens per rank).
TEST(TrainLoop, StartUpDescribesTensorAndSequenceParallelism) {
  const std::string tp = two_rank_log(
      {"model.depth=1",
       "train.steps=3",
       "parallel.tp=2",
       "parallel.tp_seq=true"});
  EXPECT_NE(
      tp.find("ndtrain: tensor parallel, tp=2 (1d: tp 2, sequence-split "
              "regions), 2 of 4 heads per tp rank\n"),
      std::string::npos)
      << tp;
  const std::string sp =
      two_rank_log({"model.depth=1", "train.steps=3", "parallel.sp=2"});
  EXPECT_NE(
      sp.find("ndtrain: sequence parallel, sp=2 (ring attention, zigzag "
              "split), 8 of 16 tokens per sample per rank\n"),
      std::string::npos)
      << sp;
  EXPECT_EQ(sp.find("tensor parallel"), std::string::npos) << sp;
}

// The start-up lines of rank 0 of a dp=2 GPT under ZeRO stage `stage`.
std::string zero_startup_log(int stage, int depth) {
  return two_rank_log(
      {"model.depth=" + std::to_string(depth),
       "train.steps=3",
       "parallel.dp=2",
       "parallel.zero=" + std::to_string(stage),
       "parallel.bucket_mb=0.01"});
}

// ZeRO stage 1: the start-up report says what each rank updates and what
// rank 0 holds (0.01 MiB buckets: rank 0 owns 10688 of the GPT's 21760
// parameters, AdamW keeps two states of them: 85504 bytes).
TEST(TrainLoop, ZeroReportsTheRanksShare) {
  const std::string text = zero_startup_log(1, 2);
  EXPECT_NE(
      text.find("ndtrain: ZeRO stage 1 over 2 ranks (6 buckets; parameter "
                "elements per rank 10688 11072): rank 0 updates 10688 "
                "of its 21760 parameter elements (optimizer state 0.081543 "
                "MiB)"),
      std::string::npos)
      << text;
}

// Stage 2 (6 blocks, so that slots are reused): also the gradient memory,
// its buckets' 27776 elements and the slots shared by rank 1's buckets
// (8544 elements), 36320 in all (0.13855 MiB) of the model's 55936.
TEST(TrainLoop, Zero2ReportsTheRanksGradients) {
  const std::string text = zero_startup_log(2, 6);
  EXPECT_NE(
      text.find("ndtrain: ZeRO stage 2 over 2 ranks (14 buckets; parameter "
                "elements per rank 27776 28160): rank 0 updates 27776 "
                "of its 55936 parameter elements (optimizer state 0.211914 "
                "MiB, gradients 0.13855 of 0.213379 MiB)"),
      std::string::npos)
      << text;
}

// Stage 3 (6 blocks): also the parameter memory, its buckets' 27776
// elements and the value slots (the same on both ranks, each sized by
// the other rank's buckets in it, gathered layer by layer: 8544
// elements), 36320 in all (0.13855 MiB).
TEST(TrainLoop, Zero3ReportsTheRanksParameters) {
  const std::string text = zero_startup_log(3, 6);
  EXPECT_NE(
      text.find("ndtrain: ZeRO stage 3 over 2 ranks (14 buckets; parameter "
                "elements per rank 27776 28160): rank 0 updates 27776 "
                "of its 55936 parameter elements (optimizer state 0.211914 "
                "MiB, gradients 0.13855 of 0.213379 MiB, parameters 0.13855 of "
                "0.213379 MiB)"),
      std::string::npos)
      << text;
}

// Buckets hold whole parameters: the verify MLP's first layer, 50176 of
// its 52650 parameters, closes its only bucket, so at dp=2 rank 1 owns
// nothing, and the start-up says so.
TEST(TrainLoop, ZeroNamesTheRanksThatOwnNothing) {
  const std::string dir = temp_dir("zero_idle");
  const Config c = load_config(
      std::string(NDT_SOURCE_DIR) + "/configs/verify/mlp.yaml",
      {"parallel.dp=2",
       "parallel.zero=1",
       "train.steps=3",
       "train.threads=1",
       "run.dir=" + dir});
  const std::string text = rank0_log(c);
  fs::remove_all(dir);
  EXPECT_NE(
      text.find("ndtrain: ZeRO stage 1 over 2 ranks (1 bucket; parameter "
                "elements per rank 52650 0): "),
      std::string::npos)
      << text;
  EXPECT_NE(
      text.find("\nndtrain: ZeRO: 1 of the 2 ranks (1) own no bucket and keep "
                "no optimizer state: buckets hold whole parameters, and the "
                "largest has 50176 of the 52650 elements\n"),
      std::string::npos)
      << text;
  // With buckets of 0.01 MiB both own some, and nothing is said.
  EXPECT_EQ(zero_startup_log(1, 2).find("own no bucket"), std::string::npos);
}

// A pipeline's start-up line: the blocks and the parameters of each stage
// (GPT width 32, 4 blocks of 8544 parameters; the input layer's 2560 on
// the first stage, the head's 2112 on the last).
TEST(TrainLoop, PipelineReportsEachStagesParameters) {
  const std::string text = two_rank_log(
      {"model.depth=4",
       "train.steps=2",
       "parallel.pp=2",
       "parallel.microbatches=2"});
  EXPECT_NE(
      text.find("; blocks per stage 2 2; parameters per stage 19648 "
                "19200\n"),
      std::string::npos)
      << text;
}

// Training time counts every step, also those before an evaluation or a
// checkpoint inside a logging window (before, each reset the window's
// clock and the window's earlier steps were lost: 75 of the Fashion-MNIST
// ViT config's steps at each of its evaluations). Each step here sleeps
// 40 ms; an evaluation and a checkpoint follow step 2 of a 4-step window.
TEST(TrainLoop, TrainingTimeKeepsTheStepsBeforeAnEvaluation) {
  const std::string dir = temp_dir("train_seconds");
  Config c = small_config(
      {"model.hidden=[16]",
       "train.steps=4",
       "train.batch_size=8",
       "train.log_every=4",
       "train.eval_every=2",
       "train.checkpoint_every=2",
       "train.eval_samples=16",
       "run.dir=" + dir});
  std::ostringstream log;
  TrainOptions o;
  o.out = &log;
  o.on_step = [](const StepInfo&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
  };
  TrainSummary s = run_training(c, o);
  EXPECT_GE(s.train_seconds, 4 * 0.040) << log.str();
  // The window's rate: four 8-sample steps in at least 0.16 s, at most
  // 200 samples/s (before: 397, the two steps after the evaluation).
  std::ifstream metrics(dir + "/metrics.jsonl");
  std::string line;
  nlohmann::json window;
  while (std::getline(metrics, line))
    if (nlohmann::json j = nlohmann::json::parse(line);
        j.contains("samples_per_s"))
      window = j;
  ASSERT_FALSE(window.is_null());
  EXPECT_LE(window["samples_per_s"].get<double>(), 200.0) << window.dump();
  fs::remove_all(dir);
}

TEST(TrainLoop, MlpLearnsFashionMnist) {
  const std::string dir = temp_dir("learn");
  Config c = small_config(
      {"model.hidden=[128]",
       "train.steps=150",
       "train.batch_size=64",
       "optim.lr=0.002",
       "train.eval_samples=2000",
       "run.dir=" + dir});
  std::ostringstream log;
  TrainOptions o;
  o.out = &log;
  TrainSummary s = run_training(c, o);
  // Chance is 10% / 2.30 nats; 150 steps of a 1-layer MLP reach ~80%.
  EXPECT_GT(s.eval_accuracy, 0.75) << log.str();
  EXPECT_LT(s.eval_loss, 0.7);
  EXPECT_TRUE(fs::exists(dir + "/metrics.jsonl"));
  EXPECT_NE(log.str().find("MFU"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ndt
