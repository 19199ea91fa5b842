// The ndtrain binary's error paths: each bad input gives one clear message
// on stderr naming what is wrong, a non-zero exit, and nothing half written.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string output;
};

Result ndtrain(const std::string& args) {
  std::string cmd = std::string(NDT_BINARY) + " " + args + " 2>&1";
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0)
    r.output.append(buf.data(), n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() /
               ("ndt_cli_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

std::string cfg(const std::string& name) {
  return std::string(NDT_SOURCE_DIR) + "/configs/" + name;
}

TEST(Cli, UnknownKeyNamesTheKey) {
  std::string dir = temp_dir("unknown");
  Result r = ndtrain(
      "train -c " + cfg("fashion_mlp.yaml") + " optim.lrr=0.1 run.dir=" + dir);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("optim.lrr"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir));  // nothing written
}

TEST(Cli, OutOfRangeAndWrongType) {
  Result r = ndtrain("train -c " + cfg("fashion_mlp.yaml") + " train.steps=-5");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("train.steps"), std::string::npos) << r.output;
  r = ndtrain("train -c " + cfg("fashion_mlp.yaml") + " optim.lr=fast");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("optim.lr"), std::string::npos) << r.output;
}

TEST(Cli, MissingConfigFileAndUsage) {
  Result r = ndtrain("train -c /nonexistent/x.yaml");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("/nonexistent/x.yaml"), std::string::npos);
  r = ndtrain("frobnicate");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("usage"), std::string::npos);
}

TEST(Cli, MissingDataNamesTheFile) {
  std::string dir = temp_dir("nodata");
  Result r = ndtrain(
      "train -c " + cfg("fashion_mlp.yaml") +
      " data.path=/nonexistent/fmnist run.dir=" + dir);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("/nonexistent/fmnist"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir));
}

// Fashion-MNIST's decoded files go to data.cache_dir on the first run and
// come back from there on the next, with the same result to the last
// digit; data.cache=false writes nothing.
TEST(Cli, DecodedDataCacheIsWrittenOnceAndReadBack) {
  const std::string cache = temp_dir("cache");
  const std::string run =
      "verify -c " + cfg("verify/mlp.yaml") + " data.cache_dir=" + cache;
  Result first = ndtrain(run);
  ASSERT_EQ(first.code, 0) << first.output;
  ASSERT_TRUE(fs::is_directory(cache));
  std::vector<std::string> names;
  for (const auto& f : fs::directory_iterator(cache))
    names.push_back(f.path().filename().string());
  std::sort(names.begin(), names.end());
  ASSERT_EQ(names.size(), 4u);
  EXPECT_EQ(names[0].rfind("t10k-images-idx3-ubyte.", 0), 0u);
  EXPECT_EQ(names[3].rfind("train-labels-idx1-ubyte.", 0), 0u);
  const auto written = fs::last_write_time(cache + "/" + names[2]);
  Result second = ndtrain(run);
  ASSERT_EQ(second.code, 0) << second.output;
  EXPECT_EQ(second.output, first.output);
  EXPECT_EQ(fs::last_write_time(cache + "/" + names[2]), written);
  fs::remove_all(cache);
  Result off = ndtrain(run + " data.cache=false");
  ASSERT_EQ(off.code, 0) << off.output;
  EXPECT_EQ(off.output, first.output);
  EXPECT_FALSE(fs::exists(cache));
}

