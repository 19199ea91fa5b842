#include "comm/work.h"

#include "base/check.h"

namespace ndt {

const char* to_string(OpType op) {
  switch (op) {
    case OpType::kAllReduce:
      return "all_reduce";
    case OpType::kReduceScatter:
      return "reduce_scatter";
    case OpType::kAllGather:
      return "all_gather";
    case OpType::kBroadcast:
      return "broadcast";
    case OpType::kReduce:
      return "reduce";
    case OpType::kAllToAll:
      return "all_to_all";
    case OpType::kSend:
      return "send";
    case OpType::kRecv:
      return "recv";
    case OpType::kBarrier:
      return "barrier";
  }
  return "unknown_op";
}

namespace detail {

std::string comm_op_text(
    OpType op, const std::string& group, int peer, int tag) {
  if (peer >= 0 && (op == OpType::kSend || op == OpType::kRecv)) {
    return str_cat(
        to_string(op),
        op == OpType::kSend ? " to peer " : " from peer ",
        peer,
        " (tag ",
        tag,
        ") on group ",
        group);
  }
  return str_cat(to_string(op), " on group ", group);
}

std::string comm_op_label(
    int rank, OpType op, const std::string& group, int peer, int tag) {
  return str_cat("rank ", rank, ": ", comm_op_text(op, group, peer, tag));
}

std::string comm_timeout_message(
    int rank,
    OpType op,
    const std::string& group,
    double timeout_s,
    int peer,
    int tag) {
  return str_cat(
      comm_op_label(rank, op, group, peer, tag),
      " timed out after ",
      timeout_s,
      " s");
}

}  // namespace detail
}  // namespace ndt
