// Link measurement over the MPI world (plan/link_measure.h): every rank
// gets the same fit, with non-negative alpha and beta, a finite fit error
// and a 4 MiB all-reduce that costs time; a group of one rank is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/error.h"
#include "mpi_env.h"
#include "plan/link_measure.h"

namespace ndt {
namespace {

TEST(MpiLinkMeasure, EveryRankGetsOneFit) {
  ProcessGroup& world = test::mpi_world();
  if (world.size() < 2) {
    EXPECT_THROW(measure_link_cost(world), ConfigError);
    return;
  }
  const LinkFit fit = measure_link_cost(world);
  EXPECT_GE(fit.link.alpha_s, 0.0);
  EXPECT_GE(fit.link.beta_s_per_byte, 0.0);
  EXPECT_TRUE(std::isfinite(fit.max_rel_error));
  // Rank 0's fit, compared on every rank.
  double mine[2] = {fit.link.alpha_s, fit.link.beta_s_per_byte};
  double rank0[2] = {0, 0};
  if (world.rank() == 0) {
    rank0[0] = mine[0];
    rank0[1] = mine[1];
  }
  world.all_reduce(rank0, 2);  // the others add 0
  EXPECT_EQ(mine[0], rank0[0]);
  EXPECT_EQ(mine[1], rank0[1]);
  // A 4 MiB all-reduce is not free: the fit charges it time.
  EXPECT_GT(
      all_reduce_seconds(fit.link, world.size(), kLinkMeasureBytes.back()),
      0.0);
}

}  // namespace
}  // namespace ndt
