// Pipeline schedules are pure data, so they are tested without MPI: every
// generator over a range of (P, M, V) must pass verify_schedule, the
// simulated bubble and memory must match the known formulas, and
// verify_schedule itself must catch broken schedules, naming the rank and
// instruction at fault. All checks are exact (schedule bookkeeping); the
// bubble comparison allows 1e-12 for the double division.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/error.h"
#include "parallel/pipeline/instr.h"
#include "parallel/pipeline/schedules.h"
#include "parallel/pipeline/verify.h"

namespace ndt {
namespace {

const std::vector<int> kRanks = {1, 2, 3, 4, 8};
constexpr int kMaxMicrobatches = 16;

struct Case {
  PipeSchedule kind;
  int chunks;
};

const std::vector<Case> kCases = {
    {PipeSchedule::kNaive, 1},
    {PipeSchedule::kGpipe, 1},
    {PipeSchedule::kOneFOneB, 1},
    {PipeSchedule::kInterleaved, 1},
    {PipeSchedule::kInterleaved, 2},
    {PipeSchedule::kInterleaved, 3},
    {PipeSchedule::kInterleaved, 4},
};

// Compute-only text of one rank's list: "F0 F1 B0 ...".
std::string compute_order(const std::vector<Instr>& list) {
  std::string out;
  for (const Instr& in : list) {
    if (in.op != Op::kForward && in.op != Op::kBackward)
      continue;
    out.append(out.empty() ? "" : " ").append(to_string(in));
  }
  return out;
}

std::string list_text(const std::vector<Instr>& list) {
  std::string out;
  for (const Instr& in : list)
    out.append(out.empty() ? "" : " ").append(to_string(in));
  return out;
}

size_t index_of(const std::vector<Instr>& list, const Instr& want) {
  auto it = std::find(list.begin(), list.end(), want);
  EXPECT_NE(it, list.end()) << "no '" << to_string(want) << "' in list";
  return static_cast<size_t>(it - list.begin());
}

TEST(ScheduleGenerators, EveryGeneratorPassesVerify) {
  for (const Case& c : kCases) {
    for (int P : kRanks) {
      for (int M = 1; M <= kMaxMicrobatches; ++M) {
        const Schedule s = make_schedule(c.kind, P, M, c.chunks);
        const ScheduleReport rep = verify_schedule(s);
        SCOPED_TRACE(render_grid(s, rep));
        ASSERT_TRUE(rep.ok) << rep.error;
        // Every send's wait comes after its message was received.
        EXPECT_EQ(rep.peer_waits, 0);
        ASSERT_EQ(rep.peak_in_flight.size(), static_cast<size_t>(P));
        for (int r = 0; r < P; ++r) {
          EXPECT_LE(rep.peak_in_flight[r], s.max_in_flight[r]) << "rank " << r;
          // Every generator's claim is tight, not just an upper bound.
          EXPECT_EQ(rep.peak_in_flight[r], s.max_in_flight[r]) << "rank " << r;
        }
      }
    }
  }
}

TEST(ScheduleGenerators, RankZeroPeakMatchesFormulaForLargeM) {
  for (int P : kRanks) {
    for (int M = P; M <= kMaxMicrobatches; ++M) {
      EXPECT_EQ(verify_schedule(one_f_one_b(P, M)).peak_in_flight[0], P);
      // Megatron's warm-up 2 (P - 1) + (V - 1) P when P divides M.
      for (int V : {2, 3}) {
        const int warmup = 2 * (P - 1) + (V - 1) * P;
        if (M % P != 0 || M * V <= warmup)
          continue;
        EXPECT_EQ(
            verify_schedule(interleaved(P, M, V)).peak_in_flight[0], warmup + 1)
            << "P=" << P << " M=" << M << " V=" << V;
      }
    }
  }
}

// A short last group caps the wrap-around slack (Note [Interleaved order
// and warm-up]): P = 8, M = 10 (last group of 2), V = 2 on rank 0 warms up
// with (V - 1) P + (P - 1) + min(P - 1, 2) = 17 forwards, not Megatron's 22,
// which deadlocks.
TEST(ScheduleGenerators, InterleavedShortLastGroupWarmup) {
  const Schedule s = interleaved(8, 10, 2);
  EXPECT_EQ(s.max_in_flight[0], 18);
  EXPECT_EQ(s.max_in_flight[7], 9);
  const ScheduleReport rep = verify_schedule(s);
  ASSERT_TRUE(rep.ok) << rep.error;
  EXPECT_EQ(rep.peak_in_flight, s.max_in_flight);
}

TEST(ScheduleGenerators, EachListHasMVForwardsAndBackwards) {
  for (const Case& c : kCases) {
    for (int P : kRanks) {
      for (int M : {1, 5, 16}) {
        const Schedule s = make_schedule(c.kind, P, M, c.chunks);
        ASSERT_EQ(s.instrs.size(), static_cast<size_t>(P));
        for (const auto& list : s.instrs) {
          const auto count = [&](Op op) {
            return std::count_if(list.begin(), list.end(), [&](const Instr& i) {
              return i.op == op;
            });
          };
          EXPECT_EQ(count(Op::kForward), M * c.chunks);
          EXPECT_EQ(count(Op::kBackward), M * c.chunks);
          EXPECT_EQ(count(Op::kReduceGrads), 1);
          // A wait for each send.
          EXPECT_EQ(count(Op::kWaitSendAct), count(Op::kSendAct));
          EXPECT_EQ(count(Op::kWaitSendGrad), count(Op::kSendGrad));
          ASSERT_GE(list.size(), 2u);
          EXPECT_EQ(list.back().op, Op::kOptimizerStep);
          // Between kReduceGrads and kOptimizerStep only waits.
          size_t i = list.size() - 2;
          while (list[i].op == Op::kWaitSendAct ||
                 list[i].op == Op::kWaitSendGrad)
            --i;
          EXPECT_EQ(list[i].op, Op::kReduceGrads);
        }
      }
    }
  }
}

TEST(ScheduleGenerators, BubbleOfGpipeAndOneFOneBMatchesTheory) {
  for (int P : kRanks) {
    for (int M = 1; M <= kMaxMicrobatches; ++M) {
      const double theory = static_cast<double>(P - 1) / (M + P - 1);
      for (const Schedule& s : {gpipe(P, M), one_f_one_b(P, M)}) {
        const ScheduleReport rep = verify_schedule(s, 1, 2);
        ASSERT_TRUE(rep.ok) << rep.error;
        EXPECT_NEAR(rep.bubble, theory, 1e-12)
            << to_string(s.kind) << " P=" << P << " M=" << M;
        EXPECT_EQ(rep.makespan, 3.0 * (M + P - 1));
      }
    }
  }
}

TEST(ScheduleGenerators, OneFOneBPeakIndependentOfMAndGpipePeakIsM) {
  for (int P : kRanks) {
    const std::vector<int> at_p =
        verify_schedule(one_f_one_b(P, P)).peak_in_flight;
    for (int M = P; M <= kMaxMicrobatches; ++M) {
      EXPECT_EQ(verify_schedule(one_f_one_b(P, M)).peak_in_flight, at_p)
          << "P=" << P << " M=" << M;
      EXPECT_EQ(
          verify_schedule(gpipe(P, M)).peak_in_flight, std::vector<int>(P, M));
    }
  }
}

TEST(ScheduleGenerators, InterleavedWithOneChunkIsOneFOneB) {
  for (int P : kRanks) {
    for (int M = 1; M <= kMaxMicrobatches; ++M) {
      const Schedule a = interleaved(P, M, 1);
      const Schedule b = one_f_one_b(P, M);
      EXPECT_EQ(a.instrs, b.instrs) << "P=" << P << " M=" << M;
      EXPECT_EQ(a.max_in_flight, b.max_in_flight);
    }
  }
}

// Hand-derived: 1f1b P = 2, M = 2. Rank 0 warms up with one forward; rank 1
// holds the loss head and alternates. Receives sit right before the
// compute that consumes them, sends right after the one that produces them.
// Rank 1 received micro-batch m's activation before it sent m's gradient,
// so rank 0's send of m is done once RG m is; rank 0 sends nothing after
// its receives of rank 1's gradients, so rank 1 waits for them at the end.
TEST(ScheduleGenerators, OneFOneBTwoRanksExactLists) {
  const Schedule s = one_f_one_b(2, 2);
  EXPECT_EQ(
      list_text(s.instrs[0]),
      "L0 F0 SA0>1 L1 F1 SA1>1 RG0<1 WA0>1 B0 RG1<1 WA1>1 B1 RED OPT");
  EXPECT_EQ(
      list_text(s.instrs[1]),
      "L0 RA0<0 F0 B0 SG0>0 L1 RA1<0 F1 B1 SG1>0 RED WG0>0 WG1>0 OPT");
  EXPECT_EQ(s.max_in_flight, (std::vector<int>{2, 1}));
}

// Hand-derived: interleaved P = 2, M = 4, V = 2 on rank 0. Forward table
// (groups of P = 2): 0 1 0.1 1.1 2 3 2.1 3.1; backward table: 0.1 1.1 0 1
// 2.1 3.1 2 3; warm-up 2 (P - 1) + (V - 1) P = 4.
TEST(ScheduleGenerators, InterleavedRankZeroOrder) {
  const Schedule s = interleaved(2, 4, 2);
  EXPECT_EQ(
      compute_order(s.instrs[0]),
      "F0 F1 F0.1 F1.1 F2 B0.1 F3 B1.1 F2.1 B0 F3.1 B1 B2.1 B3.1 B2 B3");
  EXPECT_EQ(s.max_in_flight[0], 5);
  // Rank 1 holds virtual stages 1 and 3: chunk 0 sends its output back to
  // rank 0 (stage 2), chunk 1 is the loss head.
  EXPECT_EQ(s.instrs[1][0], (Instr{Op::kLoadMicroBatch, 0, -1, -1}));
  EXPECT_EQ(
      index_of(s.instrs[1], {Op::kSendAct, 0, 0, 0}),
      index_of(s.instrs[1], {Op::kForward, 0, 0, -1}) + 1);
}

// A partial last group (M = 5 is not a multiple of P = 4).
TEST(ScheduleGenerators, InterleavedPartialLastGroup) {
  const Schedule s = interleaved(4, 5, 2);
  // Rank 3: warm-up (V - 1) P = 4, then 1F1B with the loss head chunk.
  const std::string order = compute_order(s.instrs[3]);
  EXPECT_EQ(order.rfind("F0 F1 F2 F3 F0.1 B0.1 F1.1 B1.1", 0), 0u) << order;
  const ScheduleReport rep = verify_schedule(s);
  EXPECT_TRUE(rep.ok) << rep.error;
}

TEST(ScheduleGenerators, MakeScheduleRejectsBadSizes) {
  EXPECT_THROW(make_schedule(PipeSchedule::kGpipe, 0, 4), ConfigError);
  EXPECT_THROW(make_schedule(PipeSchedule::kOneFOneB, 2, 0), ConfigError);
  EXPECT_THROW(make_schedule(PipeSchedule::kInterleaved, 2, 4, 0), ConfigError);
  EXPECT_THROW(make_schedule(PipeSchedule::kOneFOneB, 2, 4, 2), ConfigError);
  EXPECT_THROW(make_schedule(PipeSchedule::kNaive, 2, 4, 2), ConfigError);
  try {
    make_schedule(PipeSchedule::kGpipe, 2, 4, 3);
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("gpipe"), std::string::npos) << msg;
    EXPECT_NE(msg.find("chunks = 3"), std::string::npos) << msg;
  }
  try {
    make_schedule(PipeSchedule::kOneFOneB, -1, 4);
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("ranks (-1)"), std::string::npos)
        << e.what();
  }
}

