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
    NDT_ASSERT(p.blocks == 1, "local_offset of a blocked shard");
    s[p.dim] /= p.parts;
    offset[p.dim] += p.index * s[p.dim];
  }
  return offset;
}

std::vector<int64_t> Layout::global_coords(int dim) const {
  // Extent of `dim` before each placement that shards it, in order.
  std::vector<const Placement*> on_dim;
  std::vector<int64_t> extent;
  int64_t e = global_shape.at(dim);
  for (const Placement& p : placements) {
    if (p.kind != Placement::Kind::kShard || p.dim != dim)
      continue;
    NDT_ASSERT(e % (p.blocks * p.parts) == 0, "uneven blocked shard");
    on_dim.push_back(&p);
    extent.push_back(e);
    e /= p.parts;
  }
  std::vector<int64_t> out(e);
  for (int64_t i = 0; i < e; ++i) {
    // Undo the placements from the innermost (last) outwards.
    int64_t c = i;
    for (size_t k = on_dim.size(); k-- > 0;) {
      const Placement& p = *on_dim[k];
      const int64_t shard = extent[k] / (p.blocks * p.parts);
      c = (c / shard) * (extent[k] / p.blocks) + p.index * shard + c % shard;
    }
    out[i] = c;
  }
  return out;
}

void Layout::for_each_local(
    const std::function<void(int64_t, int64_t)>& f) const {
  const Shape& g = global_shape;
  const Shape l = local_shape();
  const int nd = static_cast<int>(l.size());
  std::vector<std::vector<int64_t>> coords(nd);
  for (int d = 0; d < nd; ++d)
    coords[d] = global_coords(d);
  std::vector<int64_t> idx(nd, 0);
  const int64_t n = shape_numel(l);
  for (int64_t i = 0; i < n; ++i) {
    int64_t flat = 0;
    for (int d = 0; d < nd; ++d)
      flat = flat * g[d] + coords[d][idx[d]];
    f(i, flat);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < l[d])
        break;
      idx[d] = 0;
    }
  }
}

Tensor Layout::take_local(const Tensor& global) const {
  NDT_ASSERT(global.shape() == global_shape, shape_str(global.shape()));
  Tensor out(local_shape(), MemTag::kOther);
  const float* src = global.data();
  float* dst = out.data();
  for_each_local([&](int64_t i, int64_t j) { dst[i] = src[j]; });
  return out;
}

void Layout::put_local(const Tensor& local, Tensor& global) const {
  NDT_ASSERT(global.shape() == global_shape, shape_str(global.shape()));
  NDT_ASSERT(local.shape() == local_shape(), shape_str(local.shape()));
  const float* src = local.data();
  float* dst = global.data();
  for_each_local([&](int64_t i, int64_t j) { dst[j] = src[i]; });
}

bool Layout::is_full() const {
  for (const Placement& p : placements) {
    if (p.kind == Placement::Kind::kShard && p.parts > 1)
      return false;
  }
  return true;
}

}  // namespace ndt
