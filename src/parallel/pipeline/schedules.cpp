// Every generator first decides, per rank, the order of its compute steps
// (forward / backward of a (micro-batch, chunk)); assemble() then turns that
// order into instructions, adding the loads and the sends / receives next to
// the compute that produces / consumes them, and the waits for the sends
// (send_waits.h). The generators therefore differ
// only in the order of compute, which is what the textbook diagrams show.
//
// Note [Interleaved order and warm-up]
// Forward order on every rank (Megatron's schedule table): micro-batches in
// groups of P; for each group chunk 0 of its micro-batches, then chunk 1 of
// the same micro-batches, ..., chunk V - 1; then the next group. The last
// group may hold fewer than P micro-batches (M need not be a multiple of P).
// Backward order: the same groups, chunks V - 1 down to 0. Every rank uses
// the same two tables, so sends and receives on each channel come in the
// same order (FIFO holds by construction).
// Warm-up forwards on rank r, with g the size of the last group (g = P
// when P divides M):
//   V = 1:  min(P - r - 1, M)                                (exactly 1f1b)
//   V > 1:  min((V - 1) P + (P - r - 1) + min(P - r - 1, g), M V)
// then 1F1B pairs (forward first), then the remaining backwards. When P
// divides M this is Megatron's 2 (P - r - 1) + (V - 1) P. Why the cap on
// the second (P - r - 1): Megatron's extra forwards are slack for the
// wrap-around hop (rank P - 1, chunk c -> rank 0, chunk c + 1), which in a
// group of g micro-batches is g table entries long instead of P. With the
// uncapped formula a short last group deadlocks: rank 0 must run a forward
// of that group before its next backward, that forward needs rank P - 1's
// activation, and rank P - 1 only gets there after a backward that waits on
// rank 0's gradient (e.g. P = 8, M = 10, V = 2). With the cap,
// verify_schedule passes for every P in 1..12 and 16, M in 1..48, V in 1..6
// (checked once offline; tests/parallel/test_schedules.cpp keeps P in {1,
// 2, 3, 4, 8}, M in 1..16, V in 1..4). The warm-up never grows with r, so a
// rank's k-th backward only needs forwards its successor has already run.
// Megatron's formula with V = 1 would give 2 (P - r - 1), which is also
// correct but keeps P - r - 1 more micro-batches in flight than needed; the
// V = 1 row keeps interleaved(P, M, 1) identical to one_f_one_b(P, M).
#include "parallel/pipeline/schedules.h"

#include <algorithm>

#include "base/check.h"
#include "parallel/pipeline/send_waits.h"

