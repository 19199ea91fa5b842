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
//
// The public operations are not virtual: each checks its arguments and
// records itself in the ledger, here, once for every backend, then calls
// the backend's protected hook (do_<operation>) inside the bracket of the
// group's observer, if any (comm_observer.h). The hooks are all a backend
// implements of the operations (Note [Backend hooks]).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/comm_observer.h"
#include "comm/reduce_op.h"
#include "comm/work.h"

namespace ndt {

inline constexpr int kNumOpTypes = static_cast<int>(OpType::kBarrier) + 1;

// Note [Comm ledger]
// Per OpType, what this rank asked of one group: the number of calls and
// the sum of their `count` arguments, with the meaning each operation
// gives it below (all_reduce / broadcast / reduce / send / recv: the
// buffer; reduce_scatter: the output block per rank, the input being
// size() x count; all_gather: the input per rank, the output being
// size() x count; all_to_all: the block per peer; barrier: 0), and the
// same in bytes (fp64 all_reduce: 8 per element, everything else 4). A
// call is recorded once, by ProcessGroup's *_async (or barrier()), after
// its argument checks pass and before the backend runs it; calls that move
// nothing (count 0, a group of one rank) are recorded too. split() is not an
// operation and is not recorded. Bytes on the wire depend on the algorithm (a
// ring all-reduce sends 2 (P-1)/P x the buffer per rank) and are not what is
// counted.
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

  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const {
    return rank_;
  }
  int size() const {
    return size_;
  }
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

  // Watches this group's operations (comm_observer.h); nullptr detaches.
  // One observer at a time; it must outlive every Work started while it
  // was attached. Groups made by split() start without one.
  void set_observer(CommObserver* observer) {
    observer_ = observer;
  }
  CommObserver* observer() const {
    return observer_;
  }

  // buf: count elements, replaced by the element-wise reduction over ranks.
  std::unique_ptr<Work> all_reduce_async(
      float* buf, int64_t count, ReduceOp op = ReduceOp::kSum);
  std::unique_ptr<Work> all_reduce_async(
      double* buf, int64_t count, ReduceOp op = ReduceOp::kSum);
  // in: size()*count; out: count = block rank() of the sum over ranks.
  // out must not overlap in.
  std::unique_ptr<Work> reduce_scatter_async(
      const float* in, float* out, int64_t count);
  // in: count; out: size()*count, block j = rank j's in. in may be block
  // rank() of out (in place).
  std::unique_ptr<Work> all_gather_async(
      const float* in, float* out, int64_t count);
  // buf: count elements, root's values on return.
  std::unique_ptr<Work> broadcast_async(float* buf, int64_t count, int root);
  // out (count, root only; may be null elsewhere) = sum over ranks of in
  // (count). On root in may equal out.
  std::unique_ptr<Work> reduce_async(
      const float* in, float* out, int64_t count, int root);
  // in, out: size()*count; block j of in goes to rank j, block j of out
  // comes from rank j. out must not overlap in.
  std::unique_ptr<Work> all_to_all_async(
      const float* in, float* out, int64_t count);
  // Point to point; messages between two ranks with the same tag arrive in
  // the order they were sent. 0 <= tag < 32768. The send and its matching
  // recv must have the same count.
  std::unique_ptr<Work> send_async(
      const float* buf, int64_t count, int peer, int tag);
  std::unique_ptr<Work> recv_async(
      float* buf, int64_t count, int peer, int tag);
  // Blocks until every rank has entered; same watchdog as wait().
  void barrier();

  // Collective over this group: ranks passing the same color form a new
  // group, ordered by (key, rank in this group). Every rank must call it,
  // in the same order relative to its other collectives. The new group
  // inherits timeout_s().
  std::unique_ptr<ProcessGroup> split(int color, int key, std::string name);

  // Advances outstanding async operations without blocking (what test()
  // on any of their Works does). Backends that need no progress calls do
  // nothing. Call it between compute steps to overlap communication.
  void progress() {
    do_progress();
  }

