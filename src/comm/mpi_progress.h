// The MPI backend's operation queue and progress machinery (Note [MPI
// progress] in mpi_process_group.h), internal to the backend:
//
//   MpiOp          one operation, advanced without blocking
//   MpiLane        one collective communicator of a group, with its queue
//                  and scratch: its collectives run one after another
//   MpiGroupState  one group's point-to-point communicator, collective
//                  lanes, posted send/recv and failure state
//   MpiProgress    the process-wide part, one per MpiRuntime: the live
//                  groups (any progress call advances all of them) and the
//                  count of completed rounds that MpiWork::wait() watches
//   MpiWork        the Work of an MPI operation: test(), and wait() with
//                  its back-off and watchdog
//
// MPI is used from one thread at a time (MPI_THREAD_SERIALIZED), so none of
// this locks. Includes <mpi.h>.
#pragma once

#include <mpi.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "comm/ring_algorithms.h"
#include "comm/work.h"

namespace ndt::detail {

class MpiProgress;
struct MpiGroupState;
struct MpiLane;

// One operation of a group, advanced by progress calls. A collective runs
// on one lane of the group (null for send/recv).
class MpiOp {
 public:
  MpiOp(
      MpiGroupState& s, MpiLane* lane, OpType type, int peer = -1, int tag = 0)
      : s_(s), lane_(lane), type_(type), peer_(peer), tag_(tag) {}
  virtual ~MpiOp() = default;
  MpiOp(const MpiOp&) = delete;
  MpiOp& operator=(const MpiOp&) = delete;

  // Advances without blocking; true once complete.
  virtual bool advance() = 0;
  // A wait on this op timed out: release what can be released. True when
  // the group stays usable (a recv: cancelled).
  virtual bool abandon() {
    return false;
  }

  OpType type() const {
    return type_;
  }
  std::string label() const;
  int peer() const {
    return peer_;
  }
  int tag() const {
    return tag_;
  }
  MpiLane* lane() const {
    return lane_;
  }
  bool done = false;

 protected:
  MpiGroupState& s_;
  MpiLane* const lane_;

 private:
  OpType type_;
  int peer_;
  int tag_;
};

// One collective communicator of a group (a private matching space: a
// duplicate of the group's), the queue of collectives issued on it and
// their scratch. Collectives on one lane run one after another in issue
// order; those of different lanes run at the same time.
struct MpiLane final : ScratchSource {
  MpiLane() = default;
  ~MpiLane();
  MpiLane(const MpiLane&) = delete;
  MpiLane& operator=(const MpiLane&) = delete;

  // At least `bytes` of persistent scratch (MemTag::kComm). Only the
  // collective at the front of the queue uses it.
  void* get(size_t bytes) override;

  MPI_Comm coll = MPI_COMM_NULL;
  std::deque<std::shared_ptr<MpiOp>> queue;  // front is running
  void* scratch_ptr = nullptr;
  size_t scratch_bytes = 0;
};

// Communicators, collective lanes and posted send/recv of one group.
// Registers itself with `progress` for its lifetime.
struct MpiGroupState final {
  // Lanes per group: a broadcast or reduce runs on lane root % kLanes,
  // every other collective on lane 0. So the broadcasts (or reduces) of
  // two roots use both directions of the link between them at once
  // (ZeRO's owners, ddp.h), while each root's keep their issue order.
  static constexpr int kLanes = 2;

  // Takes ownership of `owned` (freed on destruction while MPI is active).
  MpiGroupState(
      std::shared_ptr<MpiProgress> progress,
      MPI_Comm owned,
      std::string group_name);
  ~MpiGroupState();
  MpiGroupState(const MpiGroupState&) = delete;
  MpiGroupState& operator=(const MpiGroupState&) = delete;

  MpiLane& lane_of_root(int root) {
    return lanes[static_cast<size_t>(root % kLanes)];
  }
  MpiLane& first_lane() {
    return lanes[0];
  }

  const std::shared_ptr<MpiProgress> progress;
  MPI_Comm comm = MPI_COMM_NULL;  // send/recv
  std::array<MpiLane, kLanes> lanes;
  int rank = 0;
  int size = 1;
  int world_rank = 0;
  std::string name;
  std::vector<int> world_ranks;  // of each group rank
  int64_t chunk_bytes = 0;       // MpiProcessGroup's defaults, set by the
  int64_t ring_min_bytes = 0;    // constructor
  std::vector<std::shared_ptr<MpiOp>> p2p;  // posted send/recv
  std::string broken;  // non-empty: the group failed; every call throws
};

class MpiProgress {
 public:
  // oversubscribed: more ranks on this node than cores, so waits yield the
  // core at once instead of spinning. hosts: the host name
  // (MPI_Get_processor_name) of every world rank, for messages.
  MpiProgress(bool oversubscribed, std::vector<std::string> hosts)
      : hosts_(std::move(hosts)), oversubscribed_(oversubscribed) {}
  MpiProgress(const MpiProgress&) = delete;
  MpiProgress& operator=(const MpiProgress&) = delete;

  void add(MpiGroupState* s);
  void remove(MpiGroupState* s);

  // Advances group s: its posted send/recv, then each lane's collective
  // queue from the front. An exception marks the group broken and propagates.
  void progress_group(MpiGroupState& s);
  // progress_group() on every live group that is not broken.
  void progress_all();

  // A round or an operation completed somewhere; wait() backs off only
  // while the count stays still.
  void note_event() {
    ++events_;
  }
  uint64_t events() const {
    return events_;
  }
  bool oversubscribed() const {
    return oversubscribed_;
  }
  // Host name of a world rank ("?" when unknown).
  const std::string& host(int world_rank) const;

 private:
  std::vector<MpiGroupState*> groups_;
  std::vector<std::string> hosts_;
  uint64_t events_ = 0;
  const bool oversubscribed_;
};

// Queues collective `op` on its lane and starts it if the lane was idle.
std::unique_ptr<Work> submit_collective(
    const std::shared_ptr<MpiGroupState>& s,
    std::shared_ptr<MpiOp> op,
    double timeout_s);
// Adds posted send/recv `op` to its group.
std::unique_ptr<Work> submit_p2p(
    const std::shared_ptr<MpiGroupState>& s,
    std::shared_ptr<MpiOp> op,
    double timeout_s);

class MpiWork final : public Work {
 public:
  MpiWork(
      std::shared_ptr<MpiGroupState> state,
      std::shared_ptr<MpiOp> op,
      double timeout_s)
      : state_(std::move(state)), op_(std::move(op)), timeout_s_(timeout_s) {}

  bool test() override;
  // Polls test(). While rounds keep completing it spins (a core per rank)
  // or yields between polls (oversubscribed node); after 10 ms without
  // progress it yields, and after 100 ms it sleeps 50 us then 500 us
  // between polls, leaving the cores to ranks that are still computing.
  // (sched_yield on every poll costs whole time slices on a busy machine:
  // 5x slower 4 MiB all-reduces in comm_bench.)
  void wait(double timeout_s) override;

 private:
  void throw_if_broken() const;
  [[noreturn]] void on_timeout(double limit);

  std::shared_ptr<MpiGroupState> state_;
  std::shared_ptr<MpiOp> op_;
  double timeout_s_;
};

}  // namespace ndt::detail
