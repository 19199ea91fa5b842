#include "comm/local_process_group.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <tuple>
#include <vector>

#include "base/check.h"
#include "comm/reduce_op.h"

namespace ndt {
namespace {

using detail::combine;
using Clock = std::chrono::steady_clock;

// Waits are sliced so that a failure elsewhere (which notifies no
// condition variable of this group) is noticed within one slice.
constexpr auto kWaitSlice = std::chrono::milliseconds(5);

// Elements reduced per pass; the accumulator lives on the stack.
constexpr int64_t kReduceBlock = 512;

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(seconds));
}

// One per run_local: the first failure of any rank, seen by every group
// created in the run.
struct FailState {
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::string reason;  // "rank R failed: <what>"
  std::exception_ptr first;

  void record(int rank, std::exception_ptr e) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
    }
    std::lock_guard<std::mutex> lk(mu);
    if (!first) {
      first = e;
      reason = detail::str_cat("rank ", rank, " failed: ", what);
      failed = true;
    }
  }
  std::string get_reason() {
    std::lock_guard<std::mutex> lk(mu);
    return reason;
  }
};

struct Shared;

// What a rank publishes for the collective it is in.
struct Slot {
  const char* what = nullptr;  // operation name
  const void* in = nullptr;
  void* out = nullptr;
  int64_t count = 0;
  int root = 0;
  int extra = 0;  // reduce op and element type
  int color = 0;  // split only
  int key = 0;
  std::shared_ptr<Shared> child;  // split: published by the new leader
};

// A posted send or recv, matched in posting order per (src, dst, tag).
struct P2p {
  const float* src = nullptr;
  float* dst = nullptr;
  int64_t count = 0;
  bool matched = false;  // left the queue; copy in progress or done
  bool done = false;
  std::string error;
};

using P2pKey = std::tuple<int, int, int>;  // group ranks src, dst; tag

// State shared by the threads of one group.
struct Shared {
  Shared(std::vector<int> ranks, std::shared_ptr<FailState> f)
      : n(static_cast<int>(ranks.size())),
        world_ranks(std::move(ranks)),
        fail(std::move(f)),
        slots(n) {}

  const int n;
  const std::vector<int> world_ranks;  // for messages
  const std::shared_ptr<FailState> fail;
  std::vector<Slot> slots;

  // Reusable barrier: the last of n arrivals bumps the generation.
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  std::string broken;  // set by a timeout; the group is unusable after it

  std::mutex p2p_mu;
  std::condition_variable p2p_cv;
  std::map<P2pKey, std::deque<std::shared_ptr<P2p>>> sends;
  std::map<P2pKey, std::deque<std::shared_ptr<P2p>>> recvs;
};

int encode_extra(ReduceOp op, int dtype) {
  return static_cast<int>(op) * 2 + dtype;
}

class LocalP2pWork;

class LocalProcessGroup final : public ProcessGroup {
 public:
  LocalProcessGroup(std::shared_ptr<Shared> shared, int rank, std::string name)
      : ProcessGroup(std::move(name), rank, shared->n),
        shared_(std::move(shared)),
        rank_(rank) {}

 protected:
  // Hooks (Note [Backend hooks] in process_group.h): arguments are checked
  // and recorded, and collectives have count > 0.
  std::unique_ptr<Work> do_all_reduce_async(
      float* buf, int64_t count, ReduceOp op) override {
    return all_reduce_impl(buf, count, op, 0);
  }
  std::unique_ptr<Work> do_all_reduce_async(
      double* buf, int64_t count, ReduceOp op) override {
    return all_reduce_impl(buf, count, op, 1);
  }

  std::unique_ptr<Work> do_reduce_scatter_async(
      const float* in, float* out, int64_t count) override {
    constexpr OpType kOp = OpType::kReduceScatter;
    enter(kOp, in, out, count, 0, 0);
    // This rank's block, summed in rank order; only this thread reads
    // block rank_ of the inputs.
    const int64_t base = rank_ * count;
    float acc[kReduceBlock];
    for (int64_t i = 0; i < count; i += kReduceBlock) {
      int64_t len = std::min(kReduceBlock, count - i);
      std::memcpy(acc, in_of<float>(0) + base + i, len * sizeof(float));
      for (int j = 1; j < size(); ++j) {
        combine(acc, in_of<float>(j) + base + i, len, ReduceOp::kSum);
      }
      std::memcpy(out + i, acc, len * sizeof(float));
    }
    leave(kOp);
    return std::make_unique<CompletedWork>();
  }

