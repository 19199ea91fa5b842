// Mesh rank math as pure functions (no communication), and Mesh over the
// local backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "base/error.h"
#include "comm/local_process_group.h"
#include "comm/mesh.h"

namespace ndt {
namespace {

int product(const std::vector<int>& sizes) {
  int p = 1;
  for (int s : sizes)
    p *= s;
  return p;
}

// Every ordered selection of distinct axes (all subsets, all orders).
std::vector<std::vector<int>> axis_selections(int naxes) {
  std::vector<std::vector<int>> out;
  for (int mask = 1; mask < (1 << naxes); ++mask) {
    std::vector<int> axes;
    for (int a = 0; a < naxes; ++a) {
      if (mask & (1 << a))
        axes.push_back(a);
    }
    do {
      out.push_back(axes);
    } while (std::next_permutation(axes.begin(), axes.end()));
  }
  return out;
}

TEST(MeshMath, CoordsRankRoundTripRowMajor) {
  for (const std::vector<int>& sizes : std::vector<std::vector<int>>{
           {1},
           {5},
           {2, 3, 4},
           {8, 1},
           {1, 8},
           {2, 2, 2},
           {1, 5, 1},
           {3, 1, 2, 2}}) {
    for (int r = 0; r < product(sizes); ++r) {
      std::vector<int> c = mesh_coords(r, sizes);
      ASSERT_EQ(c.size(), sizes.size());
      EXPECT_EQ(mesh_rank(c, sizes), r);
      // Row-major, last axis fastest.
      int expect = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        expect = expect * sizes[i] + c[i];
      }
      EXPECT_EQ(expect, r);
    }
  }
  EXPECT_EQ(mesh_coords(17, {2, 3, 4}), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(mesh_coords(23, {2, 3, 4}), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(mesh_rank({0, 2, 1}, {2, 3, 4}), 9);
}

TEST(MeshMath, GroupRanksKnownValues) {
  const std::vector<int> sizes = {2, 3, 4};  // dp, pp, tp
  // rank 17 = (dp 1, pp 1, tp 1)
  EXPECT_EQ(
      mesh_group_ranks(17, sizes, {2}), (std::vector<int>{16, 17, 18, 19}));
  EXPECT_EQ(mesh_group_ranks(17, sizes, {1}), (std::vector<int>{13, 17, 21}));
  EXPECT_EQ(mesh_group_ranks(17, sizes, {0}), (std::vector<int>{5, 17}));
  EXPECT_EQ(
      mesh_group_ranks(17, sizes, {0, 2}),
      (std::vector<int>{4, 5, 6, 7, 16, 17, 18, 19}));
  EXPECT_EQ(
      mesh_group_ranks(17, sizes, {2, 0}),
      (std::vector<int>{4, 16, 5, 17, 6, 18, 7, 19}));
  std::vector<int> all(24);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(mesh_group_ranks(17, sizes, {0, 1, 2}), all);
}

TEST(MeshMath, GroupRanksInvariants) {
  for (const std::vector<int>& sizes : std::vector<std::vector<int>>{
           {2, 3, 4}, {8, 1}, {2, 2, 2}, {1, 5, 1}, {3, 1, 2, 2}}) {
    const int naxes = static_cast<int>(sizes.size());
    for (const std::vector<int>& axes : axis_selections(naxes)) {
      int n = 1;
      for (int a : axes)
        n *= sizes[a];
      for (int r = 0; r < product(sizes); ++r) {
        std::vector<int> members = mesh_group_ranks(r, sizes, axes);
        ASSERT_EQ(static_cast<int>(members.size()), n);
        std::vector<int> mine = mesh_coords(r, sizes);
        int pos = 0;  // my expected group rank: row-major over axes
        for (int a : axes)
          pos = pos * sizes[a] + mine[a];
        EXPECT_EQ(members[pos], r);
        for (int g = 0; g < n; ++g) {
          std::vector<int> c = mesh_coords(members[g], sizes);
          int rest = g;
          for (size_t i = axes.size(); i-- > 0;) {
            EXPECT_EQ(c[axes[i]], rest % sizes[axes[i]]);
            rest /= sizes[axes[i]];
          }
          for (int a = 0; a < naxes; ++a) {
            if (std::find(axes.begin(), axes.end(), a) == axes.end()) {
              EXPECT_EQ(c[a], mine[a]);
            }
          }
          // Every member computes the same list.
          EXPECT_EQ(mesh_group_ranks(members[g], sizes, axes), members);
        }
      }
    }
  }
}

TEST(MeshLocal, GroupsSumExactlyTheirMembers) {
  const std::vector<int> sizes = {2, 2, 2};
  run_local(8, [&](ProcessGroup& world) {
    Mesh mesh(world, sizes, {"dp", "pp", "tp"});
    const int r = world.rank();
    std::vector<int> c = mesh_coords(r, sizes);
    EXPECT_EQ(mesh.coord("dp"), c[0]);
    EXPECT_EQ(mesh.coord("tp"), c[2]);
    EXPECT_EQ(mesh.size("pp"), 2);
    const char* names[] = {"dp", "pp", "tp"};
    for (int a = 0; a < 3; ++a) {
      ProcessGroup& g = mesh.group(names[a]);
      EXPECT_EQ(g.name(), names[a]);
      EXPECT_EQ(g.size(), 2);
      EXPECT_EQ(g.rank(), c[a]);
      std::vector<int> members = mesh_group_ranks(r, sizes, {a});
      float v = static_cast<float>(r + 1);
      g.all_reduce(&v, 1);
      float expect = 0;
      for (int m : members)
        expect += static_cast<float>(m + 1);
      EXPECT_EQ(v, expect) << "axis " << names[a];
    }
    // Multi-axis group: all_gather of world ranks gives the member order.
    ProcessGroup& g = mesh.group({"tp", "dp"});
    EXPECT_EQ(g.name(), "tp,dp");
    std::vector<int> members = mesh_group_ranks(r, sizes, {2, 0});
    float me = static_cast<float>(r);
    std::vector<float> got(g.size());
    g.all_gather(&me, got.data(), 1);
    for (int i = 0; i < g.size(); ++i) {
      EXPECT_EQ(got[i], static_cast<float>(members[i]));
    }
    EXPECT_EQ(&mesh.group({"tp", "dp"}), &g);  // cached
    // By name, as group_names() lists every group made so far.
    EXPECT_EQ(&mesh.named_group("tp,dp"), &g);
    EXPECT_EQ(&mesh.named_group("pp"), &mesh.group("pp"));
    EXPECT_EQ(
        mesh.group_names(),
        (std::vector<std::string>{"dp", "pp", "tp", "tp,dp"}));
  });
}

TEST(MeshLocal, ConfigErrors) {
  run_local(2, [](ProcessGroup& world) {
    try {
      Mesh bad(world, {2, 3}, {"dp", "tp"});
      ADD_FAILURE() << "no error for sizes [2,3] on 2 ranks";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("[2,3]"), std::string::npos)
          << e.what();
    }
    EXPECT_THROW(Mesh(world, {2}, {"dp", "tp"}), ConfigError);
    EXPECT_THROW(Mesh(world, {2, 1}, {"dp", "dp"}), ConfigError);
    EXPECT_THROW(Mesh(world, {2, 0}, {"dp", "tp"}), ConfigError);
    Mesh mesh(world, {2, 1}, {"dp", "tp"});
    try {
      mesh.group("sp");
      ADD_FAILURE() << "no error for unknown axis";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("'sp'"), std::string::npos);
    }
    EXPECT_THROW(mesh.coord("pp"), ConfigError);
    EXPECT_THROW(mesh.group({"dp", "dp"}), ConfigError);
    EXPECT_EQ(mesh.group("tp").size(), 1);
  });
}

}  // namespace
}  // namespace ndt
