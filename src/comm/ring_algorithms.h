// The MPI backend's own collective algorithms, written as round schedules
// with no MPI in them, so that they can be read and tested alone (the
// backend runs them in mpi_ops.cpp; tests/comm/test_ring_algorithms.cpp
// runs them on an in-memory exchange):
//
//   ring_all_reduce      in place, fp32 and fp64, sum or max
//   ring_reduce_scatter  sum; in (n*count) read only, out (count)
//   ring_all_gather      in (count) -> out (n*count); in may be block r
//   pairwise_all_to_all  in, out (n*count)
//
// Here n = the group size, r = this rank; every message goes to or comes
// from a rank of the group. A schedule is a sequence of rounds; each round
// posts at most two messages (receives first) and may only start once
// round k - lag() has finished (lag 0: no dependency). The runner may
// keep up to kMaxDepth rounds in flight. Every transfer is cut into pieces
// of at most chunk_bytes. Schedules own no memory: ring_all_reduce and
// ring_reduce_scatter take two slots of scratch from the group in their
// first round (RingGroup::scratch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "comm/reduce_op.h"

namespace ndt::detail {

enum class ElemType { kFloat, kDouble };

// One message of a round: receive `len` elements from group rank `peer`
// into `buf`, or send `len` elements of `buf` to it.
struct RoundMsg {
  bool send = false;
  int peer = 0;
  void* buf = nullptr;  // read only for a send
  int64_t len = 0;
  ElemType type = ElemType::kFloat;
};

// Scratch memory of a group: get(bytes) returns at least `bytes` that stay
// valid until the schedule asking is done. Schedules ask in round 0 only.
class ScratchSource {
 public:
  virtual void* get(size_t bytes) = 0;

 protected:
  ~ScratchSource() = default;
};

// What a schedule knows of the group it runs on.
struct RingGroup {
  int rank = 0;
  int size = 1;
  int64_t chunk_bytes = 0;
  ScratchSource* scratch = nullptr;
};

class RoundSchedule {
 public:
  // Most messages per round, and most rounds a runner keeps in flight
  // (the scratch holds that many slots).
  static constexpr int kMaxMsgs = 2;
  static constexpr int kMaxDepth = 2;

  virtual ~RoundSchedule() = default;

  int64_t rounds() const {
    return rounds_;
  }
  int64_t lag() const {
    return lag_;
  }
  // Round k's messages into msgs[0..return value), in posting order.
  // Called once per round, in order of k.
  virtual int post(int64_t k, RoundMsg* msgs) = 0;
  // Round k's messages have all completed. Called once per round, in
  // order of k.
  virtual void finish(int64_t /*k*/) {}

 protected:
  void set_rounds(int64_t rounds, int64_t lag) {
    rounds_ = rounds;
    lag_ = lag;
  }

 private:
  int64_t rounds_ = 0;
  int64_t lag_ = 0;
};

// n-1 reduce-scatter steps then n-1 all-gather steps over the n segments
// of buf. Segment s is reduced as x_s + x_{s+1} + ... + x_{s-1} (each rank
// combining its own values with the partial result it receives) by rank
// s-1 and copied to every rank, so all ranks hold identical results.
std::unique_ptr<RoundSchedule> ring_all_reduce(
    const RingGroup& g, float* buf, int64_t count, ReduceOp op);
std::unique_ptr<RoundSchedule> ring_all_reduce(
    const RingGroup& g, double* buf, int64_t count, ReduceOp op);
// out holds the running partial sum of the block in flight, and block r
// at the end. Block s is summed as x_{s+1} + x_{s+2} + ... + x_s.
std::unique_ptr<RoundSchedule> ring_reduce_scatter(
    const RingGroup& g, const float* in, float* out, int64_t count);
// Straight into out; in may be block r of out.
std::unique_ptr<RoundSchedule> ring_all_gather(
    const RingGroup& g, const float* in, float* out, int64_t count);
// Step t = 1..n-1 sends block r+t to rank r+t and receives block r-t from
// rank r-t.
std::unique_ptr<RoundSchedule> pairwise_all_to_all(
    const RingGroup& g, const float* in, float* out, int64_t count);

}  // namespace ndt::detail
