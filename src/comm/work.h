// Work: one in-flight communication operation, and the operation names
// every communication error message uses.
//
// Each *_async call of a ProcessGroup returns a Work. test() makes progress
// without blocking; wait() blocks until the operation completes or its
// watchdog bound passes, then throws CommError naming the rank, the
// operation and the group (and the peer for send/recv), so that a lost
// peer becomes a loud error instead of a hang (DESIGN.md principle 8).
// Dropping a Work does not cancel its operation: the buffers given to the
// *_async call must stay valid until the operation has completed.
#pragma once

#include <string>

namespace ndt {

enum class OpType {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kReduce,
  kAllToAll,
  kSend,
  kRecv,
  kBarrier,
};

// "all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce",
// "all_to_all", "send", "recv", "barrier".
const char* to_string(OpType op);

class Work {
 public:
  virtual ~Work() = default;
  // Progresses the operation (and the other outstanding operations of its
  // backend) without blocking; true once it has completed. Throws
  // CommError if the operation or its group has failed.
  virtual bool test() = 0;
  // Blocks until complete. Throws CommError
  //   "rank R: all_reduce on group dp timed out after T s"
  //   "rank R: recv from peer P (tag G) on group world timed out after T s"
  // once timeout_s seconds pass (timeout_s <= 0: the group's timeout_s()
  // when the operation was started).
  virtual void wait(double timeout_s = 0) = 0;
};

// A Work that is already complete: zero-element operations, and backends
// that finish an operation inside the *_async call.
class CompletedWork final : public Work {
 public:
  bool test() override {
    return true;
  }
  void wait(double /*timeout_s*/ = 0) override {}
};

namespace detail {

// "all_reduce on group G" or, for send/recv (peer >= 0), "send to peer P
// (tag T) on group G".
std::string comm_op_text(
    OpType op, const std::string& group, int peer = -1, int tag = 0);

// "rank R: all_reduce on group G" or, for send/recv (peer >= 0),
// "rank R: send to peer P (tag T) on group G".
std::string comm_op_label(
    int rank, OpType op, const std::string& group, int peer = -1, int tag = 0);

// comm_op_label(...) + " timed out after T s".
std::string comm_timeout_message(
    int rank,
    OpType op,
    const std::string& group,
    double timeout_s,
    int peer = -1,
    int tag = 0);

}  // namespace detail
}  // namespace ndt
