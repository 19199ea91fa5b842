// Mesh: ranks of a world group laid out on named axes, and the process
// group of each axis (DESIGN.md principle 6). The only place where rank
// arithmetic lives; parallel layers ask the mesh for groups and coords.
//
// Layout: row-major over the axes in the order given, last axis fastest:
// with sizes [dp, pp, tp] = [2, 3, 4], rank = (dp * 3 + pp) * 4 + tp, so
// the ranks of one tp group are consecutive. Ranks are ranks of the world
// group the mesh is built on. Works over any ProcessGroup backend (groups
// come from ProcessGroup::split).
//
// Not here: which layer uses which axis, and any mode-specific layout of
// the tensor-parallel sub-axes (tp_row, tp_col, ...): those are just axes.
#pragma once

#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/process_group.h"

namespace ndt {

// Pure rank math (no communication). sizes: one entry >= 1 per axis.
// Coordinates of `rank` (0 <= rank < product(sizes)), one per axis.
std::vector<int> mesh_coords(int rank, const std::vector<int>& sizes);
// Inverse of mesh_coords.
int mesh_rank(const std::vector<int>& coords, const std::vector<int>& sizes);
// World ranks of the group of `rank` along `axes` (indices into sizes,
// distinct): the ranks sharing rank's coords on every other axis, ordered
// row-major over `axes` in the order given (last listed axis fastest).
// Position i in the result is group rank i.
std::vector<int> mesh_group_ranks(
    int rank, const std::vector<int>& sizes, const std::vector<int>& axes);

class Mesh {
 public:
  // Splits `world` once per axis (collective: every rank of world must
  // construct the same mesh at the same point). Throws ConfigError when
  // names and sizes differ in length, a name is empty or repeated, a size
  // is < 1, or product(sizes) != world.size() (naming the sizes). `world`
  // must outlive the mesh.
  Mesh(
      ProcessGroup& world,
      std::vector<int> sizes,
      std::vector<std::string> names);

  ProcessGroup& world() {
    return world_;
  }
  // My world rank and coordinates.
  int rank() const {
    return rank_;
  }
  const std::vector<int>& sizes() const {
    return sizes_;
  }
  const std::vector<std::string>& names() const {
    return names_;
  }

  // Group of the ranks that differ from me only along `axis`; group rank
  // == coord(axis). Unknown axis: ConfigError.
  ProcessGroup& group(std::string_view axis);
  // Group along several axes, ranked row-major over them in the order
  // given (e.g. {"dp", "sp"}: group rank = dp * size("sp") + sp); named
  // "dp,sp". Groups of one axis are made in the constructor; a group of
  // several axes is made on its first use, which is collective over the
  // world: every rank must make that first call, in the same order
  // relative to its other collectives on the world and on any first use
  // of another multi-axis group. Make them right after the constructor if
  // in doubt.
  ProcessGroup& group(std::initializer_list<std::string_view> axes);
  ProcessGroup& group(const std::vector<std::string>& axes);

  // My index along `axis`, and the axis length. Unknown axis: ConfigError.
  int coord(std::string_view axis) const;
  int size(std::string_view axis) const;
  // Index of `axis` in names(); ConfigError if unknown.
  int axis_index(std::string_view axis) const;
  // The names of the groups made so far (every axis, and each multi-axis
  // group after its first use), sorted.
  std::vector<std::string> group_names() const;
  // The group of a name as group_names() lists it ("dp", "tp_col,tp_row"):
  // group() of its comma-separated axes.
  ProcessGroup& named_group(std::string_view name);

 private:
  ProcessGroup& make_group(const std::vector<int>& axes);

  ProcessGroup& world_;
  std::vector<int> sizes_;
  std::vector<std::string> names_;
  int rank_ = 0;
  std::vector<int> coords_;
  std::map<std::string, std::unique_ptr<ProcessGroup>> groups_;  // by name
};

}  // namespace ndt
