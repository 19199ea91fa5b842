// MPI backend: MpiRuntime (MPI_Init_thread / MPI_Finalize) and
// MpiProcessGroup, a ProcessGroup over an MPI communicator. <mpi.h> stays
// in mpi_process_group.cpp; nothing here needs it.
//
// Note [MPI progress]
// Every operation is nonblocking underneath and advances only while this
// process calls into the backend: Work::test(), Work::wait(),
// ProcessGroup::progress() (any group: each advances the outstanding
// operations of all MPI groups). To overlap an async all-reduce with
// compute, call one of them between compute steps (e.g. after each layer's
// backward); otherwise the transfer mostly happens in the final wait().
//
// Collectives of one group run one after another in issue order (a FIFO
// queue per group), so every rank issues the same MPI calls in the same
// order however its test()/wait() calls interleave. Large buffers move in
// pieces of at most chunk_bytes() per message (OpenMPI slows sharply on
// single messages >= 32 MiB): all_reduce, reduce_scatter, all_gather and
// all_to_all of at least ring_min_bytes() use our own pipelined ring /
// pairwise exchange over MPI_Isend/Irecv with a persistent scratch (up to
// 2 * chunk_bytes() per group, MemTag::kComm, grown on demand); smaller
// ones, broadcast, reduce and barrier use MPI's nonblocking collectives,
// chunked. (OpenMPI's own collectives malloc a temporary of the message
// size per call; at >= 32 MiB glibc hands back fresh pages every time.)
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

#include "comm/process_group.h"

namespace ndt {

class MpiProcessGroup;

namespace detail {
class MpiOp;
}

// RAII owner of MPI for the process: one instance, made first thing in
// main() and destroyed last (after every MpiProcessGroup).
class MpiRuntime {
 public:
  // MPI_Init_thread(MPI_THREAD_SERIALIZED); MPI errors return codes
  // (MPI_ERRORS_RETURN) that become CommError. Throws CommError when MPI
  // is already initialised or the thread level is below FUNNELED.
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();  // MPI_Finalize
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  // MPI initialised and not finalised.
  static bool active();
  // MPI_Abort(MPI_COMM_WORLD, code): ends every rank. Does nothing when MPI
  // is not active (the caller then exits on its own).
  static void abort(int code);

  int world_rank() const {
    return world_rank_;
  }
  int world_size() const {
    return world_size_;
  }
  // A new group over all processes (private duplicates of
  // MPI_COMM_WORLD), named "world". Collective: every rank calls it.
  std::unique_ptr<MpiProcessGroup> world();

 private:
  int world_rank_ = 0;
  int world_size_ = 1;
};

class MpiProcessGroup final : public ProcessGroup {
 public:
  static constexpr int64_t kDefaultChunkBytes = int64_t{8} << 20;
  // Default ring_min_bytes(): groups of 2 always use the ring (2 rounds,
  // faster than MPI's at every size measured); larger groups switch at
  // 1 MiB, below which MPI's fewer, latency-bound rounds win.
  static constexpr int64_t kDefaultRingMinBytes = int64_t{1} << 20;

  struct State;  // communicators, queue and scratch; in the .cpp
  MpiProcessGroup(std::shared_ptr<State> state, std::string name);
  ~MpiProcessGroup() override;

  int rank() const override;
  int size() const override;

  std::unique_ptr<Work> all_reduce_async(
      float* buf, int64_t count, ReduceOp op) override;
  std::unique_ptr<Work> all_reduce_async(
      double* buf, int64_t count, ReduceOp op) override;
  std::unique_ptr<Work> reduce_scatter_async(
      const float* in, float* out, int64_t count) override;
  std::unique_ptr<Work> all_gather_async(
      const float* in, float* out, int64_t count) override;
  std::unique_ptr<Work> broadcast_async(
      float* buf, int64_t count, int root) override;
  std::unique_ptr<Work> reduce_async(
      const float* in, float* out, int64_t count, int root) override;
  std::unique_ptr<Work> all_to_all_async(
      const float* in, float* out, int64_t count) override;
  std::unique_ptr<Work> send_async(
      const float* buf, int64_t count, int peer, int tag) override;
  std::unique_ptr<Work> recv_async(
      float* buf, int64_t count, int peer, int tag) override;
  void barrier() override;
  // Completes this group's queued collectives first, then MPI_Comm_split
  // (blocking, without watchdog).
  std::unique_ptr<ProcessGroup> split(
      int color, int key, std::string name) override;
  void progress() override;

  // Tuning; must be identical on every rank of the group and changed only
  // while no operation is outstanding. Largest message of a collective
  // (>= 64 bytes).
  void set_chunk_bytes(int64_t bytes);
  int64_t chunk_bytes() const;
  // all_reduce / reduce_scatter / all_gather / all_to_all buffers of at
  // least this many bytes (the whole size()*count buffer for the last
  // three) use the ring / pairwise algorithms, smaller ones MPI's (in
  // chunks for all_reduce; the other three also take the ring for any
  // buffer over chunk_bytes(), as MPI's cannot be cut into pieces).
  // Default: 0 when size() == 2, else kDefaultRingMinBytes.
  void set_ring_min_bytes(int64_t bytes);
  int64_t ring_min_bytes() const;

 private:
  std::unique_ptr<Work> submit(std::shared_ptr<detail::MpiOp> op);
  void check_usable(OpType op) const;

  std::shared_ptr<State> state_;
};

}  // namespace ndt
