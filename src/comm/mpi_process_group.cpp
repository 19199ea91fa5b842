// MpiProcessGroup's operations: each picks how to run one call (our ring /
// pairwise schedule, or MPI's nonblocking collective in chunks; Note [MPI
// progress] in mpi_process_group.h) and queues it. Arguments are already
// checked and recorded (Note [Backend hooks] in process_group.h).
#include "comm/mpi_process_group.h"

#include <mpi.h>

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "comm/mpi_error.h"
#include "comm/mpi_ops.h"
#include "comm/mpi_progress.h"

namespace ndt {
namespace {

using detail::MpiGroupState;
using detail::MpiLane;
using detail::MpiOp;

template <typename T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() {
  return MPI_FLOAT;
}
template <>
MPI_Datatype mpi_type<double>() {
  return MPI_DOUBLE;
}

MPI_Op mpi_op(ReduceOp op) {
  return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX;
}

// Number of pieces of at most chunk_bytes for count elements of `esize`.
int64_t chunks_of(const MpiGroupState& s, int64_t count, int64_t esize) {
  int64_t elems = std::max<int64_t>(1, s.chunk_bytes / esize);
  return std::max<int64_t>(1, (count + elems - 1) / elems);
}

// First element and length of chunk k of `chunks` equal pieces of count.
int64_t chunk_lo(int64_t count, int64_t k, int64_t chunks) {
  return count * k / chunks;
}
int chunk_len(int64_t count, int64_t k, int64_t chunks) {
  return static_cast<int>(
      chunk_lo(count, k + 1, chunks) - chunk_lo(count, k, chunks));
}

template <typename T>
std::shared_ptr<MpiOp> make_all_reduce(
    MpiGroupState& s, T* buf, int64_t count, ReduceOp op) {
  MpiLane& lane = s.first_lane();
  if (count * int64_t{sizeof(T)} >= s.ring_min_bytes) {
    return detail::make_schedule_op<detail::RingAllReduce<T>>(
        s, lane, OpType::kAllReduce, buf, count, op);
  }
  int64_t chunks = chunks_of(s, count, sizeof(T));
  return detail::make_nbc_op(
      s,
      lane,
      OpType::kAllReduce,
      chunks,
      [coll = lane.coll, buf, count, chunks, op](int64_t k, MPI_Request* req) {
        NDT_MPI_CHECK(MPI_Iallreduce(
            MPI_IN_PLACE,
            buf + chunk_lo(count, k, chunks),
            chunk_len(count, k, chunks),
            mpi_type<T>(),
            mpi_op(op),
            coll,
            req));
      });
}

}  // namespace

MpiProcessGroup::MpiProcessGroup(
    std::shared_ptr<MpiGroupState> state, std::string name)
    : ProcessGroup(std::move(name), state->rank, state->size),
      state_(std::move(state)) {}

MpiProcessGroup::~MpiProcessGroup() = default;

void MpiProcessGroup::set_chunk_bytes(int64_t bytes) {
  NDT_CHECK(
      bytes >= 64 && bytes <= (int64_t{1} << 30),
      ConfigError,
      "group ",
      name(),
      ": chunk_bytes must be in [64, 1 GiB], got ",
      bytes);
  state_->chunk_bytes = bytes;
}

int64_t MpiProcessGroup::chunk_bytes() const {
  return state_->chunk_bytes;
}

void MpiProcessGroup::set_ring_min_bytes(int64_t bytes) {
  NDT_CHECK(
      bytes >= 0,
      ConfigError,
      "group ",
      name(),
      ": ring_min_bytes must be >= 0, got ",
      bytes);
  state_->ring_min_bytes = bytes;
}

int64_t MpiProcessGroup::ring_min_bytes() const {
  return state_->ring_min_bytes;
}

void MpiProcessGroup::check_usable(OpType op) const {
  NDT_CHECK(
      state_->broken.empty(),
      CommError,
      detail::comm_op_label(state_->world_rank, op, name()),
      " cannot start: the group failed earlier: ",
      state_->broken);
}

std::unique_ptr<Work> MpiProcessGroup::submit(std::shared_ptr<MpiOp> op) {
  return detail::submit_collective(state_, std::move(op), timeout_s());
}

std::unique_ptr<Work> MpiProcessGroup::do_all_reduce_async(
    float* buf, int64_t count, ReduceOp op) {
  if (size() == 1)
    return std::make_unique<CompletedWork>();
  return submit(make_all_reduce(*state_, buf, count, op));
}

std::unique_ptr<Work> MpiProcessGroup::do_all_reduce_async(
    double* buf, int64_t count, ReduceOp op) {
  if (size() == 1)
    return std::make_unique<CompletedWork>();
  return submit(make_all_reduce(*state_, buf, count, op));
}

std::unique_ptr<Work> MpiProcessGroup::do_reduce_scatter_async(
    const float* in, float* out, int64_t count) {
  constexpr OpType kOp = OpType::kReduceScatter;
  const int64_t bytes = count * int64_t{sizeof(float)};
  if (size() == 1) {
    std::memcpy(out, in, bytes);
    return std::make_unique<CompletedWork>();
  }
  MpiGroupState& s = *state_;
  MpiLane& lane = s.first_lane();
  if (bytes * size() >= s.ring_min_bytes || bytes * size() > s.chunk_bytes) {
    return submit(detail::make_schedule_op<detail::RingReduceScatter>(
        s, lane, kOp, in, out, count));
  }
  return submit(detail::make_nbc_op(
      s,
      lane,
      kOp,
      1,
      [coll = lane.coll, in, out, count](int64_t, MPI_Request* req) {
        NDT_MPI_CHECK(MPI_Ireduce_scatter_block(
            in, out, static_cast<int>(count), MPI_FLOAT, MPI_SUM, coll, req));
      }));
}

std::unique_ptr<Work> MpiProcessGroup::do_all_gather_async(
    const float* in, float* out, int64_t count) {
  constexpr OpType kOp = OpType::kAllGather;
  const int64_t bytes = count * int64_t{sizeof(float)};
  if (size() == 1) {
    if (in != out)
      std::memmove(out, in, bytes);
    return std::make_unique<CompletedWork>();
  }
  MpiGroupState& s = *state_;
  MpiLane& lane = s.first_lane();
  if (bytes * size() >= s.ring_min_bytes || bytes * size() > s.chunk_bytes) {
    return submit(detail::make_schedule_op<detail::RingAllGather>(
        s, lane, kOp, in, out, count));
  }
  const bool in_place = in == out + rank() * count;
  return submit(detail::make_nbc_op(
      s,
      lane,
      kOp,
      1,
      [coll = lane.coll, in, out, count, in_place](int64_t, MPI_Request* req) {
        NDT_MPI_CHECK(MPI_Iallgather(
            in_place ? MPI_IN_PLACE : in,
            static_cast<int>(count),
            MPI_FLOAT,
            out,
            static_cast<int>(count),
            MPI_FLOAT,
            coll,
            req));
      }));
}

std::unique_ptr<Work> MpiProcessGroup::do_broadcast_async(
    float* buf, int64_t count, int root) {
  if (size() == 1)
    return std::make_unique<CompletedWork>();
  MpiGroupState& s = *state_;
  MpiLane& lane = s.lane_of_root(root);
  if (count * int64_t{sizeof(float)} >= s.ring_min_bytes) {
    return submit(detail::make_schedule_op<detail::ChainBroadcast>(
        s, lane, OpType::kBroadcast, buf, count, root));
  }
  int64_t chunks = chunks_of(s, count, sizeof(float));
  return submit(detail::make_nbc_op(
      s,
      lane,
      OpType::kBroadcast,
      chunks,
      [coll = lane.coll, buf, count, chunks, root](
          int64_t k, MPI_Request* req) {
        NDT_MPI_CHECK(MPI_Ibcast(
            buf + chunk_lo(count, k, chunks),
            chunk_len(count, k, chunks),
            MPI_FLOAT,
            root,
            coll,
            req));
      }));
}

std::unique_ptr<Work> MpiProcessGroup::do_reduce_async(
    const float* in, float* out, int64_t count, int root) {
  if (size() == 1) {
    if (in != out)
      std::memmove(out, in, count * sizeof(float));
    return std::make_unique<CompletedWork>();
  }
  MpiGroupState& s = *state_;
  MpiLane& lane = s.lane_of_root(root);
  if (count * int64_t{sizeof(float)} >= s.ring_min_bytes) {
    return submit(detail::make_schedule_op<detail::ChainReduce>(
        s, lane, OpType::kReduce, in, out, count, root));
  }
  int64_t chunks = chunks_of(s, count, sizeof(float));
  const bool is_root = rank() == root;
  return submit(detail::make_nbc_op(
      s,
      lane,
      OpType::kReduce,
      chunks,
      [coll = lane.coll, in, out, count, chunks, root, is_root](
          int64_t k, MPI_Request* req) {
        const int64_t lo = chunk_lo(count, k, chunks);
        const void* send = is_root && in == out ? MPI_IN_PLACE : in + lo;
        NDT_MPI_CHECK(MPI_Ireduce(
            send,
            is_root ? out + lo : nullptr,
            chunk_len(count, k, chunks),
            MPI_FLOAT,
            MPI_SUM,
            root,
            coll,
            req));
      }));
}

std::unique_ptr<Work> MpiProcessGroup::do_all_to_all_async(
    const float* in, float* out, int64_t count) {
  constexpr OpType kOp = OpType::kAllToAll;
  const int64_t bytes = count * size() * int64_t{sizeof(float)};
  if (size() == 1) {
    std::memcpy(out, in, bytes);
    return std::make_unique<CompletedWork>();
  }
  MpiGroupState& s = *state_;
  MpiLane& lane = s.first_lane();
  if (bytes >= s.ring_min_bytes || bytes > s.chunk_bytes) {
    return submit(detail::make_schedule_op<detail::PairwiseAllToAll>(
        s, lane, kOp, in, out, count));
  }
  return submit(detail::make_nbc_op(
      s,
      lane,
      kOp,
      1,
      [coll = lane.coll, in, out, count](int64_t, MPI_Request* req) {
        NDT_MPI_CHECK(MPI_Ialltoall(
            in,
            static_cast<int>(count),
            MPI_FLOAT,
            out,
            static_cast<int>(count),
            MPI_FLOAT,
            coll,
            req));
      }));
}

std::unique_ptr<Work> MpiProcessGroup::do_send_async(
    const float* buf, int64_t count, int peer, int tag) {
  // MPI_Isend takes a const buffer; the op holds one pointer type for both.
  return detail::submit_p2p(
      state_,
      detail::make_p2p_op(
          *state_, OpType::kSend, const_cast<float*>(buf), count, peer, tag),
      timeout_s());
}

std::unique_ptr<Work> MpiProcessGroup::do_recv_async(
    float* buf, int64_t count, int peer, int tag) {
  return detail::submit_p2p(
      state_,
      detail::make_p2p_op(*state_, OpType::kRecv, buf, count, peer, tag),
      timeout_s());
}

void MpiProcessGroup::do_barrier() {
  MpiGroupState& s = *state_;
  MpiLane& lane = s.first_lane();
  submit(detail::make_nbc_op(
             s,
             lane,
             OpType::kBarrier,
             1,
             [coll = lane.coll](int64_t, MPI_Request* req) {
               NDT_MPI_CHECK(MPI_Ibarrier(coll, req));
             }))
      ->wait();
}

std::unique_ptr<ProcessGroup> MpiProcessGroup::do_split(
    int color, int key, std::string name) {
  NDT_CHECK(
      color >= 0,
      ConfigError,
      "split of group ",
      this->name(),
      ": color must be >= 0, got ",
      color);
  // Finish queued collectives first: a peer waiting on one of them needs
  // this rank's progress, which a blocking MPI_Comm_split would withhold.
  for (MpiLane& lane : state_->lanes) {
    if (!lane.queue.empty())
      detail::MpiWork(state_, lane.queue.back(), timeout_s()).wait(0);
  }
  MPI_Comm comm = MPI_COMM_NULL;
  NDT_MPI_CHECK(MPI_Comm_split(state_->comm, color, key, &comm));
  auto state = std::make_shared<MpiGroupState>(state_->progress, comm, name);
  state->chunk_bytes = state_->chunk_bytes;
  return std::make_unique<MpiProcessGroup>(std::move(state), std::move(name));
}

void MpiProcessGroup::do_progress() {
  NDT_CHECK(
      state_->broken.empty(),
      CommError,
      "rank ",
      state_->world_rank,
      ": progress on group ",
      name(),
      " failed: ",
      state_->broken);
  state_->progress->progress_all();
}

}  // namespace ndt
