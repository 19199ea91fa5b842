// Mesh over the MPI world: every 2- and 3-axis shape valid for the rank
// count; group sizes, coords, and that a reduction over a group sums
// exactly its members (all_gather also checks their order).
#include <gtest/gtest.h>

#include <vector>

#include "base/error.h"
#include "comm/mesh.h"
#include "mpi_env.h"

namespace ndt {
namespace {

std::vector<std::vector<int>> shapes_for(int n) {
  std::vector<std::vector<int>> out = {{n}};
  for (int a = 1; a <= n; ++a) {
    if (n % a)
      continue;
    out.push_back({a, n / a});
    for (int b = 1; b <= n / a; ++b) {
      if ((n / a) % b == 0)
        out.push_back({a, b, n / a / b});
    }
  }
  return out;
}

void check_group(ProcessGroup& g, const std::vector<int>& members, int me) {
  ASSERT_EQ(g.size(), static_cast<int>(members.size()));
  float v = static_cast<float>(me + 1);
  g.all_reduce(&v, 1);
  float expect = 0;
  for (int m : members)
    expect += static_cast<float>(m + 1);
  EXPECT_EQ(v, expect);
  float mine = static_cast<float>(me);
  std::vector<float> got(g.size(), -1.0f);
  g.all_gather(&mine, got.data(), 1);
  for (int i = 0; i < g.size(); ++i) {
    EXPECT_EQ(got[i], static_cast<float>(members[i])) << "group rank " << i;
  }
}

TEST(MpiMesh, EveryShapeOfTheWorld) {
  ProcessGroup& world = test::mpi_world();
  const int r = world.rank();
  const std::vector<std::string> all_names = {"dp", "pp", "tp"};
  for (const std::vector<int>& sizes : shapes_for(world.size())) {
    std::vector<std::string> names(
        all_names.end() - sizes.size(), all_names.end());
    SCOPED_TRACE(
        testing::Message() << "mesh with " << sizes.size() << " axes, first "
                           << sizes[0] << ", last " << sizes.back());
    Mesh mesh(world, sizes, names);
    std::vector<int> coords = mesh_coords(r, sizes);
    for (size_t a = 0; a < sizes.size(); ++a) {
      EXPECT_EQ(mesh.size(names[a]), sizes[a]);
      EXPECT_EQ(mesh.coord(names[a]), coords[a]);
      ProcessGroup& g = mesh.group(names[a]);
      EXPECT_EQ(g.rank(), coords[a]);
      EXPECT_EQ(g.name(), names[a]);
      check_group(g, mesh_group_ranks(r, sizes, {static_cast<int>(a)}), r);
    }
    if (sizes.size() == 3) {
      // Multi-axis groups: first use is collective, same order everywhere.
      check_group(
          mesh.group({"dp", "tp"}), mesh_group_ranks(r, sizes, {0, 2}), r);
      check_group(
          mesh.group({"tp", "pp"}), mesh_group_ranks(r, sizes, {2, 1}), r);
    }
  }
}

TEST(MpiMesh, SizesMustMatchTheWorld) {
  ProcessGroup& world = test::mpi_world();
  EXPECT_THROW(Mesh(world, {world.size() + 1}, {"dp"}), ConfigError);
  Mesh mesh(world, {world.size(), 1}, {"dp", "tp"});
  EXPECT_THROW(mesh.group("sp"), ConfigError);
}

}  // namespace
}  // namespace ndt
