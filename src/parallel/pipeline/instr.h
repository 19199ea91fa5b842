// The pipeline instruction set: a schedule is, per pipeline rank, a list of
// Instr that the executor (executor.h) runs in order and that
// verify_schedule (verify.h) simulates (CONVENTIONS.md section 6).
//
// Ranks and chunks: with P pipeline ranks and V model chunks per rank, the
// model's blocks are cut into P * V consecutive "virtual stages"; chunk c of
// rank r is virtual stage c * P + r (Megatron's interleaving). With V = 1
// the virtual stage is the rank. Virtual stage 0 holds the input layer,
// virtual stage P * V - 1 the loss head.
//
//   op               mb  chunk  peer  meaning
//   kLoadMicroBatch  m   -1     -1    take micro-batch m's inputs (first
//                                     virtual stage) and/or targets (last)
//   kForward         m   c      -1    forward of chunk c on micro-batch m
//   kBackward        m   c      -1    backward of chunk c on micro-batch m
//   kSendAct         m   c      q     send chunk c's output for m to rank q
//   kRecvAct         m   c      q     receive chunk c's input for m from q
//   kSendGrad        m   c      q     send the gradient of chunk c's input
//                                     for m to rank q
//   kRecvGrad        m   c      q     receive the gradient of chunk c's
//                                     output for m from rank q
//   kWaitSendAct     m   c      q     wait for kSendAct m c q to complete
//                                     and release its buffer
//   kWaitSendGrad    m   c      q     the same for kSendGrad m c q
//   kReduceGrads     -1  -1     -1    data-parallel gradient reduction
//   kOptimizerStep   -1  -1     -1    clip + optimizer step
//
// Messages between two ranks travel on one FIFO channel per direction and
// kind (activations, gradients): a receive gets the oldest message sent to
// it on that channel, so the schedules must post matching receives in the
// order of the sends (verify_schedule checks it).
//
// Sends are asynchronous: their buffers stay alive until the send's wait
// instruction (a send without one is waited for at kOptimizerStep). The
// generators place each wait where the matching receive has completed
// (send_waits.h), so it never waits for the peer and the buffers' lifetimes
// are the same in every run.
#pragma once

#include <string>

namespace ndt {

enum class Op {
  kLoadMicroBatch,
  kForward,
  kBackward,
  kSendAct,
  kRecvAct,
  kSendGrad,
  kRecvGrad,
  kWaitSendAct,
  kWaitSendGrad,
  kReduceGrads,
  kOptimizerStep,
};

struct Instr {
  Op op = Op::kForward;
  int mb = -1;     // micro-batch, or -1
  int chunk = -1;  // local model chunk, or -1
  int peer = -1;   // pipeline rank of the other side of a send/recv, or -1

  bool operator==(const Instr&) const = default;
};

// Compact text: "L3" (load mb 3), "F3" / "B3" (chunk 0), "F3.1" / "B3.1"
// (chunk 1), "SA3>1" / "RA3<0" (send/recv activation, peer rank),
// "SG3>0" / "RG3<1" (gradients; chunk suffix ".c" after the mb when c > 0,
// e.g. "SA3.1>0"), "WA3>1" / "WG3>0" (waits for those sends), "RED",
// "OPT".
std::string to_string(const Instr& instr);
// The op's name: "load_microbatch", "forward", "backward", "send_act",
// "recv_act", "send_grad", "recv_grad", "wait_send_act", "wait_send_grad",
// "reduce_grads", "optimizer_step".
const char* to_string(Op op);

}  // namespace ndt
