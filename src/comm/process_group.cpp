#include "comm/process_group.h"

#include <cstdint>

#include "base/check.h"

namespace ndt {

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

void ProcessGroup::all_reduce(float* buf, int64_t count, ReduceOp op) {
  all_reduce_async(buf, count, op)->wait();
}

void ProcessGroup::all_reduce(double* buf, int64_t count, ReduceOp op) {
  all_reduce_async(buf, count, op)->wait();
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