  // Blocking forms: the async call followed by wait().
  void all_reduce(float* buf, int64_t count, ReduceOp op = ReduceOp::kSum);
  void all_reduce(double* buf, int64_t count, ReduceOp op = ReduceOp::kSum);
  // Rank 0's buf on every rank: an all-reduce to which the other ranks
  // add zeros (x + 0 keeps NaN and infinities), for the few numbers one
  // rank measured or computed. What the other ranks hold is overwritten.
  void share_from_rank0(double* buf, int64_t count);
  void reduce_scatter(const float* in, float* out, int64_t count);
  void all_gather(const float* in, float* out, int64_t count);
  void broadcast(float* buf, int64_t count, int root);
  void reduce(const float* in, float* out, int64_t count, int root);
  void all_to_all(const float* in, float* out, int64_t count);
  void send(const float* buf, int64_t count, int peer, int tag);
  void recv(float* buf, int64_t count, int peer, int tag);

 protected:
  ProcessGroup(std::string name, int rank, int size);

  // Note [Backend hooks]
  // A backend implements the hooks below and nothing else of the
  // operations. The public operation of the same name calls its hook after
  // the shared argument checks have passed, check_usable(op) has passed
  // and the call has been recorded in the ledger, inside the observer's
  // before()/after(). The six collectives (all_reduce to all_to_all) are
  // never called with count 0: the public operation answers those with a
  // CompletedWork itself. send/recv are called with every count (a
  // zero-element message still pairs with its peer). split() checks
  // check_usable(kBarrier), calls do_split and gives the new group this
  // group's timeout; it is neither recorded nor observed.
  virtual std::unique_ptr<Work> do_all_reduce_async(
      float* buf, int64_t count, ReduceOp op) = 0;
  virtual std::unique_ptr<Work> do_all_reduce_async(
      double* buf, int64_t count, ReduceOp op) = 0;
  virtual std::unique_ptr<Work> do_reduce_scatter_async(
      const float* in, float* out, int64_t count) = 0;
  virtual std::unique_ptr<Work> do_all_gather_async(
      const float* in, float* out, int64_t count) = 0;
  virtual std::unique_ptr<Work> do_broadcast_async(
      float* buf, int64_t count, int root) = 0;
  virtual std::unique_ptr<Work> do_reduce_async(
      const float* in, float* out, int64_t count, int root) = 0;
  virtual std::unique_ptr<Work> do_all_to_all_async(
      const float* in, float* out, int64_t count) = 0;
  virtual std::unique_ptr<Work> do_send_async(
      const float* buf, int64_t count, int peer, int tag) = 0;
  virtual std::unique_ptr<Work> do_recv_async(
      float* buf, int64_t count, int peer, int tag) = 0;
  virtual void do_barrier() = 0;
  virtual std::unique_ptr<ProcessGroup> do_split(
      int color, int key, std::string name) = 0;
  virtual void do_progress() {}
  // Throws CommError when the group cannot start `op` at all (e.g. it
  // failed earlier); checked before the call is recorded, and by split()
  // (as kBarrier). Default: always usable.
  virtual void check_usable(OpType /*op*/) const {}

 private:
  // Argument checks; throw Error naming the group.
  void check_count(OpType op, const void* buf, int64_t count) const;
  void check_rank(OpType op, const char* what, int r) const;
  void check_tag(OpType op, int tag) const;
  void check_disjoint(
      OpType op,
      const void* a,
      int64_t a_bytes,
      const void* b,
      int64_t b_bytes) const;

  // check_usable(op), then the ledger record (Note [Comm ledger]).
  void admit(OpType op, int64_t count, int64_t element_bytes);
  // Runs start() (the backend hook, or nothing when `empty`) inside the
  // observer's kStart bracket; with an observer attached, the Work is
  // wrapped so that its test() and wait() are observed too.
  template <typename Start>
  std::unique_ptr<Work> start_op(OpType op, bool empty, Start&& start);

  const std::string name_;
  const int rank_;
  const int size_;
  double timeout_s_ = kDefaultTimeoutS;
  CommLedger ledger_;
  CommObserver* observer_ = nullptr;
};

}  // namespace ndt