  std::unique_ptr<Work> do_all_gather_async(
      const float* in, float* out, int64_t count) override {
    constexpr OpType kOp = OpType::kAllGather;
    enter(kOp, in, out, count, 0, 0);
    for (int j = 0; j < size(); ++j) {
      const float* src = in_of<float>(j);
      float* dst = out + j * count;
      if (src != dst)
        std::memcpy(dst, src, count * sizeof(float));
    }
    leave(kOp);
    return std::make_unique<CompletedWork>();
  }

  std::unique_ptr<Work> do_broadcast_async(
      float* buf, int64_t count, int root) override {
    constexpr OpType kOp = OpType::kBroadcast;
    enter(kOp, buf, buf, count, root, 0);
    if (rank_ != root) {
      std::memcpy(buf, in_of<float>(root), count * sizeof(float));
    }
    leave(kOp);
    return std::make_unique<CompletedWork>();
  }

  std::unique_ptr<Work> do_reduce_async(
      const float* in, float* out, int64_t count, int root) override {
    constexpr OpType kOp = OpType::kReduce;
    enter(kOp, in, out, count, root, 0);
    // Element range [lo, hi) of the result is this thread's: it alone
    // reads those elements of every input and writes them on root, so in
    // may equal out on root.
    float* dst = static_cast<float*>(shared_->slots[root].out);
    int64_t lo = count * rank_ / size(), hi = count * (rank_ + 1) / size();
    float acc[kReduceBlock];
    for (int64_t i = lo; i < hi; i += kReduceBlock) {
      int64_t len = std::min(kReduceBlock, hi - i);
      std::memcpy(acc, in_of<float>(0) + i, len * sizeof(float));
      for (int j = 1; j < size(); ++j) {
        combine(acc, in_of<float>(j) + i, len, ReduceOp::kSum);
      }
      std::memcpy(dst + i, acc, len * sizeof(float));
    }
    leave(kOp);
    return std::make_unique<CompletedWork>();
  }

  std::unique_ptr<Work> do_all_to_all_async(
      const float* in, float* out, int64_t count) override {
    constexpr OpType kOp = OpType::kAllToAll;
    enter(kOp, in, out, count, 0, 0);
    for (int j = 0; j < size(); ++j) {
      std::memcpy(
          out + j * count,
          in_of<float>(j) + rank_ * count,
          count * sizeof(float));
    }
    leave(kOp);
    return std::make_unique<CompletedWork>();
  }

  std::unique_ptr<Work> do_send_async(
      const float* buf, int64_t count, int peer, int tag) override;
  std::unique_ptr<Work> do_recv_async(
      float* buf, int64_t count, int peer, int tag) override;

  void do_barrier() override {
    barrier_wait(to_string(OpType::kBarrier));
  }

