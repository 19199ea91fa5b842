// The MPI backend's operations (detail::MpiOp), as MPI requests:
//
//   make_nbc_op       a chunked MPI nonblocking collective: chunk k is
//                     started by post(k, &request), one chunk per round
//   make_schedule_op  one of our round schedules (ring_algorithms.h),
//                     held inline by a ScheduleOp, over MPI_Irecv /
//                     MPI_Isend on the communicator of its lane
//   make_p2p_op       send or recv: every piece of at most chunk_bytes
//                     posted at once on the point-to-point communicator
//
// Collective ops run up to RoundSchedule::kMaxDepth rounds in flight and
// only while at the front of their lane's queue (mpi_progress.h).
// Internal to the backend: includes <mpi.h>.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "comm/mpi_progress.h"
#include "comm/ring_algorithms.h"

namespace ndt::detail {

// The RingGroup a schedule of group s on `lane` sees: the group's rank,
// size and chunk_bytes, the lane's scratch.
RingGroup ring_group(MpiGroupState& s, MpiLane& lane);

// A sequence of rounds, each a few nonblocking MPI requests posted
// together. Up to kDepth rounds are in flight; round k may start only after
// round k - lag has finished (lag 0: no dependency).
class RoundOp : public MpiOp {
 public:
  RoundOp(MpiGroupState& s, MpiLane& lane, OpType type)
      : MpiOp(s, &lane, type) {}

  bool advance() override;

 protected:
  static constexpr int kDepth = RoundSchedule::kMaxDepth;
  static constexpr int kMaxReqs = RoundSchedule::kMaxMsgs;

  void set_rounds(int64_t rounds, int64_t lag) {
    rounds_ = rounds;
    lag_ = lag;
  }
  // Posts round k's requests (at most kMaxReqs) into reqs; returns how
  // many.
  virtual int post(int64_t k, MPI_Request* reqs) = 0;
  // Round k's requests have completed.
  virtual void finish(int64_t /*k*/) {}

  // Posts msgs[0..n) on the lane's communicator into reqs.
  void post_msgs(const RoundMsg* msgs, int n, MPI_Request* reqs);

 private:
  int64_t rounds_ = 0;
  int64_t lag_ = 0;
  int64_t started_ = 0;
  int64_t finished_ = 0;
  MPI_Request reqs_[kDepth][kMaxReqs];
  int nreq_[kDepth] = {0, 0};
};

// Runs round schedule S, held inline (one allocation per operation).
template <typename S>
class ScheduleOp final : public RoundOp {
 public:
  template <typename... Args>
  ScheduleOp(MpiGroupState& s, MpiLane& lane, OpType type, Args&&... args)
      : RoundOp(s, lane, type), schedule_(std::forward<Args>(args)...) {
    set_rounds(schedule_.rounds(), schedule_.lag());
  }

 protected:
  int post(int64_t k, MPI_Request* reqs) override {
    RoundMsg msgs[kMaxReqs];
    const int n = schedule_.post(k, msgs);
    post_msgs(msgs, n, reqs);
    return n;
  }
  void finish(int64_t k) override {
    schedule_.finish(k);
  }

 private:
  S schedule_;
};

// post(k, request) starts chunk k on lane.coll.
std::shared_ptr<MpiOp> make_nbc_op(
    MpiGroupState& s,
    MpiLane& lane,
    OpType type,
    int64_t chunks,
    std::function<void(int64_t, MPI_Request*)> post);

// Schedule S (ring_algorithms.h) for group s on lane, constructed from
// (ring_group(s, lane), args...).
template <typename S, typename... Args>
std::shared_ptr<MpiOp> make_schedule_op(
    MpiGroupState& s, MpiLane& lane, OpType type, Args&&... args) {
  return std::make_shared<ScheduleOp<S>>(
      s, lane, type, ring_group(s, lane), std::forward<Args>(args)...);
}

// type kSend or kRecv; buf is only read for a send.
std::shared_ptr<MpiOp> make_p2p_op(
    MpiGroupState& s,
    OpType type,
    float* buf,
    int64_t count,
    int peer,
    int tag);

}  // namespace ndt::detail
