#include "parallel/param_gathers.h"

#include <algorithm>

#include "base/check.h"

namespace ndt {

GatherUnits gather_units(const std::vector<int>& layers, bool per_layer) {
  GatherUnits out;
  out.per_layer = per_layer;
  int next = 0;
  for (int n : layers) {
    out.first.push_back(next);
    out.count.push_back(per_layer ? std::max(n, 1) : 1);
    next += out.count.back();
  }
  return out;
}

ParamGathers::ParamGathers(
    const std::vector<ModuleSpan>& spans,
    const std::vector<int>& slot_of,
    int num_units)
    : spans_(spans),
      slot_of_(slot_of),
      of_unit_(buckets_of_units(spans, num_units)) {
  NDT_ASSERT(spans.size() == slot_of.size(), "ParamGathers: sizes");
  int slots = 0;
  for (size_t b = 0; b < spans.size(); ++b) {
    NDT_ASSERT(slot_of[b] >= 0, "bucket ", b, " has no slot");
    slots = std::max(slots, slot_of[b] + 1);
  }
  holder_.assign(slots, -1);
}

std::vector<int> ParamGathers::before(int u, bool forward) {
  std::vector<int> out;
  const int next = forward ? u + 1 : u - 1;
  auto fetch = [&](int b) {
    int& h = holder_[slot_of_[b]];
    if (h == b)
      return;
    // The bucket it replaces is not one that u or the next unit reads
    // (assign_slots keeps a whole unit between a slot's buckets).
    NDT_ASSERT(
        h < 0 || spans_[h].first < std::min(u, next) ||
            spans_[h].last > std::max(u, next),
        "bucket ",
        b,
        " would evict bucket ",
        h,
        " that gather unit ",
        u,
        " or the next one reads");
    h = b;
    out.push_back(b);
  };
  for (int b : of_unit_.at(u))
    fetch(b);
  if (next >= 0 && next < static_cast<int>(of_unit_.size())) {
    for (int b : of_unit_[next])
      fetch(b);
  }
  return out;
}

void ParamGathers::invalidate() {
  std::fill(holder_.begin(), holder_.end(), -1);
}

}  // namespace ndt
