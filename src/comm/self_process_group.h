// SelfProcessGroup: a group of one rank, in any process. Every axis of a
// mesh exists in every run (DESIGN.md, Mesh and modes): an axis of size 1
// is this group, so no code asks whether a group exists. Collectives copy
// in to out where the two differ (the result of a reduction over one rank
// is its own input); point-to-point has no peer and is an error.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/mesh.h"
#include "comm/process_group.h"

namespace ndt {

// A new group of one rank named `name`; split() gives more of them.
std::unique_ptr<ProcessGroup> make_self_group(std::string name);

// The mesh of a single process: every axis in `names` has size 1 and its
// group is a group of one. Owns its world group.
class SingleRankMesh {
 public:
  explicit SingleRankMesh(const std::vector<std::string>& names);
  Mesh& mesh() {
    return *mesh_;
  }

 private:
  std::unique_ptr<ProcessGroup> world_;
  std::unique_ptr<Mesh> mesh_;
};

}  // namespace ndt
