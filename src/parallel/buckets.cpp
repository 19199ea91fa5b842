#include "parallel/buckets.h"

#include <algorithm>
#include <numeric>

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

std::vector<int> assign_bucket_owners(
    const std::vector<Bucket>& buckets, int ranks) {
  NDT_ASSERT(ranks >= 1, "ranks ", ranks);
  std::vector<int> order(buckets.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return buckets[a].numel > buckets[b].numel;
  });
  std::vector<int64_t> load(ranks, 0);
  std::vector<int> owner(buckets.size(), 0);
  for (int b : order) {
    const int r = static_cast<int>(
        std::min_element(load.begin(), load.end()) - load.begin());
    owner[b] = r;
    load[r] += buckets[b].numel;
  }
  return owner;
}

}  // namespace ndt
