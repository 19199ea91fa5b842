// Tracer: timed spans of one rank's training steps (forward, backward,
// send, recv, gradient reduction, optimizer), for train.trace's Chrome
// trace (train/trace_file.h writes them) and for the pipeline benchmark's
// bubble measurement. Recording is a push_back of five numbers; only the
// steps in [first_step, first_step + steps) are kept so long runs stay
// small.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "parallel/pipeline/instr.h"

namespace ndt {

struct Span {
  Op op = Op::kForward;
  int mb = -1;
  int chunk = -1;
  int peer = -1;
  int64_t step = 0;
  double t0 = 0;  // seconds since the tracer's origin
  double t1 = 0;
};

class Tracer {
 public:
  Tracer(int64_t first_step, int64_t steps)
      : first_(first_step), end_(first_step + steps) {}

  // Seconds on this machine's steady clock (CLOCK_MONOTONIC: one clock
  // for every process of a node).
  static double clock_now() {
    return std::chrono::duration<double>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // Sets time zero to `clock` (a clock_now() value). Ranks that share one
  // value (e.g. rank 0's, sent to all) share time zero exactly on one node;
  // across nodes their clocks may differ by a constant.
  void set_origin(double clock) {
    origin_ = std::chrono::steady_clock::time_point(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(clock)));
  }
  double now() const {
    return std::chrono::duration<double>(
               std::chrono::steady_clock::now() - origin_)
        .count();
  }
  // Steps whose spans are kept.
  bool records(int64_t step) const {
    return step >= first_ && step < end_;
  }
  void add(const Span& span) {
    if (records(span.step))
      spans_.push_back(span);
  }
  const std::vector<Span>& spans() const {
    return spans_;
  }

 private:
  int64_t first_;
  int64_t end_;
  std::chrono::steady_clock::time_point origin_ =
      std::chrono::steady_clock::now();
  std::vector<Span> spans_;
};

}  // namespace ndt
