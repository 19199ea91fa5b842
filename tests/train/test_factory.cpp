// make_lr_schedule: optim.scale_lr and optim.warmup_epochs resolved
// against the batch size and the epoch length.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "io/config.h"
#include "train/factory.h"

namespace ndt {
namespace {

Config config(const std::vector<std::string>& overrides) {
  return load_config("", overrides);
}

// The peak rate at batch 512 of optim.lr 0.01 given at batch 128.
float rate_at_512(const std::string& scaling) {
  std::vector<std::string> o = {"train.batch_size=512", "optim.lr=0.01"};
  if (scaling != "none") {
    o.push_back("optim.scale_lr=" + scaling);
    o.push_back("optim.base_batch=128");
  }
  return make_lr_schedule(config(o), 60000).lr;
}

TEST(MakeLrSchedule, ScalesTheRateFromTheBaseBatch) {
  EXPECT_FLOAT_EQ(rate_at_512("none"), 0.01f);
  EXPECT_FLOAT_EQ(rate_at_512("linear"), 0.04f);
  EXPECT_FLOAT_EQ(rate_at_512("sqrt"), 0.02f);
}

TEST(MakeLrSchedule, WarmupEpochsRoundUpToSteps) {
  // 1.5 epochs of 60000 samples at batch 128: 703.125 -> 704 steps.
  const LrScheduleOptions o = make_lr_schedule(
      config(
          {"train.batch_size=128",
           "train.steps=5000",
           "optim.warmup_steps=0",
           "optim.warmup_epochs=1.5"}),
      60000);
  EXPECT_EQ(o.warmup, 704);
  EXPECT_EQ(o.total, 5000);
  const LrScheduleOptions s = make_lr_schedule(
      config({"train.steps=5000", "optim.warmup_steps=300"}), 60000);
  EXPECT_EQ(s.warmup, 300);
}

TEST(MakeLrSchedule, WarmupLongerThanTheRunIsAConfigError) {
  try {
    make_lr_schedule(
        config(
            {"train.batch_size=1000",
             "train.steps=60",
             "optim.warmup_steps=0",
             "optim.warmup_epochs=1"}),
        60000);
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(
        std::string(e.what()).find(
            "optim.warmup_epochs (1) is 60 steps of batch 1000 over 60000 "
            "training samples; it must be less than train.steps (60)"),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ndt
