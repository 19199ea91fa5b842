#include "parallel/buckets.h"

#include <algorithm>
#include <numeric>

#include "base/check.h"

namespace ndt {

std::vector<Bucket> assign_buckets(
    const std::vector<int64_t>& numels,
    int64_t bucket_bytes,
    const std::vector<bool>& starts,
    int owners) {
  NDT_ASSERT(bucket_bytes > 0);
  NDT_ASSERT(owners >= 1, "owners ", owners);
  NDT_ASSERT(starts.empty() || starts.size() == numels.size());
  int64_t limit = bucket_bytes;
  if (owners > 1) {
    const int64_t total =
        std::accumulate(numels.begin(), numels.end(), int64_t{0});
    const int64_t parts = int64_t{kBucketsPerOwner} * owners;
    limit =
        std::min(limit, std::max<int64_t>(4, (4 * total + parts - 1) / parts));
  }
  std::vector<Bucket> out;
  Bucket cur;
  for (size_t i = 0; i < numels.size(); ++i) {
    if (!starts.empty() && starts[i] && !cur.params.empty()) {
      out.push_back(std::move(cur));
      cur = Bucket();
    }
    cur.params.push_back(static_cast<int>(i));
    cur.offsets.push_back(cur.numel);
    cur.numel += numels[i];
    if (cur.numel * 4 >= limit) {
      out.push_back(std::move(cur));
      cur = Bucket();
    }
  }
  if (!cur.params.empty())
    out.push_back(std::move(cur));
  return out;
}

std::vector<bool> split_at_gaps(
    const std::vector<int>& module_of, const std::vector<bool>& held) {
  std::vector<bool> out(module_of.size(), false);
  for (size_t i = 1; i < module_of.size(); ++i) {
    for (int m = module_of[i] + 1; m < module_of[i - 1]; ++m) {
      if (!held.at(m))
        out[i] = true;
    }
  }
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

std::vector<ModuleSpan> bucket_spans(
    const std::vector<Bucket>& buckets, const std::vector<int>& module_of) {
  std::vector<ModuleSpan> out;
  for (const Bucket& b : buckets)
    out.push_back(
        {module_of.at(b.params.front()), module_of.at(b.params.back())});
  return out;
}

std::vector<std::vector<int>> buckets_of_units(
    const std::vector<ModuleSpan>& spans, int num_units) {
  std::vector<std::vector<int>> out(num_units);
  for (size_t b = 0; b < spans.size(); ++b) {
    for (int u = spans[b].last; u <= spans[b].first; ++u)
      out.at(u).push_back(static_cast<int>(b));
  }
  return out;
}

Slots assign_slots(
    const std::vector<Bucket>& buckets,
    const std::vector<ModuleSpan>& spans,
    const std::vector<int>& owners,
    int rank) {
  NDT_ASSERT(
      spans.size() == buckets.size() && owners.size() == buckets.size(),
      "assign_slots: ",
      buckets.size(),
      " buckets, ",
      spans.size(),
      " spans, ",
      owners.size(),
      " owners");
  Slots out;
  out.slot_of.assign(buckets.size(), -1);
  std::vector<int> user;  // per slot: the bucket that took it last
  for (size_t b = 0; b < buckets.size(); ++b) {
    NDT_ASSERT(spans[b].first >= spans[b].last, "bucket ", b, " span");
    if (owners[b] == rank)
      continue;
    int best = -1;
    if (static_cast<int>(user.size()) >= kMinSlots) {
      for (size_t s = 0; s < user.size(); ++s) {
        const int u = user[s];
        if (spans[u].last > spans[b].first + 1 &&
            (best < 0 || spans[u].last > spans[user[best]].last))
          best = static_cast<int>(s);
      }
    }
    if (best < 0) {
      best = static_cast<int>(user.size());
      user.push_back(-1);
      out.capacity.push_back(0);
    }
    user[best] = static_cast<int>(b);
    out.slot_of[b] = best;
    out.capacity[best] = std::max(out.capacity[best], buckets[b].numel);
  }
  return out;
}

Slots assign_value_slots(
    const std::vector<Bucket>& buckets,
    const std::vector<ModuleSpan>& spans,
    const std::vector<int>& owners,
    int rank) {
  Slots out =
      assign_slots(buckets, spans, std::vector<int>(buckets.size(), -1), rank);
  std::fill(out.capacity.begin(), out.capacity.end(), 0);
  for (size_t b = 0; b < buckets.size(); ++b) {
    int64_t& c = out.capacity[out.slot_of[b]];
    if (owners.at(b) != rank)
      c = std::max(c, buckets[b].numel);
  }
  return out;
}

}  // namespace ndt
