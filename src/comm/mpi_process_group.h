// MPI backend: MpiProcessGroup, a ProcessGroup over an MPI communicator,
// made by MpiRuntime (mpi_runtime.h, included here) and split(). Nothing
// here needs <mpi.h>; the backend's files are
//
//   mpi_runtime     MPI init / finalize and the process-wide state
//   mpi_progress    operation queue, progress and Work (watchdog)
//   mpi_ops         operations as MPI requests
//   ring_algorithms the ring / pairwise schedules (no MPI)
//   mpi_process_group  this class: picks an algorithm per call
//   mpi_error       NDT_MPI_CHECK
//
// Note [MPI progress]
// Every operation is nonblocking underneath and advances only while this
// process calls into the backend: Work::test(), Work::wait(),
// ProcessGroup::progress() (any group: each advances the outstanding
// operations of all MPI groups). To overlap an async all-reduce with
// compute, call one of them between compute steps (e.g. after each layer's
// backward); otherwise the transfer mostly happens in the final wait().
//
// A group has two lanes, each a communicator of its own with a FIFO queue
// (MpiGroupState::kLanes): a broadcast or reduce runs on lane root % 2,
// every other collective on lane 0. A lane's collectives run one after
// another in issue order, so every rank issues the same MPI calls on each
// communicator in the same order however its test()/wait() calls
// interleave; the two lanes run at the same time, so the broadcasts (or
// reduces) of two roots cross the link between them in both directions at
// once. Completion order across lanes is not issue order: wait for each
// Work you need. Large buffers move in
// pieces of at most chunk_bytes() per message (OpenMPI slows sharply on
// single messages >= 32 MiB): all_reduce, reduce_scatter, all_gather,
// all_to_all, broadcast and reduce of at least ring_min_bytes() use our
// own pipelined ring / pairwise exchange / chain over MPI_Isend/Irecv with
// a persistent scratch (up to 2 * chunk_bytes() per lane, MemTag::kComm,
// grown on demand); smaller ones and barrier use MPI's nonblocking
// collectives, chunked. (OpenMPI's own collectives malloc a temporary of the
// message size per call; at >= 32 MiB glibc hands back fresh pages every time.)
// send/recv post all their pieces at once (so same-tag messages keep their
// order).
//
// wait() polls: it spins while rounds keep completing if this node has a
// core per rank, yields between polls if the node is oversubscribed, and
// yields, then sleeps, once nothing has moved for 10 / 100 ms.
//
// Threads: MPI is initialised MPI_THREAD_SERIALIZED; call MPI groups from
// one thread at a time (in practice the main thread, outside OpenMP
// regions).
//
// Watchdog: a wait() that passes its bound throws CommError. A timed-out
// recv is cancelled and the group stays usable; after any other timeout
// (a collective or a send cannot be cancelled) the group is marked broken
// and every later call on it throws CommError: the caller is expected to
// stop (cli/main.cpp calls MpiRuntime::abort()).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/mpi_runtime.h"
#include "comm/process_group.h"

namespace ndt {

namespace detail {
class MpiOp;
struct MpiGroupState;
}  // namespace detail

class MpiProcessGroup final : public ProcessGroup {
 public:
  static constexpr int64_t kDefaultChunkBytes = int64_t{8} << 20;
  // Default ring_min_bytes(): groups of 2 always use the ring (2 rounds,
  // faster than MPI's at every size measured); larger groups switch at
  // 1 MiB, below which MPI's fewer, latency-bound rounds win.
  static constexpr int64_t kDefaultRingMinBytes = int64_t{1} << 20;

  MpiProcessGroup(
      std::shared_ptr<detail::MpiGroupState> state, std::string name);
  ~MpiProcessGroup() override;

  // Tuning; must be identical on every rank of the group and changed only
  // while no operation is outstanding. Largest message of a collective
  // (>= 64 bytes).
  void set_chunk_bytes(int64_t bytes);
  int64_t chunk_bytes() const;
  // Buffers of at least this many bytes (the whole size()*count buffer for
  // reduce_scatter, all_gather and all_to_all) use the ring / pairwise /
  // chain algorithms, smaller ones MPI's (in chunks for all_reduce,
  // broadcast and reduce; the other three also take ours for any buffer
  // over chunk_bytes(), as MPI's cannot be cut into pieces).
  // Default: 0 when size() == 2, else kDefaultRingMinBytes.
  void set_ring_min_bytes(int64_t bytes);
  int64_t ring_min_bytes() const;

 protected:
  std::unique_ptr<Work> do_all_reduce_async(
      float* buf, int64_t count, ReduceOp op) override;
  std::unique_ptr<Work> do_all_reduce_async(
      double* buf, int64_t count, ReduceOp op) override;
  std::unique_ptr<Work> do_reduce_scatter_async(
      const float* in, float* out, int64_t count) override;
  std::unique_ptr<Work> do_all_gather_async(
      const float* in, float* out, int64_t count) override;
  std::unique_ptr<Work> do_broadcast_async(
      float* buf, int64_t count, int root) override;
  std::unique_ptr<Work> do_reduce_async(
      const float* in, float* out, int64_t count, int root) override;
  std::unique_ptr<Work> do_all_to_all_async(
      const float* in, float* out, int64_t count) override;
  std::unique_ptr<Work> do_send_async(
      const float* buf, int64_t count, int peer, int tag) override;
  std::unique_ptr<Work> do_recv_async(
      float* buf, int64_t count, int peer, int tag) override;
  void do_barrier() override;
  // Completes this group's queued collectives first, then MPI_Comm_split
  // (blocking, without watchdog).
  std::unique_ptr<ProcessGroup> do_split(
      int color, int key, std::string name) override;
  void do_progress() override;
  // A group that failed (Note [MPI progress], Watchdog) starts nothing.
  void check_usable(OpType op) const override;

 private:
  std::unique_ptr<Work> submit(std::shared_ptr<detail::MpiOp> op);

  std::shared_ptr<detail::MpiGroupState> state_;
};

}  // namespace ndt