TEST(Cli, CorruptCheckpointIsRejectedClearly) {
  std::string dir = temp_dir("corrupt");
  std::string base = "train -c " + cfg("fashion_mlp.yaml") +
                     " model.hidden=[32] train.steps=2 train.batch_size=16"
                     " optim.warmup_steps=0 train.log_every=1"
                     " train.eval_samples=64 run.dir=" +
                     dir;
  Result ok = ndtrain(base);
  ASSERT_EQ(ok.code, 0) << ok.output;
  // The progress line that must not appear below does appear in training.
  ASSERT_NE(ok.output.find("step 2/2"), std::string::npos) << ok.output;
  std::string ck = dir + "/checkpoints/step-2";
  ASSERT_TRUE(fs::exists(ck + "/model.safetensors")) << ok.output;
  // Truncate the model file.
  fs::resize_file(
      ck + "/model.safetensors", fs::file_size(ck + "/model.safetensors") / 2);
  Result bad = ndtrain(base + " train.steps=4 train.resume=" + ck);
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.output.find("model.safetensors"), std::string::npos)
      << bad.output;
  EXPECT_EQ(bad.output.find("step 3/4"), std::string::npos);  // no training
  // A model that does not match the checkpoint.
  Result ok2 = ndtrain(base + " run.dir=" + dir + "2");
  ASSERT_EQ(ok2.code, 0);
  Result mismatch = ndtrain(
      base +
      " model.hidden=[48] train.steps=4 "
      "train.resume=" +
      dir + "2/checkpoints/step-2");
  EXPECT_EQ(mismatch.code, 1);
  EXPECT_NE(
      mismatch.output.find("model.hidden: checkpoint [32], config [48]"),
      std::string::npos)
      << mismatch.output;
  fs::remove_all(dir);
  fs::remove_all(dir + "2");
}

// verify --layout: each layout in turn in one process, each report the
// same to the last digit as the layout's own run, then one verdict; the
// layouts must need the same ranks, and --auto-layout excludes --layout.
TEST(Cli, VerifyLayoutsInTurnEachAsItsOwnRun) {
  const std::string base = "verify -c " + cfg("verify/mlp.yaml");
  const std::vector<std::string> layouts = {
      "parallel.dp=2 parallel.dp_mode=threads parallel.microbatches=2",
      "parallel.recompute=block"};
  Result both = ndtrain(
      base + " --layout \"" + layouts[0] + "\" --layout \"" + layouts[1] +
      "\"");
  ASSERT_EQ(both.code, 0) << both.output;
  std::string want;
  for (size_t i = 0; i < layouts.size(); ++i) {
    Result one = ndtrain(base + " " + layouts[i]);
    ASSERT_EQ(one.code, 0) << one.output;
    want += "verify: layout " + std::to_string(i + 1) + " of 2: " + layouts[i] +
            "\n" + one.output;
  }
  EXPECT_EQ(both.output, want + "verify: all 2 layouts PASS\n");

  Result r = ndtrain(
      base + " --layout parallel.dp=2 --layout \"parallel.dp=2 " +
      "parallel.dp_mode=threads\"");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(
      r.output.find("every --layout must need the same number of ranks; "
                    "layout 1 (parallel.dp=2) needs 2, layout 2"),
      std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("verify: layout 1"), std::string::npos);
  r = ndtrain(base + " --auto-layout --layout parallel.dp=2");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("--auto-layout picks one"), std::string::npos)
      << r.output;
  r = ndtrain(base + " --layout \" \"");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("--layout needs key=value"), std::string::npos)
      << r.output;
}

