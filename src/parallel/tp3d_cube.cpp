#include "parallel/tp3d_cube.h"

#include "base/check.h"

namespace ndt {
namespace {

Placement shard(const Mesh& mesh, const char* axis, int dim, int blocks) {
  Placement p;
  p.axis = axis;
  p.kind = Placement::Kind::kShard;
  p.dim = dim;
  p.parts = mesh.size(axis);
  p.index = mesh.coord(axis);
  p.blocks = blocks;
  return p;
}

}  // namespace

ProcessGroup& cube_sample_group(Mesh& mesh, CubeSide side) {
  return mesh.group({kTp3dWt, side.gather});
}

int cube_divided(const std::string& name, const char* what, int n, int parts) {
  NDT_CHECK(
      n % parts == 0,
      ConfigError,
      name,
      ": ",
      what,
      " ",
      n,
      " is not divisible by ",
      parts,
      " (3D tensor parallelism)");
  return n / parts;
}

Layout cube_layout(
    Shape global,
    int dim,
    const Mesh& mesh,
    const char* axis,
    int blocks,
    const char* sub_axis) {
  Layout l{std::move(global), {shard(mesh, axis, dim, blocks)}};
  if (sub_axis)
    l.placements.push_back(shard(mesh, sub_axis, dim, 1));
  return l;
}

}  // namespace ndt