TEST(ScheduleText, InstrToString) {
  EXPECT_EQ(to_string(Instr{Op::kLoadMicroBatch, 3, -1, -1}), "L3");
  EXPECT_EQ(to_string(Instr{Op::kForward, 3, 0, -1}), "F3");
  EXPECT_EQ(to_string(Instr{Op::kBackward, 3, 0, -1}), "B3");
  EXPECT_EQ(to_string(Instr{Op::kForward, 3, 1, -1}), "F3.1");
  EXPECT_EQ(to_string(Instr{Op::kBackward, 3, 1, -1}), "B3.1");
  EXPECT_EQ(to_string(Instr{Op::kSendAct, 3, 0, 1}), "SA3>1");
  EXPECT_EQ(to_string(Instr{Op::kRecvAct, 3, 0, 0}), "RA3<0");
  EXPECT_EQ(to_string(Instr{Op::kSendGrad, 3, 0, 0}), "SG3>0");
  EXPECT_EQ(to_string(Instr{Op::kRecvGrad, 3, 0, 1}), "RG3<1");
  EXPECT_EQ(to_string(Instr{Op::kSendAct, 3, 1, 0}), "SA3.1>0");
  EXPECT_EQ(to_string(Instr{Op::kWaitSendAct, 3, 0, 1}), "WA3>1");
  EXPECT_EQ(to_string(Instr{Op::kWaitSendGrad, 3, 1, 0}), "WG3.1>0");
  EXPECT_EQ(to_string(Instr{Op::kReduceGrads, -1, -1, -1}), "RED");
  EXPECT_EQ(to_string(Instr{Op::kOptimizerStep, -1, -1, -1}), "OPT");
}