namespace ndt {

namespace {

struct Compute {
  bool forward;
  int mb;
  int chunk;
};

using ComputeOrder = std::vector<std::vector<Compute>>;  // per rank

// Emits the instructions of one rank for its compute order. Loads come
// before the first forward of a micro-batch on a rank that holds the first
// (inputs) or the last (targets) virtual stage, so the data is there before
// anything of that micro-batch runs; one load serves both when the two
// stages share the rank.
std::vector<Instr> assemble_rank(
    const std::vector<Compute>& order,
    int rank,
    int ranks,
    int microbatches,
    int chunks) {
  const int last_stage = ranks * chunks - 1;
  const bool needs_data = rank == 0 || rank == last_stage % ranks;
  std::vector<bool> loaded(microbatches, false);
  std::vector<Instr> out;
  for (const Compute& c : order) {
    const int vs = virtual_stage(rank, c.chunk, ranks);
    const int prev = (vs - 1 + ranks) % ranks;  // rank of vs - 1
    const int next = (vs + 1) % ranks;          // rank of vs + 1
    if (c.forward) {
      if (needs_data && !loaded[c.mb]) {
        out.push_back({Op::kLoadMicroBatch, c.mb, -1, -1});
        loaded[c.mb] = true;
      }
      if (vs > 0)
        out.push_back({Op::kRecvAct, c.mb, c.chunk, prev});
      out.push_back({Op::kForward, c.mb, c.chunk, -1});
      if (vs < last_stage)
        out.push_back({Op::kSendAct, c.mb, c.chunk, next});
    } else {
      if (vs < last_stage)
        out.push_back({Op::kRecvGrad, c.mb, c.chunk, next});
      out.push_back({Op::kBackward, c.mb, c.chunk, -1});
      if (vs > 0)
        out.push_back({Op::kSendGrad, c.mb, c.chunk, prev});
    }
  }
  out.push_back({Op::kReduceGrads, -1, -1, -1});
  out.push_back({Op::kOptimizerStep, -1, -1, -1});
  return out;
}

Schedule assemble(
    PipeSchedule kind,
    int ranks,
    int microbatches,
    int chunks,
    const ComputeOrder& order,
    std::vector<int> max_in_flight) {
  Schedule s;
  s.kind = kind;
  s.ranks = ranks;
  s.microbatches = microbatches;
  s.chunks = chunks;
  std::vector<std::vector<Instr>> lists;
  for (int r = 0; r < ranks; ++r)
    lists.push_back(assemble_rank(order[r], r, ranks, microbatches, chunks));
  s.instrs = with_send_waits(lists);
  s.max_in_flight = std::move(max_in_flight);
  return s;
}

// Warm-up forwards, then (forward, backward) pairs, then the remaining
// backwards: the shape shared by 1f1b and interleaved. fwd and bwd list the
// (micro-batch, chunk) pairs in the order the rank runs them.
std::vector<Compute> warmup_steady_cooldown(
    const std::vector<Compute>& fwd,
    const std::vector<Compute>& bwd,
    int warmup) {
  const int total = static_cast<int>(fwd.size());
  std::vector<Compute> out;
  for (int i = 0; i < warmup; ++i)
    out.push_back(fwd[i]);
  for (int i = 0; i < total - warmup; ++i) {
    out.push_back(fwd[warmup + i]);
    out.push_back(bwd[i]);
  }
  for (int i = total - warmup; i < total; ++i)
    out.push_back(bwd[i]);
  return out;
}

void check_sizes(PipeSchedule kind, int ranks, int microbatches, int chunks) {
  NDT_CHECK(
      ranks >= 1 && microbatches >= 1 && chunks >= 1,
      ConfigError,
      "pipeline schedule ",
      to_string(kind),
      ": ranks (",
      ranks,
      "), micro-batches (",
      microbatches,
      ") and chunks (",
      chunks,
      ") must all be >= 1");
  NDT_CHECK(
      chunks == 1 || kind == PipeSchedule::kInterleaved,
      ConfigError,
      "pipeline schedule ",
      to_string(kind),
      " takes one chunk per rank, got chunks = ",
      chunks,
      " (only interleaved supports chunks > 1)");
}

}  // namespace

Schedule make_schedule(
    PipeSchedule kind, int ranks, int microbatches, int chunks) {
  check_sizes(kind, ranks, microbatches, chunks);
  switch (kind) {
    case PipeSchedule::kNaive:
      return naive(ranks, microbatches);
    case PipeSchedule::kGpipe:
      return gpipe(ranks, microbatches);
    case PipeSchedule::kOneFOneB:
      return one_f_one_b(ranks, microbatches);
    case PipeSchedule::kInterleaved:
      return interleaved(ranks, microbatches, chunks);
  }
  NDT_ASSERT(false, "unknown PipeSchedule ", static_cast<int>(kind));
  return {};
}

// Each rank alternates F m, B m: the backward of m on rank 0 waits for the
// whole pipeline, so m + 1 cannot start anywhere before m is done.
Schedule naive(int ranks, int microbatches) {
  check_sizes(PipeSchedule::kNaive, ranks, microbatches, 1);
  ComputeOrder order(ranks);
  for (int r = 0; r < ranks; ++r) {
    for (int m = 0; m < microbatches; ++m) {
      order[r].push_back({true, m, 0});
      order[r].push_back({false, m, 0});
    }
  }
  return assemble(
      PipeSchedule::kNaive,
      ranks,
      microbatches,
      1,
      order,
      std::vector<int>(ranks, 1));
}

// Backwards in reverse order (torchgpipe): the last stage starts on the
// micro-batch whose forward it just finished, as in the GPipe paper's figure.
Schedule gpipe(int ranks, int microbatches) {
  check_sizes(PipeSchedule::kGpipe, ranks, microbatches, 1);
  ComputeOrder order(ranks);
  for (int r = 0; r < ranks; ++r) {
    for (int m = 0; m < microbatches; ++m)
      order[r].push_back({true, m, 0});
    for (int m = microbatches - 1; m >= 0; --m)
      order[r].push_back({false, m, 0});
  }
  return assemble(
      PipeSchedule::kGpipe,
      ranks,
      microbatches,
      1,
      order,
      std::vector<int>(ranks, microbatches));
}

Schedule one_f_one_b(int ranks, int microbatches) {
  check_sizes(PipeSchedule::kOneFOneB, ranks, microbatches, 1);
  std::vector<Compute> fwd, bwd;
  for (int m = 0; m < microbatches; ++m) {
    fwd.push_back({true, m, 0});
    bwd.push_back({false, m, 0});
  }
  ComputeOrder order(ranks);
  std::vector<int> max_in_flight(ranks);
  for (int r = 0; r < ranks; ++r) {
    const int warmup = std::min(ranks - r - 1, microbatches);
    order[r] = warmup_steady_cooldown(fwd, bwd, warmup);
    max_in_flight[r] = std::min(ranks - r, microbatches);
  }
  return assemble(
      PipeSchedule::kOneFOneB, ranks, microbatches, 1, order, max_in_flight);
}

// See Note [Interleaved order and warm-up].
Schedule interleaved(int ranks, int microbatches, int chunks) {
  check_sizes(PipeSchedule::kInterleaved, ranks, microbatches, chunks);
  std::vector<Compute> fwd, bwd;
  for (int first = 0; first < microbatches; first += ranks) {
    const int end = std::min(first + ranks, microbatches);
    for (int c = 0; c < chunks; ++c) {
      for (int m = first; m < end; ++m) {
        fwd.push_back({true, m, c});
        bwd.push_back({false, m, chunks - 1 - c});
      }
    }
  }
  const int total = microbatches * chunks;
  const int last_group =
      microbatches % ranks == 0 ? ranks : microbatches % ranks;
  ComputeOrder order(ranks);
  std::vector<int> max_in_flight(ranks);
  for (int r = 0; r < ranks; ++r) {
    const int hops = ranks - r - 1;  // to the last rank
    const int warmup =
        chunks == 1
            ? std::min(hops, total)
            : std::min(
                  (chunks - 1) * ranks + hops + std::min(hops, last_group),
                  total);
    order[r] = warmup_steady_cooldown(fwd, bwd, warmup);
    // One more than the warm-up once a steady-state pair exists: its
    // forward runs before its backward.
    max_in_flight[r] = std::min(warmup + 1, total);
  }
  return assemble(
      PipeSchedule::kInterleaved,
      ranks,
      microbatches,
      chunks,
      order,
      max_in_flight);
}

}  // namespace ndt
