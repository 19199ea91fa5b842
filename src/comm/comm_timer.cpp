#include "comm/comm_timer.h"

#include "base/check.h"

namespace ndt {

CommTimer::CommTimer(ProcessGroup& group) : group_(group) {
  NDT_CHECK(
      group_.observer() == nullptr,
      Error,
      "CommTimer: group ",
      group_.name(),
      " already has an observer");
  group_.set_observer(this);
}

CommTimer::~CommTimer() {
  if (group_.observer() == this)
    group_.set_observer(nullptr);
}

double CommTimer::seconds() const {
  double total = 0;
  for (double s : seconds_)
    total += s;
  return total;
}

void CommTimer::before(OpType /*op*/, CommPhase /*phase*/) {
  start_ = Clock::now();
}

void CommTimer::after(OpType op, CommPhase /*phase*/) {
  seconds_[static_cast<size_t>(op)] +=
      std::chrono::duration<double>(Clock::now() - start_).count();
}

}  // namespace ndt
