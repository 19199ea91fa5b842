// The only translation unit that includes <mpi.h>. See Note [MPI progress]
// in mpi_process_group.h for the execution model.
#include "comm/mpi_process_group.h"

#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "base/check.h"
#include "tensor/memory.h"

namespace ndt {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void mpi_fail(
    int rc, const char* call, const char* file, int line) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
    len = 0;
  int world_rank = -1;
  if (MpiRuntime::active())
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  std::string fn(call, std::strcspn(call, "("));
  throw CommError(detail::str_cat(
      "rank ",
      world_rank,
      ": ",
      fn,
      " failed: ",
      len > 0 ? std::string(msg, len) : "error " + std::to_string(rc),
      " (",
      file,
      ":",
      line,
      ")"));
}

}  // namespace
}  // namespace ndt

// Turns an MPI return code into CommError with MPI_Error_string.
#define NDT_MPI_CHECK(call)                                \
  do {                                                     \
    int ndt_rc_ = (call);                                  \
    if (ndt_rc_ != MPI_SUCCESS) {                          \
      ::ndt::mpi_fail(ndt_rc_, #call, __FILE__, __LINE__); \
    }                                                      \
  } while (0)

namespace ndt {

// Communicators, the collective queue and the scratch of one group.
struct MpiProcessGroup::State {
  State(MPI_Comm owned, std::string group_name);
  ~State();
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  // At least `bytes` of persistent scratch (MemTag::kComm). Only the
  // collective at the front of the queue uses it.
  void* scratch(size_t bytes);

  MPI_Comm comm = MPI_COMM_NULL;  // send/recv
  MPI_Comm coll = MPI_COMM_NULL;  // collectives: a private matching space
  int rank = 0;
  int size = 1;
  int world_rank = 0;
  std::string name;
  int64_t chunk_bytes = MpiProcessGroup::kDefaultChunkBytes;
  int64_t ring_min_bytes = MpiProcessGroup::kDefaultRingMinBytes;
  std::deque<std::shared_ptr<detail::MpiOp>> queue;  // front is running
  std::vector<std::shared_ptr<detail::MpiOp>> p2p;   // posted send/recv
  std::string broken;  // non-empty: the group failed; every call throws
  void* scratch_ptr = nullptr;
  size_t scratch_bytes = 0;
};

namespace detail {

// One operation of a group, advanced by progress() calls.
class MpiOp {
 public:
  MpiOp(MpiProcessGroup::State& s, OpType type, int peer = -1, int tag = 0)
      : s_(s), type_(type), peer_(peer), tag_(tag) {}
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
  std::string label() const {
    return comm_op_label(s_.world_rank, type_, s_.name, peer_, tag_);
  }
  int peer() const {
    return peer_;
  }
  int tag() const {
    return tag_;
  }
  bool done = false;

 protected:
  MpiProcessGroup::State& s_;

 private:
  OpType type_;
  int peer_;
  int tag_;
};

}  // namespace detail

namespace {

using detail::MpiOp;
using State = MpiProcessGroup::State;

constexpr int kRingTag = 1;  // on State::coll; collectives run one at a time

// Bumped whenever any round or operation completes; wait() backs off only
// while it stays still.
uint64_t g_progress_events = 0;

// More ranks on this node than cores this process may run on: waits then
// yield the core at once instead of spinning (set by MpiRuntime).
bool g_oversubscribed = false;

std::vector<State*>& registry() {
  static std::vector<State*> groups;
  return groups;
}

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

template <typename T>
void combine(T* acc, const T* x, int64_t len, ReduceOp op) {
  if (op == ReduceOp::kSum) {
    for (int64_t k = 0; k < len; ++k)
      acc[k] += x[k];
  } else {
    for (int64_t k = 0; k < len; ++k)
      acc[k] = std::max(acc[k], x[k]);
  }
}

int mod(int64_t a, int n) {
  return static_cast<int>(((a % n) + n) % n);
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Element range [lo, lo + len) of piece p of `parts` equal pieces of a
// span of `len_total` elements starting at `base`.
struct Range {
  int64_t lo;
  int64_t len;
};
Range piece(int64_t base, int64_t len_total, int64_t p, int64_t parts) {
  int64_t lo = len_total * p / parts;
  int64_t hi = len_total * (p + 1) / parts;
  return {base + lo, hi - lo};
}

// A sequence of rounds, each a few nonblocking MPI requests posted
// together. Up to kDepth rounds are in flight; round k may start only after
// round k - lag has finished (lag 0: no dependency).
class RoundOp : public MpiOp {
 public:
  RoundOp(State& s, OpType type, int peer = -1, int tag = 0)
      : MpiOp(s, type, peer, tag) {}

  bool advance() override {
    for (;;) {
      while (started_ < rounds_ && started_ - finished_ < kDepth &&
             (lag_ == 0 || started_ - lag_ < finished_)) {
        int slot = static_cast<int>(started_ % kDepth);
        nreq_[slot] = post(started_, reqs_[slot]);
        ++started_;
      }
      if (finished_ == rounds_)
        return true;
      int slot = static_cast<int>(finished_ % kDepth);
      int flag = 0;
      NDT_MPI_CHECK(
          MPI_Testall(nreq_[slot], reqs_[slot], &flag, MPI_STATUSES_IGNORE));
      if (!flag)
        return false;
      nreq_[slot] = 0;
      finish(finished_);
      ++finished_;
      ++g_progress_events;
    }
  }

 protected:
  static constexpr int kDepth = 2;
  static constexpr int kMaxReqs = 2;

  void set_rounds(int64_t rounds, int64_t lag) {
    rounds_ = rounds;
    lag_ = lag;
  }
  // Posts round k's requests (at most kMaxReqs) into reqs; returns how
  // many.
  virtual int post(int64_t k, MPI_Request* reqs) = 0;
  // Round k's requests have completed.
  virtual void finish(int64_t /*k*/) {}

 private:
  int64_t rounds_ = 0;
  int64_t lag_ = 0;
  int64_t started_ = 0;
  int64_t finished_ = 0;
  MPI_Request reqs_[kDepth][kMaxReqs];
  int nreq_[kDepth] = {0, 0};
};

// Chunks of an MPI nonblocking collective: `post(k, req)` starts chunk k.
class NbcOp final : public RoundOp {
 public:
  NbcOp(
      State& s,
      OpType type,
      int64_t chunks,
      std::function<void(int64_t, MPI_Request*)> post_fn)
      : RoundOp(s, type), post_fn_(std::move(post_fn)) {
    set_rounds(chunks, 0);
  }

 protected:
  int post(int64_t k, MPI_Request* reqs) override {
    post_fn_(k, reqs);
    return 1;
  }

 private:
  std::function<void(int64_t, MPI_Request*)> post_fn_;
};

// Ring all-reduce, in place: n-1 reduce-scatter steps then n-1 all-gather
// steps over the n segments of buf, each step cut into P pieces of at most
// chunk_bytes. Segment s is summed as x_s + x_{s+1} + ... + x_{s-1} by
// rank s-1 and copied to every rank, so all ranks hold identical results.
template <typename T>
class RingAllReduce final : public RoundOp {
 public:
  RingAllReduce(State& s, T* buf, int64_t count, ReduceOp op)
      : RoundOp(s, OpType::kAllReduce), buf_(buf), count_(count), op_(op) {
    const int n = s.size;
    int64_t piece_elems =
        std::max<int64_t>(1, s.chunk_bytes / int64_t{sizeof(T)});
    parts_ = std::max<int64_t>(1, ceil_div(ceil_div(count, n), piece_elems));
    set_rounds(int64_t{2} * (n - 1) * parts_, parts_);
  }

 protected:
  int post(int64_t k, MPI_Request* reqs) override {
    const int n = s_.size, r = s_.rank;
    if (k == 0) {
      slot_elems_ = ceil_div(ceil_div(count_, n), parts_);
      scratch_ = static_cast<T*>(s_.scratch(2 * slot_elems_ * sizeof(T)));
    }
    int64_t t = k / parts_, p = k % parts_;
    bool reduce_step = t < n - 1;
    int send_seg = reduce_step ? mod(r - t, n) : mod(r + 1 - (t - n + 1), n);
    int recv_seg = reduce_step ? mod(r - t - 1, n) : mod(r - (t - n + 1), n);
    Range snd = seg_piece(send_seg, p), rcv = seg_piece(recv_seg, p);
    T* dst = reduce_step ? scratch_ + (k % 2) * slot_elems_ : buf_ + rcv.lo;
    int nreq = 0;
    const MPI_Datatype type = mpi_type<T>();
    if (rcv.len > 0) {
      NDT_MPI_CHECK(MPI_Irecv(
          dst,
          static_cast<int>(rcv.len),
          type,
          mod(r - 1, n),
          kRingTag,
          s_.coll,
          &reqs[nreq++]));
    }
    if (snd.len > 0) {
      NDT_MPI_CHECK(MPI_Isend(
          buf_ + snd.lo,
          static_cast<int>(snd.len),
          type,
          mod(r + 1, n),
          kRingTag,
          s_.coll,
          &reqs[nreq++]));
    }
    return nreq;
  }

  void finish(int64_t k) override {
    const int n = s_.size, r = s_.rank;
    int64_t t = k / parts_, p = k % parts_;
    if (t >= n - 1)
      return;
    Range rcv = seg_piece(mod(r - t - 1, n), p);
    combine(buf_ + rcv.lo, scratch_ + (k % 2) * slot_elems_, rcv.len, op_);
  }

 private:
  Range seg_piece(int seg, int64_t p) const {
    const int n = s_.size;
    int64_t lo = count_ * seg / n, hi = count_ * (seg + 1) / n;
    return piece(lo, hi - lo, p, parts_);
  }

  T* buf_;
  int64_t count_;
  ReduceOp op_;
  int64_t parts_ = 1;
  T* scratch_ = nullptr;
  int64_t slot_elems_ = 0;
};

// Ring reduce-scatter: in (n*count) is read only; out (count) holds the
// running partial sum of the block in flight, and block r at the end.
// Block s is summed as x_{s+1} + x_{s+2} + ... + x_s.
class RingReduceScatter final : public RoundOp {
 public:
  RingReduceScatter(State& s, const float* in, float* out, int64_t count)
      : RoundOp(s, OpType::kReduceScatter), in_(in), out_(out), count_(count) {
    int64_t piece_elems =
        std::max<int64_t>(1, s.chunk_bytes / int64_t{sizeof(float)});
    parts_ = std::max<int64_t>(1, ceil_div(count, piece_elems));
    set_rounds(int64_t{s.size - 1} * parts_, parts_);
  }

 protected:
  int post(int64_t k, MPI_Request* reqs) override {
    const int n = s_.size, r = s_.rank;
    if (k == 0) {
      slot_elems_ = ceil_div(count_, parts_);
      scratch_ =
          static_cast<float*>(s_.scratch(2 * slot_elems_ * sizeof(float)));
    }
    int64_t t = k / parts_, p = k % parts_;
    Range pc = piece(0, count_, p, parts_);
    int send_blk = mod(r - t - 1, n);
    const float* src = t == 0 ? in_ + send_blk * count_ + pc.lo : out_ + pc.lo;
    if (pc.len == 0)
      return 0;
    NDT_MPI_CHECK(MPI_Irecv(
        scratch_ + (k % 2) * slot_elems_,
        static_cast<int>(pc.len),
        MPI_FLOAT,
        mod(r - 1, n),
        kRingTag,
        s_.coll,
        &reqs[0]));
    NDT_MPI_CHECK(MPI_Isend(
        src,
        static_cast<int>(pc.len),
        MPI_FLOAT,
        mod(r + 1, n),
        kRingTag,
        s_.coll,
        &reqs[1]));
    return 2;
  }

  void finish(int64_t k) override {
    const int n = s_.size, r = s_.rank;
    int64_t t = k / parts_, p = k % parts_;
    Range pc = piece(0, count_, p, parts_);
    const float* mine = in_ + mod(r - t - 2, n) * count_ + pc.lo;
    const float* got = scratch_ + (k % 2) * slot_elems_;
    float* dst = out_ + pc.lo;
    for (int64_t i = 0; i < pc.len; ++i)
      dst[i] = got[i] + mine[i];
  }

 private:
  const float* in_;
  float* out_;
  int64_t count_;
  int64_t parts_ = 1;
  float* scratch_ = nullptr;
  int64_t slot_elems_ = 0;
};

// Ring all-gather straight into out (n*count); in may be block r of out.
class RingAllGather final : public RoundOp {
 public:
  RingAllGather(State& s, const float* in, float* out, int64_t count)
      : RoundOp(s, OpType::kAllGather), in_(in), out_(out), count_(count) {
    int64_t piece_elems =
        std::max<int64_t>(1, s.chunk_bytes / int64_t{sizeof(float)});
    parts_ = std::max<int64_t>(1, ceil_div(count, piece_elems));
    set_rounds(int64_t{s.size - 1} * parts_, parts_);
  }

 protected:
  int post(int64_t k, MPI_Request* reqs) override {
    const int n = s_.size, r = s_.rank;
    if (k == 0 && in_ != out_ + r * count_) {
      std::memcpy(out_ + r * count_, in_, count_ * sizeof(float));
    }
    int64_t t = k / parts_, p = k % parts_;
    Range pc = piece(0, count_, p, parts_);
    if (pc.len == 0)
      return 0;
    NDT_MPI_CHECK(MPI_Irecv(
        out_ + mod(r - t - 1, n) * count_ + pc.lo,
        static_cast<int>(pc.len),
        MPI_FLOAT,
        mod(r - 1, n),
        kRingTag,
        s_.coll,
        &reqs[0]));
    NDT_MPI_CHECK(MPI_Isend(
        out_ + mod(r - t, n) * count_ + pc.lo,
        static_cast<int>(pc.len),
        MPI_FLOAT,
        mod(r + 1, n),
        kRingTag,
        s_.coll,
        &reqs[1]));
    return 2;
  }

 private:
  const float* in_;
  float* out_;
  int64_t count_;
  int64_t parts_ = 1;
};

// Pairwise all-to-all: step t = 1..n-1 sends block r+t to rank r+t and
// receives block r-t from rank r-t, in pieces.
class PairwiseAllToAll final : public RoundOp {
 public:
  PairwiseAllToAll(State& s, const float* in, float* out, int64_t count)
      : RoundOp(s, OpType::kAllToAll), in_(in), out_(out), count_(count) {
    int64_t piece_elems =
        std::max<int64_t>(1, s.chunk_bytes / int64_t{sizeof(float)});
    parts_ = std::max<int64_t>(1, ceil_div(count, piece_elems));
    set_rounds(int64_t{s.size - 1} * parts_, 0);
  }

 protected:
  int post(int64_t k, MPI_Request* reqs) override {
    const int n = s_.size, r = s_.rank;
    if (k == 0) {
      std::memcpy(out_ + r * count_, in_ + r * count_, count_ * sizeof(float));
    }
    int64_t t = k / parts_ + 1, p = k % parts_;
    Range pc = piece(0, count_, p, parts_);
    if (pc.len == 0)
      return 0;
    int to = mod(r + t, n), from = mod(r - t, n);
    NDT_MPI_CHECK(MPI_Irecv(
        out_ + from * count_ + pc.lo,
        static_cast<int>(pc.len),
        MPI_FLOAT,
        from,
        kRingTag,
        s_.coll,
        &reqs[0]));
    NDT_MPI_CHECK(MPI_Isend(
        in_ + to * count_ + pc.lo,
        static_cast<int>(pc.len),
        MPI_FLOAT,
        to,
        kRingTag,
        s_.coll,
        &reqs[1]));
    return 2;
  }

 private:
  const float* in_;
  float* out_;
  int64_t count_;
  int64_t parts_ = 1;
};

// send or recv: every piece posted at once on State::comm.
class P2pOp final : public MpiOp {
 public:
  P2pOp(State& s, OpType type, float* buf, int64_t count, int peer, int tag)
      : MpiOp(s, type, peer, tag) {
    int64_t piece_elems =
        std::max<int64_t>(1, s.chunk_bytes / int64_t{sizeof(float)});
    int64_t parts = std::max<int64_t>(1, ceil_div(count, piece_elems));
    reqs_.reserve(parts);
    for (int64_t p = 0; p < parts; ++p) {
      Range pc = piece(0, count, p, parts);
      if (pc.len == 0 && count > 0)
        continue;
      MPI_Request req;
      if (type == OpType::kSend) {
        NDT_MPI_CHECK(MPI_Isend(
            buf + pc.lo,
            static_cast<int>(pc.len),
            MPI_FLOAT,
            peer,
            tag,
            s.comm,
            &req));
      } else {
        NDT_MPI_CHECK(MPI_Irecv(
            buf + pc.lo,
            static_cast<int>(pc.len),
            MPI_FLOAT,
            peer,
            tag,
            s.comm,
            &req));
      }
      reqs_.push_back(req);
    }
  }

  bool advance() override {
    int flag = 0;
    NDT_MPI_CHECK(MPI_Testall(
        static_cast<int>(reqs_.size()),
        reqs_.data(),
        &flag,
        MPI_STATUSES_IGNORE));
    if (flag)
      ++g_progress_events;
    return flag != 0;
  }

  // A recv can be cancelled (a send in general cannot).
  bool abandon() override {
    if (type() != OpType::kRecv)
      return false;
    for (MPI_Request& req : reqs_) {
      if (req == MPI_REQUEST_NULL)
        continue;
      NDT_MPI_CHECK(MPI_Cancel(&req));
      NDT_MPI_CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    }
    return true;
  }

 private:
  std::vector<MPI_Request> reqs_;
};

void progress_group(State& s) {
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
      ++g_progress_events;
      s.queue.pop_front();
    }
  } catch (const std::exception& e) {
    if (s.broken.empty())
      s.broken = e.what();
    throw;
  }
}

void progress_all() {
  for (State* s : registry()) {
    if (s->broken.empty())
      progress_group(*s);
  }
}

class MpiWork final : public Work {
 public:
  MpiWork(
      std::shared_ptr<State> state, std::shared_ptr<MpiOp> op, double timeout_s)
      : state_(std::move(state)), op_(std::move(op)), timeout_s_(timeout_s) {}

  bool test() override {
    if (op_->done)
      return true;
    throw_if_broken();
    progress_all();
    if (op_->done)
      return true;
    throw_if_broken();
    return false;
  }

  // Polls test(). While rounds keep completing it spins (a core per rank)
  // or yields between polls (oversubscribed node); after 10 ms without
  // progress it yields, and after 100 ms it sleeps 50 us then 500 us
  // between polls, leaving the cores to ranks that are still computing.
  // (sched_yield on every poll costs whole time slices on a busy machine:
  // 5x slower 4 MiB all-reduces in comm_bench.)
  void wait(double timeout_s) override {
    const double limit = timeout_s > 0 ? timeout_s : timeout_s_;
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(limit));
    uint64_t seen = g_progress_events;
    auto last_move = start;
    while (!test()) {
      auto now = Clock::now();
      if (now >= deadline)
        on_timeout(limit);
      if (g_progress_events != seen) {
        seen = g_progress_events;
        last_move = now;
      }
      auto still = now - last_move;
      if (still < std::chrono::milliseconds(10)) {
        if (g_oversubscribed)
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

 private:
  void throw_if_broken() const {
    NDT_CHECK(
        state_->broken.empty(),
        CommError,
        op_->label(),
        " failed: ",
        state_->broken);
  }

  [[noreturn]] void on_timeout(double limit) {
    std::string msg = detail::comm_timeout_message(
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

  std::shared_ptr<State> state_;
  std::shared_ptr<MpiOp> op_;
  double timeout_s_;
};

}  // namespace

// ---------------------------------------------------------------- State

MpiProcessGroup::State::State(MPI_Comm owned, std::string group_name)
    : comm(owned), name(std::move(group_name)) {
  NDT_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  NDT_MPI_CHECK(MPI_Comm_dup(comm, &coll));
  NDT_MPI_CHECK(MPI_Comm_set_errhandler(coll, MPI_ERRORS_RETURN));
  NDT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  NDT_MPI_CHECK(MPI_Comm_size(comm, &size));
  NDT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  ring_min_bytes = size == 2 ? 0 : MpiProcessGroup::kDefaultRingMinBytes;
  registry().push_back(this);
}

MpiProcessGroup::State::~State() {
  auto& groups = registry();
  groups.erase(std::remove(groups.begin(), groups.end(), this), groups.end());
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

void* MpiProcessGroup::State::scratch(size_t bytes) {
  if (scratch_bytes < bytes) {
    if (scratch_ptr != nullptr) {
      mem_free(scratch_ptr, scratch_bytes, MemTag::kComm);
    }
    scratch_ptr = mem_alloc(bytes, MemTag::kComm);
    scratch_bytes = bytes;
  }
  return scratch_ptr;
}

// ---------------------------------------------------------------- Runtime

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  NDT_CHECK(!initialized, CommError, "MpiRuntime: MPI is already initialised");
  int provided = MPI_THREAD_SINGLE;
  NDT_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided));
  NDT_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  NDT_CHECK(
      provided >= MPI_THREAD_FUNNELED,
      CommError,
      "MpiRuntime: MPI provides thread level ",
      provided,
      " (need at least MPI_THREAD_FUNNELED)");
  NDT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  NDT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
  MPI_Comm node = MPI_COMM_NULL;
  NDT_MPI_CHECK(MPI_Comm_split_type(
      MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int node_ranks = 1;
  NDT_MPI_CHECK(MPI_Comm_size(node, &node_ranks));
  NDT_MPI_CHECK(MPI_Comm_free(&node));
  // Online cores, not this process's affinity: mpirun binds each rank to
  // one core when there are enough of them.
  int ncpu = static_cast<int>(std::thread::hardware_concurrency());
  g_oversubscribed = node_ranks > std::max(ncpu, 1);
}

MpiRuntime::~MpiRuntime() {
  if (active())
    MPI_Finalize();
}

bool MpiRuntime::active() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

void MpiRuntime::abort(int code) {
  if (active())
    MPI_Abort(MPI_COMM_WORLD, code);
}

std::unique_ptr<MpiProcessGroup> MpiRuntime::world() {
  MPI_Comm comm = MPI_COMM_NULL;
  NDT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  return std::make_unique<MpiProcessGroup>(
      std::make_shared<MpiProcessGroup::State>(comm, "world"), "world");
}

// ---------------------------------------------------------------- Group

MpiProcessGroup::MpiProcessGroup(std::shared_ptr<State> state, std::string name)
    : ProcessGroup(std::move(name)), state_(std::move(state)) {}

MpiProcessGroup::~MpiProcessGroup() = default;

int MpiProcessGroup::rank() const {
  return state_->rank;
}

int MpiProcessGroup::size() const {
  return state_->size;
}

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
  state_->queue.push_back(op);
  progress_group(*state_);  // starts it now if the queue was idle
  return std::make_unique<MpiWork>(state_, std::move(op), timeout_s());
}

namespace {

// Number of pieces of at most chunk_bytes for count elements of `esize`.
int64_t chunks_of(const State& s, int64_t count, int64_t esize) {
  int64_t elems = std::max<int64_t>(1, s.chunk_bytes / esize);
  return std::max<int64_t>(1, ceil_div(count, elems));
}

template <typename T>
std::shared_ptr<MpiOp> make_all_reduce(
    State& s, T* buf, int64_t count, ReduceOp op) {
  if (count * int64_t{sizeof(T)} >= s.ring_min_bytes) {
    return std::make_shared<RingAllReduce<T>>(s, buf, count, op);
  }
  int64_t chunks = chunks_of(s, count, sizeof(T));
  return std::make_shared<NbcOp>(
      s,
      OpType::kAllReduce,
      chunks,
      [&s, buf, count, chunks, op](int64_t k, MPI_Request* req) {
        Range pc = piece(0, count, k, chunks);
        NDT_MPI_CHECK(MPI_Iallreduce(
            MPI_IN_PLACE,
            buf + pc.lo,
            static_cast<int>(pc.len),
            mpi_type<T>(),
            mpi_op(op),
            s.coll,
            req));
      });
}

}  // namespace

std::unique_ptr<Work> MpiProcessGroup::all_reduce_async(
    float* buf, int64_t count, ReduceOp op) {
  check_count(OpType::kAllReduce, buf, count);
  check_usable(OpType::kAllReduce);
  record_op(OpType::kAllReduce, count, sizeof(float));
  if (count == 0 || size() == 1)
    return std::make_unique<CompletedWork>();
  return submit(make_all_reduce(*state_, buf, count, op));
}

std::unique_ptr<Work> MpiProcessGroup::all_reduce_async(
    double* buf, int64_t count, ReduceOp op) {
  check_count(OpType::kAllReduce, buf, count);
  check_usable(OpType::kAllReduce);
  record_op(OpType::kAllReduce, count, sizeof(double));
  if (count == 0 || size() == 1)
    return std::make_unique<CompletedWork>();
  return submit(make_all_reduce(*state_, buf, count, op));
}

std::unique_ptr<Work> MpiProcessGroup::reduce_scatter_async(
    const float* in, float* out, int64_t count) {
  constexpr OpType kOp = OpType::kReduceScatter;
  check_count(kOp, in, count);
  check_count(kOp, out, count);
  const int64_t bytes = count * int64_t{sizeof(float)};
  check_disjoint(kOp, in, bytes * size(), out, bytes);
  check_usable(kOp);
  record_op(kOp, count);
  if (count == 0)
    return std::make_unique<CompletedWork>();
  if (size() == 1) {
    std::memcpy(out, in, bytes);
    return std::make_unique<CompletedWork>();
  }
  State& s = *state_;
  if (bytes * size() >= s.ring_min_bytes || bytes * size() > s.chunk_bytes) {
    return submit(std::make_shared<RingReduceScatter>(s, in, out, count));
  }
  return submit(std::make_shared<NbcOp>(
      s, kOp, 1, [&s, in, out, count](int64_t, MPI_Request* req) {
        NDT_MPI_CHECK(MPI_Ireduce_scatter_block(
            in, out, static_cast<int>(count), MPI_FLOAT, MPI_SUM, s.coll, req));
      }));
}

std::unique_ptr<Work> MpiProcessGroup::all_gather_async(
    const float* in, float* out, int64_t count) {
  constexpr OpType kOp = OpType::kAllGather;
  check_count(kOp, in, count);
  check_count(kOp, out, count);
  check_usable(kOp);
  record_op(kOp, count);
  if (count == 0)
    return std::make_unique<CompletedWork>();
  const int64_t bytes = count * int64_t{sizeof(float)};
  if (size() == 1) {
    if (in != out)
      std::memmove(out, in, bytes);
    return std::make_unique<CompletedWork>();
  }
  State& s = *state_;
  if (bytes * size() >= s.ring_min_bytes || bytes * size() > s.chunk_bytes) {
    return submit(std::make_shared<RingAllGather>(s, in, out, count));
  }
  const bool in_place = in == out + rank() * count;
  return submit(std::make_shared<NbcOp>(
      s, kOp, 1, [&s, in, out, count, in_place](int64_t, MPI_Request* req) {
        NDT_MPI_CHECK(MPI_Iallgather(
            in_place ? MPI_IN_PLACE : in,
            static_cast<int>(count),
            MPI_FLOAT,
            out,
            static_cast<int>(count),
            MPI_FLOAT,
            s.coll,
            req));
      }));
}

std::unique_ptr<Work> MpiProcessGroup::broadcast_async(
    float* buf, int64_t count, int root) {
  constexpr OpType kOp = OpType::kBroadcast;
  check_count(kOp, buf, count);
  check_rank(kOp, "root", root);
  check_usable(kOp);
  record_op(kOp, count);
  if (count == 0 || size() == 1)
    return std::make_unique<CompletedWork>();
  State& s = *state_;
  int64_t chunks = chunks_of(s, count, sizeof(float));
  return submit(std::make_shared<NbcOp>(
      s,
      kOp,
      chunks,
      [&s, buf, count, chunks, root](int64_t k, MPI_Request* req) {
        Range pc = piece(0, count, k, chunks);
        NDT_MPI_CHECK(MPI_Ibcast(
            buf + pc.lo,
            static_cast<int>(pc.len),
            MPI_FLOAT,
            root,
            s.coll,
            req));
      }));
}

std::unique_ptr<Work> MpiProcessGroup::reduce_async(
    const float* in, float* out, int64_t count, int root) {
  constexpr OpType kOp = OpType::kReduce;
  check_count(kOp, in, count);
  check_rank(kOp, "root", root);
  if (rank() == root)
    check_count(kOp, out, count);
  check_usable(kOp);
  record_op(kOp, count);
  if (count == 0)
    return std::make_unique<CompletedWork>();
  if (size() == 1) {
    if (in != out)
      std::memmove(out, in, count * sizeof(float));
    return std::make_unique<CompletedWork>();
  }
  State& s = *state_;
  int64_t chunks = chunks_of(s, count, sizeof(float));
  const bool is_root = rank() == root;
  return submit(std::make_shared<NbcOp>(
      s,
      kOp,
      chunks,
      [&s, in, out, count, chunks, root, is_root](int64_t k, MPI_Request* req) {
        Range pc = piece(0, count, k, chunks);
        const void* send = is_root && in == out ? MPI_IN_PLACE : in + pc.lo;
        NDT_MPI_CHECK(MPI_Ireduce(
            send,
            is_root ? out + pc.lo : nullptr,
            static_cast<int>(pc.len),
            MPI_FLOAT,
            MPI_SUM,
            root,
            s.coll,
            req));
      }));
}

std::unique_ptr<Work> MpiProcessGroup::all_to_all_async(
    const float* in, float* out, int64_t count) {
  constexpr OpType kOp = OpType::kAllToAll;
  check_count(kOp, in, count);
  check_count(kOp, out, count);
  const int64_t bytes = count * size() * int64_t{sizeof(float)};
  check_disjoint(kOp, in, bytes, out, bytes);
  check_usable(kOp);
  record_op(kOp, count);
  if (count == 0)
    return std::make_unique<CompletedWork>();
  if (size() == 1) {
    std::memcpy(out, in, bytes);
    return std::make_unique<CompletedWork>();
  }
  State& s = *state_;
  if (bytes >= s.ring_min_bytes || bytes > s.chunk_bytes) {
    return submit(std::make_shared<PairwiseAllToAll>(s, in, out, count));
  }
  return submit(std::make_shared<NbcOp>(
      s, kOp, 1, [&s, in, out, count](int64_t, MPI_Request* req) {
        NDT_MPI_CHECK(MPI_Ialltoall(
            in,
            static_cast<int>(count),
            MPI_FLOAT,
            out,
            static_cast<int>(count),
            MPI_FLOAT,
            s.coll,
            req));
      }));
}

std::unique_ptr<Work> MpiProcessGroup::send_async(
    const float* buf, int64_t count, int peer, int tag) {
  constexpr OpType kOp = OpType::kSend;
  check_count(kOp, buf, count);
  check_rank(kOp, "peer", peer);
  check_tag(kOp, tag);
  check_usable(kOp);
  record_op(kOp, count);
  // MPI_Isend takes a const buffer; P2pOp holds one pointer type for both.
  auto op = std::make_shared<P2pOp>(
      *state_, kOp, const_cast<float*>(buf), count, peer, tag);
  state_->p2p.push_back(op);
  return std::make_unique<MpiWork>(state_, std::move(op), timeout_s());
}

std::unique_ptr<Work> MpiProcessGroup::recv_async(
    float* buf, int64_t count, int peer, int tag) {
  constexpr OpType kOp = OpType::kRecv;
  check_count(kOp, buf, count);
  check_rank(kOp, "peer", peer);
  check_tag(kOp, tag);
  check_usable(kOp);
  record_op(kOp, count);
  auto op = std::make_shared<P2pOp>(*state_, kOp, buf, count, peer, tag);
  state_->p2p.push_back(op);
  return std::make_unique<MpiWork>(state_, std::move(op), timeout_s());
}

void MpiProcessGroup::barrier() {
  check_usable(OpType::kBarrier);
  record_op(OpType::kBarrier, 0);
  State& s = *state_;
  submit(std::make_shared<
             NbcOp>(s, OpType::kBarrier, 1, [&s](int64_t, MPI_Request* req) {
    NDT_MPI_CHECK(MPI_Ibarrier(s.coll, req));
  }))->wait();
}

std::unique_ptr<ProcessGroup> MpiProcessGroup::split(
    int color, int key, std::string name) {
  check_usable(OpType::kBarrier);
  NDT_CHECK(
      color >= 0,
      ConfigError,
      "split of group ",
      this->name(),
      ": color must be >= 0, got ",
      color);
  // Finish queued collectives first: a peer waiting on one of them needs
  // this rank's progress, which a blocking MPI_Comm_split would withhold.
  if (!state_->queue.empty()) {
    MpiWork(state_, state_->queue.back(), timeout_s()).wait(0);
  }
  MPI_Comm comm = MPI_COMM_NULL;
  NDT_MPI_CHECK(MPI_Comm_split(state_->comm, color, key, &comm));
  auto state = std::make_shared<State>(comm, name);
  state->chunk_bytes = state_->chunk_bytes;
  auto pg =
      std::make_unique<MpiProcessGroup>(std::move(state), std::move(name));
  pg->set_timeout_s(timeout_s());
  return pg;
}

void MpiProcessGroup::progress() {
  NDT_CHECK(
      state_->broken.empty(),
      CommError,
      "rank ",
      state_->world_rank,
      ": progress on group ",
      name(),
      " failed: ",
      state_->broken);
  progress_all();
}

}  // namespace ndt