TEST(ScheduleText, OpAndKindNames) {
  EXPECT_STREQ(to_string(Op::kLoadMicroBatch), "load_microbatch");
  EXPECT_STREQ(to_string(Op::kForward), "forward");
  EXPECT_STREQ(to_string(Op::kBackward), "backward");
  EXPECT_STREQ(to_string(Op::kSendAct), "send_act");
  EXPECT_STREQ(to_string(Op::kRecvAct), "recv_act");
  EXPECT_STREQ(to_string(Op::kSendGrad), "send_grad");
  EXPECT_STREQ(to_string(Op::kRecvGrad), "recv_grad");
  EXPECT_STREQ(to_string(Op::kWaitSendAct), "wait_send_act");
  EXPECT_STREQ(to_string(Op::kWaitSendGrad), "wait_send_grad");
  EXPECT_STREQ(to_string(Op::kReduceGrads), "reduce_grads");
  EXPECT_STREQ(to_string(Op::kOptimizerStep), "optimizer_step");
  EXPECT_STREQ(to_string(PipeSchedule::kNaive), "naive");
  EXPECT_STREQ(to_string(PipeSchedule::kGpipe), "gpipe");
  EXPECT_STREQ(to_string(PipeSchedule::kOneFOneB), "1f1b");
  EXPECT_STREQ(to_string(PipeSchedule::kInterleaved), "interleaved");
}

