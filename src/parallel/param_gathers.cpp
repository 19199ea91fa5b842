#include "parallel/param_gathers.h"

#include <algorithm>

#include "base/check.h"

namespace ndt {

ParamGathers::ParamGathers(
    const std::vector<ModuleSpan>& spans,
    const std::vector<int>& slot_of,
    int num_modules)
    : spans_(spans), slot_of_(slot_of), of_module_(num_modules) {
  NDT_ASSERT(spans.size() == slot_of.size(), "ParamGathers: sizes");
  int slots = 0;
  for (size_t b = 0; b < spans.size(); ++b) {
    NDT_ASSERT(slot_of[b] >= 0, "bucket ", b, " has no slot");
    slots = std::max(slots, slot_of[b] + 1);
    for (int m = spans[b].last; m <= spans[b].first; ++m)
      of_module_.at(m).push_back(static_cast<int>(b));
  }
  holder_.assign(slots, -1);
}

std::vector<int> ParamGathers::before(int m, bool forward) {
  std::vector<int> out;
  auto fetch = [&](int b) {
    int& h = holder_[slot_of_[b]];
    if (h == b)
      return;
    // The bucket it replaces is not one that m or the next module reads
    // (assign_slots keeps a whole module between a slot's buckets).
    NDT_ASSERT(
        h < 0 || spans_[h].first < std::min(m, m + (forward ? 1 : -1)) ||
            spans_[h].last > std::max(m, m + (forward ? 1 : -1)),
        "bucket ",
        b,
        " would evict bucket ",
        h,
        " that module ",
        m,
        " or the next one reads");
    h = b;
    out.push_back(b);
  };
  for (int b : of_module_.at(m))
    fetch(b);
  const int next = forward ? m + 1 : m - 1;
  if (next >= 0 && next < static_cast<int>(of_module_.size())) {
    for (int b : of_module_[next])
      fetch(b);
  }
  return out;
}

void ParamGathers::invalidate() {
  std::fill(holder_.begin(), holder_.end(), -1);
}

}  // namespace ndt
