// Layout: how a parameter's local block relates to its global tensor.
//
// A Layout holds the global shape and, per mesh axis the parameter is laid
// out on, whether the local block is a shard of some dimension or a
// replica. Init, checkpoint save/load and global norms (clipping, LARS/LAMB
// trust ratios) all work from this one description (DESIGN.md principle 3).
// Serial runs use Layout::full(shape): no axes, local == global.
#pragma once

#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace ndt {

struct Placement {
  enum class Kind { kReplicate, kShard };
  std::string axis;  // mesh axis name, e.g. "tp", "dp"
  Kind kind = Kind::kReplicate;
  int dim = -1;   // sharded dimension (kShard only)
  int parts = 1;  // number of shards along `dim` on this axis
  int index = 0;  // this rank's shard index along the axis
};

struct Layout {
  Shape global_shape;
  std::vector<Placement> placements;  // empty: the local block is the whole

  static Layout full(Shape shape) {
    return Layout{std::move(shape), {}};
  }
  // Local shape: the global shape with every sharded dim divided.
  Shape local_shape() const;
  // Offset of the local block along each dim of the global tensor.
  std::vector<int64_t> local_offset() const;
  bool is_full() const;
};

}  // namespace ndt
