#include "plan/link_measure.h"

#include <chrono>

#include "base/check.h"
#include "base/median.h"

namespace ndt {

namespace {

constexpr int kUntimed = 3;
constexpr int kTimed = 15;

}  // namespace

LinkFit measure_link_cost(ProcessGroup& group) {
  NDT_CHECK(
      group.size() >= 2,
      ConfigError,
      "measuring a link needs 2 or more ranks, the group has ",
      group.size());
  std::vector<float> buf(static_cast<size_t>(kLinkMeasureBytes.back() / 4));
  std::vector<double> seconds;
  for (const int64_t bytes : kLinkMeasureBytes) {
    const int64_t count = bytes / 4;
    std::vector<double> times;
    for (int rep = 0; rep < kUntimed + kTimed; ++rep) {
      group.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      group.all_reduce(buf.data(), count);
      double dt =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count();
      group.all_reduce(&dt, 1, ReduceOp::kMax);
      if (rep >= kUntimed)
        times.push_back(dt);
    }
    seconds.push_back(median(times));
  }
  return fit_link_cost(group.size(), kLinkMeasureBytes, seconds);
}

}  // namespace ndt
