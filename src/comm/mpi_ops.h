// The MPI backend's operations (detail::MpiOp), as MPI requests:
//
//   make_nbc_op       a chunked MPI nonblocking collective: chunk k is
//                     started by post(k, &request), one chunk per round
//   make_schedule_op  one of our round schedules (ring_algorithms.h) over
//                     MPI_Irecv / MPI_Isend on the group's collective
//                     communicator
//   make_p2p_op       send or recv: every piece of at most chunk_bytes
//                     posted at once on the point-to-point communicator
//
// Collective ops run up to RoundSchedule::kMaxDepth rounds in flight and
// only while at the front of their group's queue (mpi_progress.h).
// Internal to the backend: includes <mpi.h>.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "comm/mpi_progress.h"
#include "comm/ring_algorithms.h"

namespace ndt::detail {

std::shared_ptr<MpiOp> make_nbc_op(
    MpiGroupState& s,
    OpType type,
    int64_t chunks,
    std::function<void(int64_t, MPI_Request*)> post);

// Runs `schedule` for group s (rank and size of s.coll).
std::shared_ptr<MpiOp> make_schedule_op(
    MpiGroupState& s, OpType type, std::unique_ptr<RoundSchedule> schedule);

// type kSend or kRecv; buf is only read for a send.
std::shared_ptr<MpiOp> make_p2p_op(
    MpiGroupState& s,
    OpType type,
    float* buf,
    int64_t count,
    int peer,
    int tag);

// The RingGroup a schedule of group s sees: its rank, size, chunk_bytes
// and scratch.
RingGroup ring_group(MpiGroupState& s);

}  // namespace ndt::detail