// The schedule's grid, checked; with --instructions each rank's list,
// the sends' waits included.
TEST(Cli, SchedulePrintsTheGridAndTheInstructions) {
  Result r = ndtrain("schedule --pp 2 --microbatches 2 --kind 1f1b");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("1f1b P=2 M=2 V=1\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("verify: PASS"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("rank 0:"), std::string::npos) << r.output;
  r = ndtrain("schedule --pp 2 --microbatches 2 --kind 1f1b --instructions");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(
      r.output.find("\nrank 0: L0 F0 SA0>1 L1 F1 SA1>1 RG0<1 WA0>1 B0 RG1<1 "
                    "WA1>1 B1 RED OPT\nrank 1: L0 RA0<0 F0 B0 SG0>0 L1 RA1<0 "
                    "F1 B1 SG1>0 RED WG0>0 WG1>0 OPT\n"),
      std::string::npos)
      << r.output;
}

// ndtrain plan: the layouts of N ranks, fastest predicted first, and the
// pick; a memory limit nothing fits names the smallest layout's need.
TEST(Cli, PlanRanksLayoutsAndPicksOne) {
  const std::string c =
      "plan -c " + cfg("verify/gpt.yaml") + " --ranks 4 --gflops 100 --top 3";
  Result r = ndtrain(c);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(
      r.output.find("ndtrain plan: gpt, 4 ranks, 100.0 GFLOP/s"),
      std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("\npick: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("pick_overrides=parallel.dp="), std::string::npos)
      << r.output;
  int rows = 0;
  for (size_t p = 0;
       (p = r.output.find("\nplan_layout ", p)) != std::string::npos;
       ++p)
    ++rows;
  EXPECT_EQ(rows, 3) << r.output;
  // The update's rate: measured with the config's optimizer, or given;
  // and the link's transfers on the ranks' cores.
  EXPECT_NE(r.output.find(" adamw update "), std::string::npos) << r.output;
  EXPECT_NE(
      r.output.find(" ns per parameter (measured here)"), std::string::npos)
      << r.output;
  r = ndtrain(c + " --update-ns-per-param 2 --comm-on-cores");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(
      r.output.find("adamw update 2.000 ns per parameter "
                    "(--update-ns-per-param)"),
      std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(" GB/s on the ranks' cores; "), std::string::npos)
      << r.output;
  r = ndtrain(c + " --memory-mib 0.01");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(
      r.output.find("error: no layout of 4 ranks fits --memory-mib "
                    "0.01: the smallest, "),
      std::string::npos)
      << r.output;
  // There the smallest is a pipeline with recompute, its activations
  // counted.
  EXPECT_NE(r.output.find(" recompute, needs "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("not modelled"), std::string::npos) << r.output;
  // One rank: the serial step needs 3.4 MiB (0.5 state, 2.9 activations),
  // with recompute 1.8; a limit between them picks recompute.
  const std::string one = "plan -c " + cfg("verify/gpt.yaml") +
                          " --ranks 1 --gflops 100 --update-ns-per-param 1";
  r = ndtrain(one);
  EXPECT_NE(r.output.find("\npick: serial "), std::string::npos) << r.output;
  r = ndtrain(one + " --memory-mib 2.5");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("\npick: recompute "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(",parallel.recompute=block\n"), std::string::npos)
      << r.output;
  // Two ranks under 1.5 MiB: dp=2 (1.9 MiB) is over; ZeRO shards the
  // state (0.4 MiB, against 0.5 unsharded) and with recompute (0.6 MiB
  // of activations) fits. Under 0.9 MiB the pipeline of 4 micro-batches
  // (0.3 MiB state, 0.5 activations) fits; under 0.7 MiB that pipeline
  // with recompute (0.3 activations).
  const std::string two = "plan -c " + cfg("verify/gpt.yaml") +
                          " --ranks 2 --gflops 100 --update-ns-per-param 1 "
                          "--top 30";
  const std::vector<std::pair<std::string, std::string>> picks = {
      {"1.5", "\npick: dp=2 zero=1 recompute (predicted 0.54 ms per step)\n"},
      {"0.9", "\npick: pp=2 (microbatches=4) (predicted 0.55 ms per step)\n"},
      {"0.7", "\npick: pp=2 (microbatches=4) recompute (predicted "}};
  for (const auto& [limit, pick] : picks) {
    r = ndtrain(two + " --memory-mib " + limit);
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find(pick), std::string::npos) << limit << r.output;
  }
  EXPECT_EQ(r.output.find("not modelled"), std::string::npos) << r.output;
  // The MLP's pipelines are modelled too: every layout shows its
  // activations, and under 0.79 MiB the pipeline (0.77 MiB of state) fits
  // with them.
  r = ndtrain(
      "plan -c " + cfg("verify/mlp.yaml") +
      " --ranks 2 --gflops 100 --update-ns-per-param 1 --top 30 "
      "--memory-mib 0.79");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find(" -\n"), std::string::npos) << r.output;
  EXPECT_NE(
      r.output.find("\npick: pp=2 (microbatches=4) (predicted 0.11 ms per "
                    "step)\n"),
      std::string::npos)
      << r.output;
  r = ndtrain("plan -c " + cfg("verify/gpt.yaml"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("--ranks"), std::string::npos) << r.output;
  // Hosts: named in the header; they must divide the ranks.
  r = ndtrain(c + " --ranks-per-host 2 --host-link-gbps 0.125");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(
      r.output.find(
          ", 2 hosts of 2 ranks linked at alpha 30.00 us, 0.125 GB/s"),
      std::string::npos)
      << r.output;
  r = ndtrain(c + " --ranks-per-host 3");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(
      r.output.find("error: --ranks-per-host 3 must divide the ranks (4)"),
      std::string::npos)
      << r.output;
}

}  // namespace
