// The group of one rank: every collective leaves the caller's data as a
// reduction over one rank would, the ledger records each call, and a
// single-rank mesh has a group for every axis.
#include <gtest/gtest.h>

#include <vector>

#include "base/error.h"
#include "comm/self_process_group.h"

namespace ndt {
namespace {

TEST(SelfProcessGroup, CollectivesAreTheIdentity) {
  auto g = make_self_group("world");
  EXPECT_EQ(g->rank(), 0);
  EXPECT_EQ(g->size(), 1);
  std::vector<float> x = {1, -2, 3};
  g->all_reduce(x.data(), 3);
  EXPECT_EQ(x, (std::vector<float>{1, -2, 3}));
  std::vector<double> d = {0.5, 7};
  g->all_reduce(d.data(), 2, ReduceOp::kMax);
  EXPECT_EQ(d, (std::vector<double>{0.5, 7}));
  std::vector<float> out(3, 0);
  g->all_gather(x.data(), out.data(), 3);
  EXPECT_EQ(out, x);
  out.assign(3, 0);
  g->reduce_scatter(x.data(), out.data(), 3);
  EXPECT_EQ(out, x);
  out.assign(3, 0);
  g->reduce(x.data(), out.data(), 3, 0);
  EXPECT_EQ(out, x);
  out.assign(3, 0);
  g->all_to_all(x.data(), out.data(), 3);
  EXPECT_EQ(out, x);
  g->broadcast(x.data(), 3, 0);
  EXPECT_EQ(x, (std::vector<float>{1, -2, 3}));
  g->barrier();
  const CommLedger& l = g->comm_ledger();
  EXPECT_EQ(l[OpType::kAllReduce].calls, 2);
  EXPECT_EQ(l[OpType::kAllReduce].bytes, 3 * 4 + 2 * 8);
  EXPECT_EQ(l[OpType::kAllGather].elements, 3);
  EXPECT_EQ(l[OpType::kBarrier].calls, 1);
}

TEST(SelfProcessGroup, PeersAndRootsOutsideTheGroupAreErrors) {
  auto g = make_self_group("pp");
  std::vector<float> x(4, 1);
  EXPECT_THROW(g->broadcast(x.data(), 4, 1), Error);
  EXPECT_THROW(g->send(x.data(), 4, 0, 1), CommError);
  EXPECT_THROW(g->recv(x.data(), 4, 0, 1), CommError);
}

TEST(SingleRankMesh, EveryAxisIsAGroupOfOne) {
  SingleRankMesh single({"dp", "pp", "tp"});
  Mesh& mesh = single.mesh();
  EXPECT_EQ(mesh.world().size(), 1);
  for (const char* axis : {"dp", "pp", "tp"}) {
    EXPECT_EQ(mesh.size(axis), 1);
    EXPECT_EQ(mesh.coord(axis), 0);
    EXPECT_EQ(mesh.group(axis).size(), 1);
    EXPECT_EQ(mesh.group(axis).name(), axis);
  }
  EXPECT_EQ(mesh.group({"dp", "tp"}).size(), 1);
}

}  // namespace
}  // namespace ndt
