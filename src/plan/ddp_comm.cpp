#include "plan/ddp_comm.h"

#include "parallel/buckets.h"

namespace ndt {
namespace {

bool holds(const std::vector<bool>& held, int m) {
  return held.empty() || held.at(m);
}

}  // namespace

std::vector<int64_t> ddp_bucket_numels(
    const ModelShape& shape,
    const std::vector<bool>& held,
    int64_t bucket_bytes) {
  std::vector<int64_t> numels;
  for (int m = shape.head(); m >= 0; --m) {
    if (!holds(held, m))
      continue;
    const std::vector<ParamShape>& ps = shape.modules[m].params;
    for (auto it = ps.rbegin(); it != ps.rend(); ++it)
      numels.push_back(it->numel_local);
  }
  std::vector<int64_t> out;
  for (const Bucket& b : assign_buckets(numels, bucket_bytes))
    out.push_back(b.numel);
  return out;
}

CommVolume ddp_step_comm(
    const ModelShape& shape,
    const std::vector<bool>& held,
    int dp,
    int64_t bucket_bytes) {
  CommVolume v;
  if (dp <= 1)
    return v;
  for (int64_t n : ddp_bucket_numels(shape, held, bucket_bytes))
    v.add(OpType::kAllReduce, 1, n);
  return v;
}

CommVolume ddp_startup_comm(
    const ModelShape& shape, const std::vector<bool>& held, int dp) {
  CommVolume v;
  if (dp <= 1)
    return v;
  int64_t params = 0;
  for (int m = 0; m < shape.num_modules(); ++m) {
    if (holds(held, m))
      params += static_cast<int64_t>(shape.modules[m].params.size());
  }
  v.add(OpType::kAllReduce, 2, 2 * params, kFp64Bytes);
  return v;
}

CommVolume threads_dp_step_comm(const ModelShape& shape, int dp) {
  CommVolume v;
  if (dp <= 1)
    return v;
  for (const ModuleShape& m : shape.modules) {
    for (const ParamShape& p : m.params) {
      v.add(OpType::kBroadcast, 1, p.numel_local);
      v.add(OpType::kReduce, 1, p.numel_local);
    }
  }
  return v;
}

}  // namespace ndt