// Hand-derived with t_f = 1, t_b = 2: rank 1 runs F0 at t = 1, F1 at 2,
// then B1 (3-4) and B0 (5-6); rank 0's B1 waits for rank 1's gradient at 5
// and B0 for the one at 7. Makespan 9, busy 6 per rank: bubble 1/3.
TEST(ScheduleText, RenderGridGpipeTwoByTwo) {
  const Schedule s = gpipe(2, 2);
  const ScheduleReport rep = verify_schedule(s, 1, 2);
  ASSERT_TRUE(rep.ok) << rep.error;
  EXPECT_EQ(rep.makespan, 9.0);
  EXPECT_EQ(
      render_grid(s, rep),
      "gpipe P=2 M=2 V=1\n"
      "rank 0 | F0 F1 .  .  .  B1 B1 B0 B0\n"
      "rank 1 | .  F0 F1 B1 B1 B0 B0 .  .\n"
      "bubble 0.333 (theory 0.333)\n");
}

// ---- verify_schedule catches broken schedules ----

ScheduleReport expect_failure(const Schedule& s) {
  const ScheduleReport rep = verify_schedule(s);
  EXPECT_FALSE(rep.ok) << render_grid(s, rep);
  return rep;
}

void expect_contains(const std::string& error, const std::string& part) {
  EXPECT_NE(error.find(part), std::string::npos)
      << "error: " << error << "\nexpected to contain: " << part;
}

