// verify_eval_samples: verify's evaluation set is whole micro-batches on
// every data-parallel rank, about kVerifyEvalSamples of them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "io/config.h"
#include "train/verify.h"

namespace ndt {
namespace {

int64_t eval_samples(const std::vector<std::string>& overrides) {
  return verify_eval_samples(load_config("", overrides));
}

TEST(VerifyEvalSamples, WholeMicroBatchesOnEveryRank) {
  // 256 is already whole micro-batches of 16 on each of 2 ranks.
  EXPECT_EQ(eval_samples({"train.batch_size=32", "parallel.dp=2"}), 256);
  // dp=3 x micro-batches of 8: 240 (80 per rank, 10 batches), where 256
  // gave shares of 85, 85 and 86 samples, ending in batches of 5 and 6.
  EXPECT_EQ(
      eval_samples(
          {"train.batch_size=48", "parallel.dp=3", "parallel.microbatches=2"}),
      240);
  // At least one micro-batch per rank.
  EXPECT_EQ(eval_samples({"train.batch_size=512", "parallel.dp=4"}), 512);
  EXPECT_EQ(
      eval_samples({"train.batch_size=300", "parallel.microbatches=3"}), 200);
}

}  // namespace
}  // namespace ndt
