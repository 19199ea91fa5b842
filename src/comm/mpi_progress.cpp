#include "comm/mpi_progress.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "base/check.h"
#include "comm/mpi_error.h"
#include "comm/mpi_process_group.h"
#include "comm/mpi_runtime.h"
#include "tensor/memory.h"

namespace ndt::detail {

using Clock = std::chrono::steady_clock;

std::string MpiOp::label() const {
  return comm_op_label(s_.world_rank, type_, s_.name, peer_, tag_);
}

// ---------------------------------------------------------------- state

MpiGroupState::MpiGroupState(
    std::shared_ptr<MpiProgress> progress_engine,
    MPI_Comm owned,
    std::string group_name)
    : progress(std::move(progress_engine)),
      comm(owned),
      name(std::move(group_name)) {
  NDT_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  NDT_MPI_CHECK(MPI_Comm_dup(comm, &coll));
  NDT_MPI_CHECK(MPI_Comm_set_errhandler(coll, MPI_ERRORS_RETURN));
  NDT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  NDT_MPI_CHECK(MPI_Comm_size(comm, &size));
  NDT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  chunk_bytes = MpiProcessGroup::kDefaultChunkBytes;
  ring_min_bytes = size == 2 ? 0 : MpiProcessGroup::kDefaultRingMinBytes;
  progress->add(this);
}

MpiGroupState::~MpiGroupState() {
  progress->remove(this);
  // Scratch still used by an unfinished collective is leaked on purpose.
  if (scratch_ptr != nullptr && queue.empty()) {
    mem_free(scratch_ptr, scratch_bytes, MemTag::kComm);
  }
  if (MpiRuntime::active()) {
    if (coll != MPI_COMM_NULL)
      MPI_Comm_free(&coll);
    if (comm != MPI_COMM_NULL)
      MPI_Comm_free(&comm);
  }
}

void* MpiGroupState::get(size_t bytes) {
  if (scratch_bytes < bytes) {
    if (scratch_ptr != nullptr) {
      mem_free(scratch_ptr, scratch_bytes, MemTag::kComm);
    }
    scratch_ptr = mem_alloc(bytes, MemTag::kComm);
    scratch_bytes = bytes;
  }
  return scratch_ptr;
}

// ---------------------------------------------------------------- progress

void MpiProgress::add(MpiGroupState* s) {
  groups_.push_back(s);
}

void MpiProgress::remove(MpiGroupState* s) {
  groups_.erase(std::remove(groups_.begin(), groups_.end(), s), groups_.end());
}

void MpiProgress::progress_group(MpiGroupState& s) {
  try {
    for (size_t i = 0; i < s.p2p.size();) {
      if (s.p2p[i]->advance()) {
        s.p2p[i]->done = true;
        s.p2p.erase(s.p2p.begin() + static_cast<ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    while (!s.queue.empty()) {
      MpiOp& op = *s.queue.front();
      if (!op.advance())
        break;
      op.done = true;
      ++events_;
      s.queue.pop_front();
    }
  } catch (const std::exception& e) {
    if (s.broken.empty())
      s.broken = e.what();
    throw;
  }
}

void MpiProgress::progress_all() {
  for (MpiGroupState* s : groups_) {
    if (s->broken.empty())
      progress_group(*s);
  }
}

std::unique_ptr<Work> submit_collective(
    const std::shared_ptr<MpiGroupState>& s,
    std::shared_ptr<MpiOp> op,
    double timeout_s) {
  s->queue.push_back(op);
  s->progress->progress_group(*s);  // starts it now if the queue was idle
  return std::make_unique<MpiWork>(s, std::move(op), timeout_s);
}

std::unique_ptr<Work> submit_p2p(
    const std::shared_ptr<MpiGroupState>& s,
    std::shared_ptr<MpiOp> op,
    double timeout_s) {
  s->p2p.push_back(op);
  return std::make_unique<MpiWork>(s, std::move(op), timeout_s);
}

// ---------------------------------------------------------------- work

bool MpiWork::test() {
  if (op_->done)
    return true;
  throw_if_broken();
  state_->progress->progress_all();
  if (op_->done)
    return true;
  throw_if_broken();
  return false;
}

void MpiWork::wait(double timeout_s) {
  const double limit = timeout_s > 0 ? timeout_s : timeout_s_;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(limit));
  const MpiProgress& progress = *state_->progress;
  uint64_t seen = progress.events();
  auto last_move = start;
  while (!test()) {
    auto now = Clock::now();
    if (now >= deadline)
      on_timeout(limit);
    if (progress.events() != seen) {
      seen = progress.events();
      last_move = now;
    }
    auto still = now - last_move;
    if (still < std::chrono::milliseconds(10)) {
      if (progress.oversubscribed())
        sched_yield();
    } else if (still < std::chrono::milliseconds(100)) {
      sched_yield();
    } else if (still < std::chrono::milliseconds(1000)) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  }
}

void MpiWork::throw_if_broken() const {
  NDT_CHECK(
      state_->broken.empty(),
      CommError,
      op_->label(),
      " failed: ",
      state_->broken);
}

void MpiWork::on_timeout(double limit) {
  std::string msg = comm_timeout_message(
      state_->world_rank,
      op_->type(),
      state_->name,
      limit,
      op_->peer(),
      op_->tag());
  if (op_->abandon()) {
    auto& p2p = state_->p2p;
    p2p.erase(std::remove(p2p.begin(), p2p.end(), op_), p2p.end());
  } else if (state_->broken.empty()) {
    state_->broken = msg;
  }
  throw CommError(msg);
}

}  // namespace ndt::detail
