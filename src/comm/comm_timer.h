// CommTimer: the wall time this rank spends inside the communication calls
// of one ProcessGroup (starting an operation, test() and wait() on its
// Work, barrier()), in total and per OpType. It includes waiting for
// slower ranks; it does not include compute that overlaps an operation in
// flight. Built on the group's observer hook (comm_observer.h): attach it
// to any group of any backend and keep using the group itself.
//
// It does not count volume (the group's CommLedger does) and does not time
// groups made by split() from the observed one.
#pragma once

#include <array>
#include <chrono>

#include "comm/comm_observer.h"
#include "comm/process_group.h"

namespace ndt {

class CommTimer final : public CommObserver {
 public:
  // Attaches itself as `group`'s observer (the group must have none) and
  // detaches on destruction. It must outlive every Work started on the
  // group while attached.
  explicit CommTimer(ProcessGroup& group);
  ~CommTimer() override;
  CommTimer(const CommTimer&) = delete;
  CommTimer& operator=(const CommTimer&) = delete;

  // Seconds inside the group's communication calls since construction or
  // the last reset(): all operations, or one OpType.
  double seconds() const;
  double seconds(OpType op) const {
    return seconds_[static_cast<size_t>(op)];
  }
  void reset() {
    seconds_ = {};
  }

  void before(OpType op, CommPhase phase) override;
  void after(OpType op, CommPhase phase) override;

 private:
  using Clock = std::chrono::steady_clock;

  ProcessGroup& group_;
  Clock::time_point start_;
  std::array<double, kNumOpTypes> seconds_{};
};

}  // namespace ndt
