// The MPI backend's own collective algorithms, written as round schedules
// with no MPI in them, so that they can be read and tested alone: the
// backend runs them with ScheduleOp (mpi_ops.h), and
// tests/comm/test_ring_algorithms.cpp on an in-memory exchange.
//
//   RingAllReduce<T>   in place, fp32 and fp64, sum or max
//   RingReduceScatter  sum; in (n*count) read only, out (count)
//   RingAllGather      in (count) -> out (n*count); in may be block r
//   PairwiseAllToAll   in, out (n*count)
//   ChainBroadcast     buf (count) from root, in place
//   ChainReduce        sum to root; in (count) read only, out (count, root)
//
// Here n = the group size, r = this rank; every message goes to or comes
// from a rank of the group. A schedule is a sequence of rounds; each round
// posts at most two messages (receives first) and may only start once
// round k - lag() has finished (lag 0: no dependency). The runner may
// keep up to kMaxDepth rounds in flight. Every transfer is cut into pieces
// of at most chunk_bytes. Schedules own no memory: RingAllReduce and
// RingReduceScatter take two slots of scratch from the group in their
// first round (RingGroup::scratch). Schedules that need nothing at the
// end of a round keep RoundSchedule's empty finish().
#pragma once

#include <cstddef>
#include <cstdint>

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

// Ring all-reduce, in place: n-1 reduce-scatter steps then n-1
// all-gather steps over the n segments of buf, each step cut into P pieces
// of at most chunk_bytes (round k = step k / P, piece k % P). Segment s is
// reduced as x_s + x_{s+1} + ... + x_{s-1} (each rank combining its own
// values with the partial result it receives) by rank s-1 and copied to
// every rank, so all ranks hold identical results. T: float or double.
template <typename T>
class RingAllReduce final : public RoundSchedule {
 public:
  RingAllReduce(const RingGroup& g, T* buf, int64_t count, ReduceOp op);
  int post(int64_t k, RoundMsg* msgs) override;
  void finish(int64_t k) override;

 private:
  RingGroup g_;
  T* buf_;
  int64_t count_;
  ReduceOp op_;
  int64_t parts_ = 1;
  T* scratch_ = nullptr;
  int64_t slot_elems_ = 0;
};

// Ring reduce-scatter (sum): in (n*count) is read only; out (count) holds
// the running partial sum of the block in flight, and block r at the end.
// Block s is summed as x_{s+1} + x_{s+2} + ... + x_s.
class RingReduceScatter final : public RoundSchedule {
 public:
  RingReduceScatter(
      const RingGroup& g, const float* in, float* out, int64_t count);
  int post(int64_t k, RoundMsg* msgs) override;
  void finish(int64_t k) override;

 private:
  RingGroup g_;
  const float* in_;
  float* out_;
  int64_t count_;
  int64_t parts_ = 1;
  float* scratch_ = nullptr;
  int64_t slot_elems_ = 0;
};

// Ring all-gather straight into out (n*count); in (count) may be block r
// of out.
class RingAllGather final : public RoundSchedule {
 public:
  RingAllGather(const RingGroup& g, const float* in, float* out, int64_t count);
  int post(int64_t k, RoundMsg* msgs) override;

 private:
  RingGroup g_;
  const float* in_;
  float* out_;
  int64_t count_;
  int64_t parts_ = 1;
};

// Pairwise all-to-all, in and out (n*count): step t = 1..n-1 sends block
// r+t to rank r+t and receives block r-t from rank r-t, in pieces.
class PairwiseAllToAll final : public RoundSchedule {
 public:
  PairwiseAllToAll(
      const RingGroup& g, const float* in, float* out, int64_t count);
  int post(int64_t k, RoundMsg* msgs) override;

 private:
  RingGroup g_;
  const float* in_;
  float* out_;
  int64_t count_;
  int64_t parts_ = 1;
};

extern template class RingAllReduce<float>;
extern template class RingAllReduce<double>;

// Pipelined chain broadcast from root, in place: the ranks in the order
// root, root+1, ..., root-1 each receive a piece from the previous one and
// pass it on to the next one round later. The rank at position q (root:
// 0) receives piece k-q+1 and sends piece k-q in round k, so the P pieces
// take P+n-2 rounds and every piece crosses each of the n-1 links once.
class ChainBroadcast final : public RoundSchedule {
 public:
  ChainBroadcast(const RingGroup& g, float* buf, int64_t count, int root);
  int post(int64_t k, RoundMsg* msgs) override;

 private:
  RingGroup g_;
  float* buf_;
  int64_t count_;
  int root_;
  int64_t parts_ = 1;
};

// Pipelined chain reduction (sum) to root: the ranks in the order root+1,
// root+2, ..., root-1, root each add their values to the partial sum they
// receive and pass it on one round later, so element i is summed as
// ((x_{root+1} + x_{root+2}) + ...) + x_root. The rank at position q
// (root+1: 0, root: n-1) receives piece k-q+1 and sends piece k-q in
// round k (P+n-2 rounds for P pieces). in (count) is read only; out
// (count) is written on root alone (may be null elsewhere, may be in on
// root). The partial sums pass through two slots of scratch.
class ChainReduce final : public RoundSchedule {
 public:
  ChainReduce(
      const RingGroup& g, const float* in, float* out, int64_t count, int root);
  int post(int64_t k, RoundMsg* msgs) override;
  void finish(int64_t k) override;

 private:
  RingGroup g_;
  const float* in_;
  float* out_;
  int64_t count_;
  int root_;
  int q_ = 0;  // position in the chain
  int64_t parts_ = 1;
  float* scratch_ = nullptr;
  int64_t slot_elems_ = 0;
};

}  // namespace ndt::detail