  std::unique_ptr<ProcessGroup> do_split(
      int color, int key, std::string name) override {
    const char* what = "split";
    Slot& mine = shared_->slots[rank_];
    mine = Slot{};
    mine.what = what;
    mine.color = color;
    mine.key = key;
    barrier_wait(what);
    check_same(what);
    std::vector<int> members;  // ranks of this group, in new-rank order
    for (int j = 0; j < size(); ++j) {
      if (shared_->slots[j].color == color)
        members.push_back(j);
    }
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
      return shared_->slots[a].key < shared_->slots[b].key;
    });
    int leader = members.front();
    if (rank_ == leader) {
      std::vector<int> world;
      for (int j : members)
        world.push_back(shared_->world_ranks[j]);
      mine.child = std::make_shared<Shared>(std::move(world), shared_->fail);
    }
    barrier_wait(what);
    std::shared_ptr<Shared> child = shared_->slots[leader].child;
    barrier_wait(what);  // the leader's slot is read by all before reuse
    mine.child.reset();
    int new_rank = static_cast<int>(
        std::find(members.begin(), members.end(), rank_) - members.begin());
    return std::make_unique<LocalProcessGroup>(
        std::move(child), new_rank, std::move(name));
  }

 private:
  friend class LocalP2pWork;

  int label_rank() const {
    return shared_->world_ranks[rank_];
  }

  template <typename T>
  const T* in_of(int j) const {
    return static_cast<const T*>(shared_->slots[j].in);
  }

  template <typename T>
  std::unique_ptr<Work> all_reduce_impl(
      T* buf, int64_t count, ReduceOp op, int dtype) {
    constexpr OpType kOp = OpType::kAllReduce;
    enter(kOp, buf, buf, count, 0, encode_extra(op, dtype));
    // Element range [lo, hi) is this thread's in every rank's buffer: it
    // reduces it in rank order and writes the result back to all of them.
    std::vector<T*> bufs(size());
    for (int j = 0; j < size(); ++j) {
      bufs[j] = static_cast<T*>(shared_->slots[j].out);
    }
    int64_t lo = count * rank_ / size(), hi = count * (rank_ + 1) / size();
    T acc[kReduceBlock];
    for (int64_t i = lo; i < hi; i += kReduceBlock) {
      int64_t len = std::min(kReduceBlock, hi - i);
      std::memcpy(acc, bufs[0] + i, len * sizeof(T));
      for (int j = 1; j < size(); ++j)
        combine(acc, bufs[j] + i, len, op);
      for (int j = 0; j < size(); ++j) {
        std::memcpy(bufs[j] + i, acc, len * sizeof(T));
      }
    }
    leave(kOp);
    return std::make_unique<CompletedWork>();
  }

  // Publishes this rank's arguments and waits until every rank has; then
  // checks that all ranks called the same operation.
  void enter(
      OpType op,
      const void* in,
      void* out,
      int64_t count,
      int root,
      int extra) {
    Slot& s = shared_->slots[rank_];
    s = Slot{};
    s.what = to_string(op);
    s.in = in;
    s.out = out;
    s.count = count;
    s.root = root;
    s.extra = extra;
    barrier_wait(s.what);
    check_same(s.what);
  }

  // Waits until every rank has finished reading the published buffers.
  void leave(OpType op) {
    barrier_wait(to_string(op));
  }

  void check_same(const char* what) const {
    const Slot& mine = shared_->slots[rank_];
    for (int j = 0; j < size(); ++j) {
      const Slot& s = shared_->slots[j];
      bool same = std::strcmp(s.what, mine.what) == 0 &&
                  s.count == mine.count && s.root == mine.root &&
                  s.extra == mine.extra;
      NDT_CHECK(
          same,
          CommError,
          "rank ",
          label_rank(),
          ": ",
          what,
          " on group ",
          name(),
          " (count ",
          mine.count,
          ", root ",
          mine.root,
          ") does not match rank ",
          shared_->world_ranks[j],
          "'s ",
          s.what,
          " (count ",
          s.count,
          ", root ",
          s.root,
          ")");
    }
  }

  // Throws if the group is broken or the run failed; s.mu held.
  void throw_if_failed(const char* what) const {
    const Shared& s = *shared_;
    NDT_CHECK(
        s.broken.empty(),
        CommError,
        "rank ",
        label_rank(),
        ": ",
        what,
        " on group ",
        name(),
        " failed: ",
        s.broken);
    NDT_CHECK(
        !s.fail->failed,
        CommError,
        "rank ",
        label_rank(),
        ": ",
        what,
        " on group ",
        name(),
        " failed: ",
        s.fail->get_reason());
  }

  void barrier_wait(const char* what) {
    Shared& s = *shared_;
    std::unique_lock<std::mutex> lk(s.mu);
    throw_if_failed(what);
    if (s.n == 1)
      return;
    const uint64_t ticket = s.generation;
    if (++s.arrived == s.n) {
      s.arrived = 0;
      ++s.generation;
      s.cv.notify_all();
      return;
    }
    const auto deadline = deadline_after(timeout_s());
    while (s.generation == ticket) {
      throw_if_failed(what);
      auto now = Clock::now();
      if (now >= deadline) {
        std::string msg = detail::str_cat(
            "rank ",
            label_rank(),
            ": ",
            what,
            " on group ",
            name(),
            " timed out after ",
            timeout_s(),
            " s");
        s.broken = msg;
        s.cv.notify_all();
        throw CommError(msg);
      }
      s.cv.wait_until(lk, std::min(deadline, now + kWaitSlice));
    }
  }

  std::shared_ptr<P2p> post_p2p(
      bool is_send,
      const float* src,
      float* dst,
      int64_t count,
      int peer,
      int tag);

  std::shared_ptr<Shared> shared_;
  const int rank_;
};

class LocalP2pWork final : public Work {
 public:
  LocalP2pWork(
      std::shared_ptr<Shared> shared,
      std::shared_ptr<P2p> entry,
      OpType op,
      P2pKey key,
      std::string label,
      double timeout_s)
      : shared_(std::move(shared)),
        entry_(std::move(entry)),
        op_(op),
        key_(key),
        label_(std::move(label)),
        timeout_s_(timeout_s) {}

  bool test() override {
    std::lock_guard<std::mutex> lk(shared_->p2p_mu);
    return done_locked();
  }

  void wait(double timeout_s) override {
    double limit = timeout_s > 0 ? timeout_s : timeout_s_;
    const auto deadline = deadline_after(limit);
    std::unique_lock<std::mutex> lk(shared_->p2p_mu);
    while (!done_locked()) {
      auto now = Clock::now();
      if (now >= deadline && !entry_->matched) {
        // Withdraw the unmatched entry so that the group stays usable.
        auto& queues = op_ == OpType::kSend ? shared_->sends : shared_->recvs;
        auto& q = queues[key_];
        q.erase(std::find(q.begin(), q.end(), entry_));
        if (q.empty())
          queues.erase(key_);
        throw CommError(
            detail::str_cat(label_, " timed out after ", limit, " s"));
      }
      shared_->p2p_cv.wait_until(lk, std::min(deadline, now + kWaitSlice));
    }
  }

