#include "parallel/buckets.h"

#include "base/check.h"

namespace ndt {

std::vector<Bucket> assign_buckets(
    const std::vector<int64_t>& numels, int64_t bucket_bytes) {
  NDT_ASSERT(bucket_bytes > 0);
  std::vector<Bucket> out;
  Bucket cur;
  for (size_t i = 0; i < numels.size(); ++i) {
    cur.params.push_back(static_cast<int>(i));
    cur.offsets.push_back(cur.numel);
    cur.numel += numels[i];
    if (cur.numel * 4 >= bucket_bytes) {
      out.push_back(std::move(cur));
      cur = Bucket();
    }
  }
  if (!cur.params.empty())
    out.push_back(std::move(cur));
  return out;
}

}  // namespace ndt
