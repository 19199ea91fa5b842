// Layout: how a parameter's local block relates to its global tensor.
//
// A Layout holds the global shape and, per mesh axis the parameter is laid
// out on, whether the local block is a shard of some dimension or a
// replica. Init, checkpoint save/load and global norms (clipping, LARS/LAMB
// trust ratios) all work from this one description (DESIGN.md principle 3).
// Serial runs use Layout::full(shape): no axes, local == global.
#pragma once

#include <functional>
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
  // kShard: `dim` is `blocks` equal consecutive blocks, each split into
  // `parts`; the local block is shard `index` of every block, concatenated
  // (e.g. a fused [q; k; v] weight split by heads: blocks = 3).
  int blocks = 1;
};

struct Layout {
  Shape global_shape;
  std::vector<Placement> placements;  // empty: the local block is the whole

  static Layout full(Shape shape) {
    return Layout{std::move(shape), {}};
  }
  // Local shape: the global shape with every sharded dim divided.
  Shape local_shape() const;
  // Offset of the local block along each dim of the global tensor (only
  // for layouts without blocks > 1, where the local block is contiguous).
  std::vector<int64_t> local_offset() const;
  // Global coordinate along `dim` of each local coordinate along `dim`.
  std::vector<int64_t> global_coords(int dim) const;
  bool is_full() const;

  // Calls f(local flat index, global flat index) for every local element,
  // in local order.
  void for_each_local(const std::function<void(int64_t, int64_t)>& f) const;
  // The local block of a global tensor (a copy), and the inverse: writes
  // `local` into its place in `global`.
  Tensor take_local(const Tensor& global) const;
  void put_local(const Tensor& local, Tensor& global) const;
};

}  // namespace ndt