 private:
  bool done_locked() const {
    NDT_CHECK(
        entry_->error.empty(), CommError, label_, " failed: ", entry_->error);
    if (entry_->done)
      return true;
    NDT_CHECK(
        !shared_->fail->failed,
        CommError,
        label_,
        " failed: ",
        shared_->fail->get_reason());
    return false;
  }

  std::shared_ptr<Shared> shared_;
  std::shared_ptr<P2p> entry_;
  OpType op_;
  P2pKey key_;
  std::string label_;
  double timeout_s_;
};

std::shared_ptr<P2p> LocalProcessGroup::post_p2p(
    bool is_send,
    const float* src,
    float* dst,
    int64_t count,
    int peer,
    int tag) {
  auto entry = std::make_shared<P2p>();
  entry->src = src;
  entry->dst = dst;
  entry->count = count;
  P2pKey key = is_send ? P2pKey{rank_, peer, tag} : P2pKey{peer, rank_, tag};
  Shared& s = *shared_;
  std::shared_ptr<P2p> send, recv;
  {
    std::lock_guard<std::mutex> lk(s.p2p_mu);
    (is_send ? s.sends : s.recvs)[key].push_back(entry);
    auto sq = s.sends.find(key);
    auto rq = s.recvs.find(key);
    if (sq != s.sends.end() && rq != s.recvs.end()) {
      send = sq->second.front();
      recv = rq->second.front();
      sq->second.pop_front();
      rq->second.pop_front();
      if (sq->second.empty())
        s.sends.erase(sq);
      if (rq->second.empty())
        s.recvs.erase(rq);
      send->matched = recv->matched = true;
    }
  }
  if (send) {
    // Copy outside the lock; the posting thread of the second half of the
    // pair does it.
    std::string error;
    if (send->count != recv->count) {
      error = detail::str_cat(
          "send of ",
          send->count,
          " elements matched a recv of ",
          recv->count,
          " (tag ",
          tag,
          ")");
    } else if (send->count > 0) {
      std::memcpy(recv->dst, send->src, send->count * sizeof(float));
    }
    std::lock_guard<std::mutex> lk(s.p2p_mu);
    send->error = recv->error = error;
    send->done = recv->done = true;
    s.p2p_cv.notify_all();
  }
  return entry;
}

std::unique_ptr<Work> LocalProcessGroup::do_send_async(
    const float* buf, int64_t count, int peer, int tag) {
  constexpr OpType kOp = OpType::kSend;
  auto entry = post_p2p(true, buf, nullptr, count, peer, tag);
  return std::make_unique<LocalP2pWork>(
      shared_,
      std::move(entry),
      kOp,
      P2pKey{rank_, peer, tag},
      detail::comm_op_label(label_rank(), kOp, name(), peer, tag),
      timeout_s());
}

std::unique_ptr<Work> LocalProcessGroup::do_recv_async(
    float* buf, int64_t count, int peer, int tag) {
  constexpr OpType kOp = OpType::kRecv;
  auto entry = post_p2p(false, nullptr, buf, count, peer, tag);
  return std::make_unique<LocalP2pWork>(
      shared_,
      std::move(entry),
      kOp,
      P2pKey{peer, rank_, tag},
      detail::comm_op_label(label_rank(), kOp, name(), peer, tag),
      timeout_s());
}

}  // namespace

void run_local(int n, const std::function<void(ProcessGroup& pg)>& fn) {
  NDT_CHECK(n >= 1, ConfigError, "run_local: need at least 1 rank, got ", n);
  auto fail = std::make_shared<FailState>();
  std::vector<int> ranks(n);
  std::iota(ranks.begin(), ranks.end(), 0);
  auto shared = std::make_shared<Shared>(std::move(ranks), fail);
  int started = n;
#pragma omp parallel num_threads(n)
  {
    const int r = omp_get_thread_num();
    if (omp_get_num_threads() != n) {
      if (r == 0)
        started = omp_get_num_threads();
    } else {
      try {
        LocalProcessGroup pg(shared, r, "world");
        fn(pg);
      } catch (...) {
        fail->record(r, std::current_exception());
      }
    }
  }
  NDT_CHECK(
      started == n,
      Error,
      "run_local(",
      n,
      "): OpenMP started ",
      started,
      " threads (called inside a parallel region, or OMP_THREAD_LIMIT?)");
  if (fail->first)
    std::rethrow_exception(fail->first);
}

}  // namespace ndt