TEST(ScheduleVerify, BackwardBeforeItsForward) {
  Schedule s = one_f_one_b(2, 2);
  auto& list = s.instrs[1];  // L0 RA0<0 F0 B0 ...
  std::swap(
      list[index_of(list, {Op::kForward, 0, 0, -1})],
      list[index_of(list, {Op::kBackward, 0, 0, -1})]);
  expect_contains(
      expect_failure(s).error,
      "rank 1 instr 2 'B0': backward before its forward");
}

TEST(ScheduleVerify, WaitBeforeItsSend) {
  Schedule s = one_f_one_b(2, 2);
  auto& list = s.instrs[0];  // L0 F0 SA0>1 ... RG0<1 WA0>1 ...
  const Instr wait{Op::kWaitSendAct, 0, 0, 1};
  list.erase(list.begin() + index_of(list, wait));
  list.insert(list.begin() + 1, wait);
  expect_contains(
      expect_failure(s).error, "rank 0 instr 1 'WA0>1': wait before its send");
}

TEST(ScheduleVerify, WaitTwice) {
  Schedule s = one_f_one_b(2, 2);
  auto& list = s.instrs[1];  // ... RED WG0>0 WG1>0 OPT
  list.insert(list.end() - 1, Instr{Op::kWaitSendGrad, 0, 0, 0});
  expect_contains(expect_failure(s).error, "'WG0>0': waited for twice");
}

TEST(ScheduleVerify, WaitWithTheWrongPeer) {
  Schedule s = one_f_one_b(3, 3);
  auto& list = s.instrs[1];
  list[index_of(list, {Op::kWaitSendGrad, 0, 0, 0})].peer = 2;
  expect_contains(expect_failure(s).error, "peer 2 is not the send's, rank 0");
}

// Each wait moved right after its send: under interleaving rank 0 then
// waits for rank 1 to take an activation while rank 1 first waits for a
// gradient that rank 0 sends only after that wait.
TEST(ScheduleVerify, WaitThatDeadlocks) {
  Schedule s = interleaved(2, 4, 2);
  for (auto& list : s.instrs) {
    std::vector<Instr> moved;
    for (const Instr& in : list) {
      if (in.op == Op::kWaitSendAct || in.op == Op::kWaitSendGrad)
        continue;
      moved.push_back(in);
      if (in.op == Op::kSendAct || in.op == Op::kSendGrad)
        moved.push_back(
            {in.op == Op::kSendAct ? Op::kWaitSendAct : Op::kWaitSendGrad,
             in.mb,
             in.chunk,
             in.peer});
    }
    list = moved;
  }
  const ScheduleReport rep = expect_failure(s);
  expect_contains(rep.error, "deadlock");
  expect_contains(rep.error, "'W");
  EXPECT_GT(rep.peer_waits, 0);
}

// A wait moved ahead of the receive it relied on waits for the peer: legal
// (the step still finishes), and counted.
TEST(ScheduleVerify, WaitBeforeTheReceiveThatFollowsTheOtherSide) {
  Schedule s = one_f_one_b(2, 2);
  auto& list = s.instrs[0];  // ... SA1>1 RG0<1 WA0>1 ...
  const Instr wait{Op::kWaitSendAct, 0, 0, 1};
  list.erase(list.begin() + index_of(list, wait));
  list.insert(list.begin() + index_of(list, {Op::kSendAct, 0, 0, 1}) + 1, wait);
  const ScheduleReport rep = verify_schedule(s);
  ASSERT_TRUE(rep.ok) << rep.error;
  EXPECT_EQ(rep.peer_waits, 1);
}

TEST(ScheduleVerify, MissingReceive) {
  Schedule s = gpipe(2, 2);
  auto& list = s.instrs[1];  // L0 RA0<0 F0 L1 RA1<0 F1 ...
  list.erase(list.begin() + index_of(list, {Op::kRecvAct, 1, 0, 0}));
  const std::string error = expect_failure(s).error;
  expect_contains(error, "rank 1 instr 4 'F1'");
  expect_contains(error, "kRecvAct");
}

