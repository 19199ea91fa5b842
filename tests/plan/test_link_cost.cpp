// The alpha-beta link model (plan/link_cost.h): the fit recovers the
// parameters of times the model itself made, stays close under noise,
// reports a large error for times the model cannot describe, and refuses
// what it cannot fit. bench/hosts_comm.sh fits it to measured links.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/error.h"
#include "plan/link_cost.h"

namespace ndt {
namespace {

const std::vector<int64_t> kSizes = {
    4096, 16384, 65536, 262144, 1 << 20, 4 << 20, 16 << 20};

std::vector<double> times(const LinkCost& link, int ranks) {
  std::vector<double> t;
  for (int64_t b : kSizes)
    t.push_back(all_reduce_seconds(link, ranks, b));
  return t;
}

TEST(LinkCost, ModelIsTheRing) {
  const LinkCost link{20e-6, 1.0 / 1.25e9};
  // 2 ranks: 2 rounds of half the buffer; 4 ranks: 6 rounds of a quarter.
  EXPECT_DOUBLE_EQ(
      all_reduce_seconds(link, 2, 1000), 2 * 20e-6 + 1000 / 1.25e9);
  EXPECT_DOUBLE_EQ(
      all_reduce_seconds(link, 4, 1000), 6 * 20e-6 + 1.5 * 1000 / 1.25e9);
}

TEST(LinkCost, FitRecoversTheModelsOwnTimes) {
  for (int ranks : {2, 4, 8}) {
    const LinkCost link{35e-6, 1.0 / 0.9e9};
    const LinkFit fit = fit_link_cost(ranks, kSizes, times(link, ranks));
    EXPECT_NEAR(fit.link.alpha_s / link.alpha_s, 1.0, 1e-9) << ranks;
    EXPECT_NEAR(fit.link.beta_s_per_byte / link.beta_s_per_byte, 1.0, 1e-9);
    EXPECT_LT(fit.max_rel_error, 1e-9);
  }
}

TEST(LinkCost, FitUnderNoiseStaysWithinTheNoise) {
  const LinkCost link{25e-6, 1.0 / 2.0e9};
  std::vector<double> t = times(link, 2);
  for (size_t i = 0; i < t.size(); ++i)
    t[i] *= i % 2 == 0 ? 1.03 : 0.97;  // +-3%
  const LinkFit fit = fit_link_cost(2, kSizes, t);
  EXPECT_LT(fit.max_rel_error, 0.06);
  EXPECT_NEAR(fit.link.alpha_s / link.alpha_s, 1.0, 0.1);
  EXPECT_NEAR(fit.link.beta_s_per_byte / link.beta_s_per_byte, 1.0, 0.1);
}

// The error it reports can fail a bench: times growing with the square of
// the size are no alpha-beta link.
TEST(LinkCost, FitReportsTimesTheModelCannotDescribe) {
  std::vector<double> t;
  for (int64_t b : kSizes)
    t.push_back(1e-5 + 1e-17 * static_cast<double>(b) * static_cast<double>(b));
  EXPECT_GT(fit_link_cost(2, kSizes, t).max_rel_error, 0.5);
}

TEST(LinkCost, NegativeCoefficientsAreClampedToZero) {
  // Pure bandwidth: a tiny negative alpha would fit best; alpha = 0 wins.
  std::vector<double> t;
  for (int64_t b : kSizes)
    t.push_back(static_cast<double>(b) / 1e9 - 1e-9);
  const LinkFit fit = fit_link_cost(2, kSizes, t);
  EXPECT_EQ(fit.link.alpha_s, 0);
  EXPECT_GT(fit.link.beta_s_per_byte, 0);
}

TEST(LinkCost, RefusesWhatItCannotFit) {
  EXPECT_THROW(fit_link_cost(1, kSizes, times({1e-5, 1e-9}, 2)), ConfigError);
  EXPECT_THROW(fit_link_cost(2, {4096, 4096}, {1e-5, 1e-5}), ConfigError);
  EXPECT_THROW(fit_link_cost(2, {4096, 8192}, {1e-5, 0}), ConfigError);
  EXPECT_THROW(fit_link_cost(2, {4096, 8192}, {1e-5}), ConfigError);
}

}  // namespace
}  // namespace ndt
