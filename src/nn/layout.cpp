#include "nn/layout.h"

#include "base/check.h"

namespace ndt {

Shape Layout::local_shape() const {
  Shape s = global_shape;
  for (const Placement& p : placements) {
    if (p.kind != Placement::Kind::kShard)
      continue;
    NDT_ASSERT(p.dim >= 0 && p.dim < static_cast<int>(s.size()));
    NDT_ASSERT(s[p.dim] % p.parts == 0, "uneven shard of ", shape_str(s));
    s[p.dim] /= p.parts;
  }
  return s;
}

std::vector<int64_t> Layout::local_offset() const {
  std::vector<int64_t> offset(global_shape.size(), 0);
  Shape s = global_shape;
  for (const Placement& p : placements) {
    if (p.kind != Placement::Kind::kShard)
      continue;
    s[p.dim] /= p.parts;
    offset[p.dim] += p.index * s[p.dim];
  }
  return offset;
}

bool Layout::is_full() const {
  for (const Placement& p : placements) {
    if (p.kind == Placement::Kind::kShard && p.parts > 1)
      return false;
  }
  return true;
}

}  // namespace ndt
