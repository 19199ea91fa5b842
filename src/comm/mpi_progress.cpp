#include "comm/mpi_progress.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/activity.h"
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
  for (MpiLane& lane : lanes) {
    NDT_MPI_CHECK(MPI_Comm_dup(comm, &lane.coll));
    NDT_MPI_CHECK(MPI_Comm_set_errhandler(lane.coll, MPI_ERRORS_RETURN));
  }
  NDT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  NDT_MPI_CHECK(MPI_Comm_size(comm, &size));
  NDT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  MPI_Group mine = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  NDT_MPI_CHECK(MPI_Comm_group(comm, &mine));
  NDT_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  std::vector<int> group_ranks(size);
  for (int r = 0; r < size; ++r)
    group_ranks[r] = r;
  world_ranks.assign(size, -1);
  NDT_MPI_CHECK(MPI_Group_translate_ranks(
      mine, size, group_ranks.data(), world, world_ranks.data()));
  MPI_Group_free(&mine);
  MPI_Group_free(&world);
  chunk_bytes = MpiProcessGroup::kDefaultChunkBytes;
  ring_min_bytes = size == 2 ? 0 : MpiProcessGroup::kDefaultRingMinBytes;
  progress->add(this);
}

MpiGroupState::~MpiGroupState() {
  progress->remove(this);
  if (MpiRuntime::active() && comm != MPI_COMM_NULL)
    MPI_Comm_free(&comm);
}

MpiLane::~MpiLane() {
  // Scratch still used by an unfinished collective is leaked on purpose.
  if (scratch_ptr != nullptr && queue.empty()) {
    mem_free(scratch_ptr, scratch_bytes, MemTag::kComm);
  }
  if (MpiRuntime::active() && coll != MPI_COMM_NULL)
    MPI_Comm_free(&coll);
}

void* MpiLane::get(size_t bytes) {
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

const std::string& MpiProgress::host(int world_rank) const {
  static const std::string unknown = "?";
  if (world_rank < 0 || world_rank >= static_cast<int>(hosts_.size()))
    return unknown;
  return hosts_[world_rank];
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
    for (MpiLane& lane : s.lanes) {
      while (!lane.queue.empty()) {
        MpiOp& op = *lane.queue.front();
        if (!op.advance())
          break;
        op.done = true;
        ++events_;
        lane.queue.pop_front();
      }
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
  NDT_ASSERT(op->lane() != nullptr, "collective ", op->label(), " has no lane");
  op->lane()->queue.push_back(op);
  s->progress->progress_group(*s);  // starts it now if the lane was idle
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

// Names the operation a process is blocked in for the report it prints
// when the launcher terminates it (base/activity.h), while it waits.
class CommWaitNote {
 public:
  explicit CommWaitNote(const std::string& text) {
    set_comm_wait(text);
  }
  ~CommWaitNote() {
    set_comm_wait("");
  }
};

static std::string hosts_note(const MpiGroupState& s, const MpiOp& op);

// A wait is named only once it has lasted kNoteAfter: formatting the note
// (the group's members and hosts) costs microseconds, as much as a small
// all-reduce, and only a rank blocked for long is ever terminated.
constexpr auto kNoteAfter = std::chrono::milliseconds(1);

void MpiWork::wait(double timeout_s) {
  if (test())
    return;
  std::optional<CommWaitNote> note;
  const double limit = timeout_s > 0 ? timeout_s : timeout_s_;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(limit));
  const MpiProgress& progress = *state_->progress;
  uint64_t seen = progress.events();
  auto last_move = start;
  while (!test()) {
    auto now = Clock::now();
    if (!note && now - start >= kNoteAfter) {
      note.emplace(
          comm_op_text(op_->type(), state_->name, op_->peer(), op_->tag()) +
          " " + hosts_note(*state_, *op_));
    }
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

// Where the ranks of a timed-out operation run, e.g. "(this rank is on host
// a; peer 1 is world rank 3 on host b)" or "(this rank is on host a; group
// dp has world ranks 0, 1 on a and 2, 3 on b)": on several hosts, the host
// that stopped answering is the first suspect.
static std::string hosts_note(const MpiGroupState& s, const MpiOp& op) {
  const MpiProgress& p = *s.progress;
  std::string note = "(this rank is on host " + p.host(s.world_rank) + "; ";
  if (op.peer() >= 0 && op.peer() < s.size &&
      (op.type() == OpType::kSend || op.type() == OpType::kRecv)) {
    const int w = s.world_ranks[op.peer()];
    return note + str_cat(
                      "peer ",
                      op.peer(),
                      " is world rank ",
                      w,
                      " on host ",
                      p.host(w),
                      ")");
  }
  // Hosts in order of their first rank, each with its world ranks.
  std::vector<std::pair<std::string, std::string>> by_host;
  for (int w : s.world_ranks) {
    const std::string& h = p.host(w);
    auto it = std::find_if(by_host.begin(), by_host.end(), [&](const auto& e) {
      return e.first == h;
    });
    if (it == by_host.end()) {
      by_host.emplace_back(h, std::to_string(w));
    } else {
      it->second += ", " + std::to_string(w);
    }
  }
  note += "group " + s.name + " has world ranks ";
  for (size_t i = 0; i < by_host.size(); ++i) {
    if (i > 0)
      note += i + 1 == by_host.size() ? " and " : "; ";
    note += by_host[i].second + " on " + by_host[i].first;
  }
  return note + ")";
}

void MpiWork::on_timeout(double limit) {
  std::string msg = comm_timeout_message(
                        state_->world_rank,
                        op_->type(),
                        state_->name,
                        limit,
                        op_->peer(),
                        op_->tag()) +
                    " " + hosts_note(*state_, *op_);
  if (op_->abandon()) {
    auto& p2p = state_->p2p;
    p2p.erase(std::remove(p2p.begin(), p2p.end(), op_), p2p.end());
  } else if (state_->broken.empty()) {
    state_->broken = msg;
  }
  throw CommError(msg);
}

}  // namespace ndt::detail
