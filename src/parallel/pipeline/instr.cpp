#include "parallel/pipeline/instr.h"

namespace ndt {

namespace {

// "<prefix><mb>[.<chunk>][<sep><peer>]": the chunk suffix only appears for
// chunks > 0 so that V = 1 schedules read like the textbook diagrams.
// (Built with append: GCC 12 raises a false -Wrestrict on "lit" + string.)
std::string compact(const char* prefix, const Instr& instr, const char* sep) {
  std::string s(prefix);
  s.append(std::to_string(instr.mb));
  if (instr.chunk > 0)
    s.append(".").append(std::to_string(instr.chunk));
  if (sep != nullptr)
    s.append(sep).append(std::to_string(instr.peer));
  return s;
}

}  // namespace

std::string to_string(const Instr& instr) {
  switch (instr.op) {
    case Op::kLoadMicroBatch:
      return compact("L", Instr{instr.op, instr.mb, 0, -1}, nullptr);
    case Op::kForward:
      return compact("F", instr, nullptr);
    case Op::kBackward:
      return compact("B", instr, nullptr);
    case Op::kSendAct:
      return compact("SA", instr, ">");
    case Op::kRecvAct:
      return compact("RA", instr, "<");
    case Op::kSendGrad:
      return compact("SG", instr, ">");
    case Op::kRecvGrad:
      return compact("RG", instr, "<");
    case Op::kWaitSendAct:
      return compact("WA", instr, ">");
    case Op::kWaitSendGrad:
      return compact("WG", instr, ">");
    case Op::kReduceGrads:
      return "RED";
    case Op::kOptimizerStep:
      return "OPT";
  }
  return "?";
}

const char* to_string(Op op) {
  switch (op) {
    case Op::kLoadMicroBatch:
      return "load_microbatch";
    case Op::kForward:
      return "forward";
    case Op::kBackward:
      return "backward";
    case Op::kSendAct:
      return "send_act";
    case Op::kRecvAct:
      return "recv_act";
    case Op::kSendGrad:
      return "send_grad";
    case Op::kRecvGrad:
      return "recv_grad";
    case Op::kWaitSendAct:
      return "wait_send_act";
    case Op::kWaitSendGrad:
      return "wait_send_grad";
    case Op::kReduceGrads:
      return "reduce_grads";
    case Op::kOptimizerStep:
      return "optimizer_step";
  }
  return "?";
}

}  // namespace ndt