TEST(ScheduleVerify, ReceivesOutOfFifoOrder) {
  Schedule s = gpipe(2, 2);
  auto& list = s.instrs[1];
  std::swap(
      list[index_of(list, {Op::kRecvAct, 0, 0, 0})],
      list[index_of(list, {Op::kRecvAct, 1, 0, 0})]);
  const std::string error = expect_failure(s).error;
  expect_contains(error, "rank 1 instr 1 'RA1<0'");
  expect_contains(error, "FIFO");
  expect_contains(error, "'SA0>1'");
}

TEST(ScheduleVerify, WrongPeer) {
  Schedule s = one_f_one_b(4, 4);
  auto& list = s.instrs[1];
  const size_t i = index_of(list, {Op::kSendAct, 0, 0, 2});
  list[i].peer = 3;
  expect_contains(
      expect_failure(s).error,
      "rank 1 instr " + std::to_string(i) +
          " 'SA0>3': peer 3 is not rank 2 of virtual stage 2");
}

TEST(ScheduleVerify, WrongPeerInterleavedWrapAround) {
  // Rank 3's chunk 0 (virtual stage 3) feeds rank 0's chunk 1 (stage 4).
  Schedule s = interleaved(4, 4, 2);
  auto& list = s.instrs[0];
  const size_t i = index_of(list, {Op::kRecvAct, 0, 1, 3});
  list[i].peer = 1;
  expect_contains(
      expect_failure(s).error,
      "rank 0 instr " + std::to_string(i) +
          " 'RA0.1<1': peer 1 is not rank 3 of virtual stage 3");
}

TEST(ScheduleVerify, MissingOptimizerStep) {
  Schedule s = one_f_one_b(3, 4);
  s.instrs[2].pop_back();
  expect_contains(
      expect_failure(s).error, "rank 2: list does not end with kOptimizerStep");
}

TEST(ScheduleVerify, ReduceBeforeLastBackward) {
  Schedule s = gpipe(2, 3);
  auto& list = s.instrs[0];
  std::rotate(list.end() - 3, list.end() - 2, list.end() - 1);  // B0 RED
  const std::string error = expect_failure(s).error;
  expect_contains(error, "rank 0");
  expect_contains(error, "'RED': kReduceGrads before the rank's last backward");
}

TEST(ScheduleVerify, ClaimBelowPeak) {
  Schedule s = one_f_one_b(4, 8);
  s.max_in_flight[0] = 3;  // real peak 4
  const size_t i = index_of(s.instrs[0], {Op::kForward, 3, 0, -1});
  expect_contains(
      expect_failure(s).error,
      "rank 0 instr " + std::to_string(i) +
          " 'F3': 4 (micro-batch, chunk) pairs in flight, more than the "
          "claimed max_in_flight 3");
}

TEST(ScheduleVerify, BothRanksReceiveFirstDeadlocks) {
  Schedule s = one_f_one_b(2, 2);
  auto& list = s.instrs[0];  // L0 F0 SA0>1 L1 F1 SA1>1 RG0<1 ...
  const size_t i = index_of(list, {Op::kRecvGrad, 0, 0, 1});
  std::rotate(list.begin(), list.begin() + i, list.begin() + i + 1);
  EXPECT_EQ(
      expect_failure(s).error,
      "deadlock: rank 0 blocked at instr 0 'RG0<1'; "
      "rank 1 blocked at instr 1 'RA0<0'");
}

TEST(ScheduleVerify, SendWithoutNeighbour) {
  Schedule s = gpipe(2, 2);
  auto& list = s.instrs[0];
  // Virtual stage 0 has no input whose gradient it could send.
  list.insert(list.begin() + 2, Instr{Op::kSendGrad, 0, 0, 1});
  const std::string error = expect_failure(s).error;
  expect_contains(error, "rank 0 instr 2 'SG0>1'");
  expect_contains(error, "virtual stage 0");
}

TEST(ScheduleVerify, MicroBatchOutOfRange) {
  Schedule s = gpipe(2, 2);
  s.instrs[1][2].mb = 2;  // 'F0' -> 'F2'
  expect_contains(
      expect_failure(s).error,
      "rank 1 instr 2 'F2': micro-batch outside [0, 2)");
}

}  // namespace
}  // namespace ndt
