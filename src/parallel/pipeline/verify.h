// verify_schedule: simulates all pipeline ranks of a Schedule together and
// checks that it is a correct training step:
//   - every (micro-batch, chunk) has exactly one forward and one backward on
//     its rank, the backward after the forward;
//   - a forward of virtual stage 0 follows the micro-batch's kLoadMicroBatch
//     on that rank, any other forward follows the kRecvAct of its input; the
//     backward of the last virtual stage follows the kLoadMicroBatch (the
//     targets) and its own forward, any other backward follows the kRecvGrad
//     of its output gradient;
//   - every send goes to the rank of the neighbouring virtual stage, after
//     the compute that produced it, and is received exactly once, by the
//     matching receive (same micro-batch, neighbouring chunk), in FIFO order
//     per (sender, receiver, kind) channel; no message is left unreceived;
//   - a send's wait (kWaitSendAct / kWaitSendGrad) comes after the send, at
//     most once, with the send's peer;
//   - no deadlock: sends never block, a receive blocks until its message was
//     sent, a send's wait until the message was received; the simulation
//     must finish every list;
//   - kReduceGrads comes after the rank's last backward, kOptimizerStep
//     last, each exactly once;
//   - the peak number of in-flight (forward done, backward not) pairs per
//     rank stays within schedule.max_in_flight.
// The simulation also times the schedule (forward t_f, backward t_b per
// micro-batch and chunk, communication free), which gives the step × rank
// grid and the bubble fraction.
#pragma once

#include <string>
#include <vector>

#include "parallel/pipeline/schedules.h"

namespace ndt {

struct ScheduleReport {
  bool ok = false;
  std::string error;  // first violation: names the rank and the instruction
  std::vector<int> peak_in_flight;  // per rank
  // Waits before kReduceGrads that reached a send whose message the peer
  // had not yet received (legal, but such a wait waits for the peer; those
  // at the step's end, after kReduceGrads, may).
  int peer_waits = 0;
  double makespan = 0;  // simulated time of the whole step
  double bubble = 0;    // idle fraction: 1 - sum(busy) / (P * makespan)
  // grid[r][t]: what rank r computes in time unit t ("F3", "B3.1") or "" when
  // idle; t_f and t_b must be integers >= 1 for the grid (a backward fills
  // t_b cells).
  std::vector<std::vector<std::string>> grid;
};

ScheduleReport verify_schedule(
    const Schedule& schedule, int t_f = 1, int t_b = 2);

// The grid as text: a header line with the kind, P, M, V, then one row per
// rank ("rank 0 | F0 F1 .. B0 ..."), idle cells as "."; cells padded to one
// width; then "bubble X (theory Y)" with Y = (P - 1) / (V M + P - 1).
std::string render_grid(const Schedule& schedule, const ScheduleReport& report);

}  // namespace ndt
