// ProcessGroup: the collectives and point-to-point operations one group of
// ranks runs together, independent of the backend (MPI processes in
// mpi_process_group.h, threads of one process in local_process_group.h).
//
// Every operation works in place on caller-owned fp32 buffers (all_reduce
// also fp64); counts are elements, not bytes. Each has an async form that
// returns a Work and a blocking form (async + wait()). Collectives must be
// called by every rank of the group in the same order with the same counts
// (and root). Results are identical on every rank. The group does not own
// the buffers and keeps no Tensor: callers pass Tensor::data().
//
// Each group also keeps a ledger of the operations this rank started on it
// (CommLedger, Note [Comm ledger]), for measuring communication volume.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/work.h"

namespace ndt {

enum class ReduceOp { kSum, kMax };

inline constexpr int kNumOpTypes = static_cast<int>(OpType::kBarrier) + 1;

// Note [Comm ledger]
// Per OpType, what this rank asked of one group: the number of calls and
// the sum of their `count` arguments, with the meaning each operation
// gives it below (all_reduce / broadcast / reduce / send / recv: the
// buffer; reduce_scatter: the output block per rank, the input being
// size() x count; all_gather: the input per rank, the output being
// size() x count; all_to_all: the block per peer; barrier: 0), and the
// same in bytes (fp64 all_reduce: 8 per element, everything else 4). A
// call is recorded once, by the backend's *_async (or barrier()), after
// its argument checks pass; calls that move nothing (count 0, a group of
// one rank) are recorded too. split() is not an operation and is not
// recorded. Bytes on the wire depend on the algorithm (a ring all-reduce
// sends 2 (P-1)/P x the buffer per rank) and are not what is counted.
struct CommOpCount {
  int64_t calls = 0;
  int64_t elements = 0;
  int64_t bytes = 0;
};

class CommLedger {
 public:
  const CommOpCount& operator[](OpType op) const {
    return ops_[static_cast<size_t>(op)];
  }
  void record(OpType op, int64_t count, int64_t element_bytes) {
    CommOpCount& c = ops_[static_cast<size_t>(op)];
    ++c.calls;
    c.elements += count;
    c.bytes += count * element_bytes;
  }
  void reset() {
    ops_ = {};
  }

 private:
  std::array<CommOpCount, kNumOpTypes> ops_{};
};

class ProcessGroup {
 public:
  static constexpr double kDefaultTimeoutS = 300;

  explicit ProcessGroup(std::string name) : name_(std::move(name)) {}
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Axis name(s) of the group, e.g. "world", "dp", "dp,sp".
  const std::string& name() const {
    return name_;
  }
  // Watchdog bound of Work::wait(): an operation that has not completed
  // after this many seconds throws CommError. Per rank; default 300.
  double timeout_s() const {
    return timeout_s_;
  }
  void set_timeout_s(double seconds);

  // Operations this rank has started on this group since construction or
  // the last reset_comm_ledger() (Note [Comm ledger]).
  const CommLedger& comm_ledger() const {
    return ledger_;
  }
  void reset_comm_ledger() {
    ledger_.reset();
  }

  // buf: count elements, replaced by the element-wise reduction over ranks.
  virtual std::unique_ptr<Work> all_reduce_async(
      float* buf, int64_t count, ReduceOp op = ReduceOp::kSum) = 0;
  virtual std::unique_ptr<Work> all_reduce_async(
      double* buf, int64_t count, ReduceOp op = ReduceOp::kSum) = 0;
  // in: size()*count; out: count = block rank() of the sum over ranks.
  // out must not overlap in.
  virtual std::unique_ptr<Work> reduce_scatter_async(
      const float* in, float* out, int64_t count) = 0;
  // in: count; out: size()*count, block j = rank j's in. in may be block
  // rank() of out (in place).
  virtual std::unique_ptr<Work> all_gather_async(
      const float* in, float* out, int64_t count) = 0;
  // buf: count elements, root's values on return.
  virtual std::unique_ptr<Work> broadcast_async(
      float* buf, int64_t count, int root) = 0;
  // out (count, root only; may be null elsewhere) = sum over ranks of in
  // (count). On root in may equal out.
  virtual std::unique_ptr<Work> reduce_async(
      const float* in, float* out, int64_t count, int root) = 0;
  // in, out: size()*count; block j of in goes to rank j, block j of out
  // comes from rank j. out must not overlap in.
  virtual std::unique_ptr<Work> all_to_all_async(
      const float* in, float* out, int64_t count) = 0;
  // Point to point; messages between two ranks with the same tag arrive in
  // the order they were sent. 0 <= tag < 32768. The send and its matching
  // recv must have the same count.
  virtual std::unique_ptr<Work> send_async(
      const float* buf, int64_t count, int peer, int tag) = 0;
  virtual std::unique_ptr<Work> recv_async(
      float* buf, int64_t count, int peer, int tag) = 0;
  // Blocks until every rank has entered; same watchdog as wait().
  virtual void barrier() = 0;

  // Collective over this group: ranks passing the same color form a new
  // group, ordered by (key, rank in this group). Every rank must call it,
  // in the same order relative to its other collectives. The new group
  // inherits timeout_s().
  virtual std::unique_ptr<ProcessGroup> split(
      int color, int key, std::string name) = 0;

  // Advances outstanding async operations without blocking (what test()
  // on any of their Works does). Backends that need no progress calls do
  // nothing. Call it between compute steps to overlap communication.
  virtual void progress() {}

  // Blocking forms: the async call followed by wait().
  void all_reduce(float* buf, int64_t count, ReduceOp op = ReduceOp::kSum);
  void all_reduce(double* buf, int64_t count, ReduceOp op = ReduceOp::kSum);
  void reduce_scatter(const float* in, float* out, int64_t count);
  void all_gather(const float* in, float* out, int64_t count);
  void broadcast(float* buf, int64_t count, int root);
  void reduce(const float* in, float* out, int64_t count, int root);
  void all_to_all(const float* in, float* out, int64_t count);
  void send(const float* buf, int64_t count, int peer, int tag);
  void recv(float* buf, int64_t count, int peer, int tag);

 protected:
  // Each backend calls this exactly once per operation, after its argument
  // checks (Note [Comm ledger]).
  void record_op(
      OpType op,
      int64_t count,
      int64_t element_bytes = int64_t{sizeof(float)}) {
    ledger_.record(op, count, element_bytes);
  }

  // Argument checks shared by the backends; throw Error naming the group.
  void check_count(OpType op, const void* buf, int64_t count) const;
  void check_rank(OpType op, const char* what, int r) const;
  void check_tag(OpType op, int tag) const;
  void check_disjoint(
      OpType op,
      const void* a,
      int64_t a_bytes,
      const void* b,
      int64_t b_bytes) const;

 private:
  const std::string name_;
  double timeout_s_ = kDefaultTimeoutS;
  CommLedger ledger_;
};

}  // namespace ndt
