#include "comm/process_group.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "base/check.h"

namespace ndt {
namespace {

// Brackets one backend call with the observer's before() / after(), the
// latter also when the call throws.
class ObserverScope {
 public:
  ObserverScope(CommObserver* observer, OpType op, CommPhase phase)
      : observer_(observer), op_(op), phase_(phase) {
    observer_->before(op_, phase_);
  }
  ~ObserverScope() {
    observer_->after(op_, phase_);
  }
  ObserverScope(const ObserverScope&) = delete;
  ObserverScope& operator=(const ObserverScope&) = delete;

 private:
  CommObserver* observer_;
  OpType op_;
  CommPhase phase_;
};

// The Work of an observed operation: test() and wait() run inside the
// observer's bracket.
class ObservedWork final : public Work {
 public:
  ObservedWork(std::unique_ptr<Work> inner, CommObserver* observer, OpType op)
      : inner_(std::move(inner)), observer_(observer), op_(op) {}

  bool test() override {
    ObserverScope scope(observer_, op_, CommPhase::kTest);
    return inner_->test();
  }
  void wait(double timeout_s) override {
    ObserverScope scope(observer_, op_, CommPhase::kWait);
    inner_->wait(timeout_s);
  }

 private:
  std::unique_ptr<Work> inner_;
  CommObserver* observer_;
  OpType op_;
};

}  // namespace

ProcessGroup::ProcessGroup(std::string name, int rank, int size)
    : name_(std::move(name)), rank_(rank), size_(size) {}

void ProcessGroup::set_timeout_s(double seconds) {
  NDT_CHECK(
      seconds > 0,
      ConfigError,
      "group ",
      name_,
      ": timeout must be positive, got ",
      seconds,
      " s");
  timeout_s_ = seconds;
}

void ProcessGroup::admit(OpType op, int64_t count, int64_t element_bytes) {
  check_usable(op);
  ledger_.record(op, count, element_bytes);
}

template <typename Start>
std::unique_ptr<Work> ProcessGroup::start_op(
    OpType op, bool empty, Start&& start) {
  if (observer_ == nullptr) {
    if (empty)
      return std::make_unique<CompletedWork>();
    return start();
  }
  CommObserver* observer = observer_;
  std::unique_ptr<Work> work;
  {
    ObserverScope scope(observer, op, CommPhase::kStart);
    work = empty ? std::make_unique<CompletedWork>() : start();
  }
  return std::make_unique<ObservedWork>(std::move(work), observer, op);
}

// ------------------------------------------------------------ operations

std::unique_ptr<Work> ProcessGroup::all_reduce_async(
    float* buf, int64_t count, ReduceOp op) {
  constexpr OpType kOp = OpType::kAllReduce;
  check_count(kOp, buf, count);
  admit(kOp, count, int64_t{sizeof(float)});
  return start_op(
      kOp, count == 0, [&] { return do_all_reduce_async(buf, count, op); });
}

std::unique_ptr<Work> ProcessGroup::all_reduce_async(
    double* buf, int64_t count, ReduceOp op) {
  constexpr OpType kOp = OpType::kAllReduce;
  check_count(kOp, buf, count);
  admit(kOp, count, int64_t{sizeof(double)});
  return start_op(
      kOp, count == 0, [&] { return do_all_reduce_async(buf, count, op); });
}

std::unique_ptr<Work> ProcessGroup::reduce_scatter_async(
    const float* in, float* out, int64_t count) {
  constexpr OpType kOp = OpType::kReduceScatter;
  check_count(kOp, in, count);
  check_count(kOp, out, count);
  const int64_t bytes = count * int64_t{sizeof(float)};
  check_disjoint(kOp, in, bytes * size_, out, bytes);
  admit(kOp, count, int64_t{sizeof(float)});
  return start_op(
      kOp, count == 0, [&] { return do_reduce_scatter_async(in, out, count); });
}

std::unique_ptr<Work> ProcessGroup::all_gather_async(
    const float* in, float* out, int64_t count) {
  constexpr OpType kOp = OpType::kAllGather;
  check_count(kOp, in, count);
  check_count(kOp, out, count);
  admit(kOp, count, int64_t{sizeof(float)});
  return start_op(
      kOp, count == 0, [&] { return do_all_gather_async(in, out, count); });
}

std::unique_ptr<Work> ProcessGroup::broadcast_async(
    float* buf, int64_t count, int root) {
  constexpr OpType kOp = OpType::kBroadcast;
  check_count(kOp, buf, count);
  check_rank(kOp, "root", root);
  admit(kOp, count, int64_t{sizeof(float)});
  return start_op(
      kOp, count == 0, [&] { return do_broadcast_async(buf, count, root); });
}

std::unique_ptr<Work> ProcessGroup::reduce_async(
    const float* in, float* out, int64_t count, int root) {
  constexpr OpType kOp = OpType::kReduce;
  check_count(kOp, in, count);
  check_rank(kOp, "root", root);
  if (rank_ == root)
    check_count(kOp, out, count);
  admit(kOp, count, int64_t{sizeof(float)});
  return start_op(
      kOp, count == 0, [&] { return do_reduce_async(in, out, count, root); });
}

std::unique_ptr<Work> ProcessGroup::all_to_all_async(
    const float* in, float* out, int64_t count) {
  constexpr OpType kOp = OpType::kAllToAll;
  check_count(kOp, in, count);
  check_count(kOp, out, count);
  const int64_t bytes = count * size_ * int64_t{sizeof(float)};
  check_disjoint(kOp, in, bytes, out, bytes);
  admit(kOp, count, int64_t{sizeof(float)});
  return start_op(
      kOp, count == 0, [&] { return do_all_to_all_async(in, out, count); });
}

std::unique_ptr<Work> ProcessGroup::send_async(
    const float* buf, int64_t count, int peer, int tag) {
  constexpr OpType kOp = OpType::kSend;
  check_count(kOp, buf, count);
  check_rank(kOp, "peer", peer);
  check_tag(kOp, tag);
  admit(kOp, count, int64_t{sizeof(float)});
  return start_op(
      kOp, false, [&] { return do_send_async(buf, count, peer, tag); });
}

std::unique_ptr<Work> ProcessGroup::recv_async(
    float* buf, int64_t count, int peer, int tag) {
  constexpr OpType kOp = OpType::kRecv;
  check_count(kOp, buf, count);
  check_rank(kOp, "peer", peer);
  check_tag(kOp, tag);
  admit(kOp, count, int64_t{sizeof(float)});
  return start_op(
      kOp, false, [&] { return do_recv_async(buf, count, peer, tag); });
}

void ProcessGroup::barrier() {
  constexpr OpType kOp = OpType::kBarrier;
  admit(kOp, 0, int64_t{sizeof(float)});
  if (observer_ == nullptr) {
    do_barrier();
    return;
  }
  ObserverScope scope(observer_, kOp, CommPhase::kStart);
  do_barrier();
}

std::unique_ptr<ProcessGroup> ProcessGroup::split(
    int color, int key, std::string name) {
  check_usable(OpType::kBarrier);
  std::unique_ptr<ProcessGroup> pg = do_split(color, key, std::move(name));
  pg->set_timeout_s(timeout_s_);
  return pg;
}

// ------------------------------------------------------------ blocking forms

void ProcessGroup::all_reduce(float* buf, int64_t count, ReduceOp op) {
  all_reduce_async(buf, count, op)->wait();
}

void ProcessGroup::all_reduce(double* buf, int64_t count, ReduceOp op) {
  all_reduce_async(buf, count, op)->wait();
}

void ProcessGroup::share_from_rank0(double* buf, int64_t count) {
  if (rank() != 0)
    std::fill(buf, buf + count, 0.0);
  all_reduce(buf, count);
}

void ProcessGroup::reduce_scatter(const float* in, float* out, int64_t count) {
  reduce_scatter_async(in, out, count)->wait();
}

void ProcessGroup::all_gather(const float* in, float* out, int64_t count) {
  all_gather_async(in, out, count)->wait();
}

void ProcessGroup::broadcast(float* buf, int64_t count, int root) {
  broadcast_async(buf, count, root)->wait();
}

void ProcessGroup::reduce(
    const float* in, float* out, int64_t count, int root) {
  reduce_async(in, out, count, root)->wait();
}

void ProcessGroup::all_to_all(const float* in, float* out, int64_t count) {
  all_to_all_async(in, out, count)->wait();
}

void ProcessGroup::send(const float* buf, int64_t count, int peer, int tag) {
  send_async(buf, count, peer, tag)->wait();
}

void ProcessGroup::recv(float* buf, int64_t count, int peer, int tag) {
  recv_async(buf, count, peer, tag)->wait();
}

void ProcessGroup::check_count(
    OpType op, const void* buf, int64_t count) const {
  NDT_CHECK(
      count >= 0,
      Error,
      to_string(op),
      " on group ",
      name_,
      ": negative count ",
      count);
  NDT_CHECK(
      count == 0 || buf != nullptr,
      Error,
      to_string(op),
      " on group ",
      name_,
      ": null buffer for ",
      count,
      " elements");
}

void ProcessGroup::check_rank(OpType op, const char* what, int r) const {
  NDT_CHECK(
      r >= 0 && r < size(),
      Error,
      to_string(op),
      " on group ",
      name_,
      ": ",
      what,
      " ",
      r,
      " is not a rank of this group (size ",
      size(),
      ")");
}

void ProcessGroup::check_tag(OpType op, int tag) const {
  NDT_CHECK(
      tag >= 0 && tag < 32768,
      Error,
      to_string(op),
      " on group ",
      name_,
      ": tag ",
      tag,
      " outside [0, 32768)");
}

void ProcessGroup::check_disjoint(
    OpType op,
    const void* a,
    int64_t a_bytes,
    const void* b,
    int64_t b_bytes) const {
  auto pa = reinterpret_cast<uintptr_t>(a);
  auto pb = reinterpret_cast<uintptr_t>(b);
  bool overlap = a_bytes > 0 && b_bytes > 0 &&
                 pa < pb + static_cast<uintptr_t>(b_bytes) &&
                 pb < pa + static_cast<uintptr_t>(a_bytes);
  NDT_CHECK(
      !overlap,
      Error,
      to_string(op),
      " on group ",
      name_,
      ": input and output buffers overlap");
}

}  // namespace ndt
