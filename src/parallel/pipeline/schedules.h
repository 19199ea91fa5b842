// Pipeline schedule generators: pure functions from (ranks P, micro-batches
// M, chunks V) to one instruction list per pipeline rank (instr.h).
//
//   naive        plain model parallelism: micro-batch m runs forward through
//                every stage and back before m + 1 starts (M = 1: one
//                micro-batch, one stage active at a time). V = 1.
//   gpipe        fill-drain: all M forwards, then all M backwards (in
//                reverse order). V = 1.
//   1f1b         PipeDream-Flush: rank r does min(P - r - 1, M) warm-up
//                forwards, then alternates one forward, one backward, then
//                cools down with the remaining backwards. V = 1.
//   interleaved  1F1B over V >= 1 chunks per rank (Megatron's interleaved
//                schedule): forwards go through the chunks in groups of P
//                micro-batches; warm-up (V - 1) P + (P - r - 1) +
//                min(P - r - 1, g) forwards, g = size of the last group
//                (Megatron's 2 (P - r - 1) + (V - 1) P when P divides M),
//                capped at M V; Note [Interleaved order and warm-up] in
//                schedules.cpp. Works for any M >= 1. With V = 1 it is
//                1f1b.
//
// Every list ends with kReduceGrads, kOptimizerStep. Sends and receives of
// activations and gradients are explicit instructions placed next to the
// compute that produces / consumes them; each send's wait comes after the
// first instruction that follows its receive (send_waits.h).
#pragma once

#include <string>
#include <vector>

#include "io/config.h"
#include "parallel/pipeline/instr.h"

namespace ndt {

struct Schedule {
  PipeSchedule kind = PipeSchedule::kOneFOneB;
  int ranks = 1;                           // P
  int microbatches = 1;                    // M
  int chunks = 1;                          // V
  std::vector<std::vector<Instr>> instrs;  // one list per pipeline rank
  // What the generator promises: the most (micro-batch, chunk) pairs whose
  // forward has run and backward has not, per rank (naive 1, gpipe M V,
  // 1f1b min(P - r, M), interleaved min(warm-up + 1, M V)).
  std::vector<int> max_in_flight;
};

// Throws ConfigError naming the values when P < 1, M < 1, V < 1, or V > 1
// for a kind other than interleaved.
Schedule make_schedule(
    PipeSchedule kind, int ranks, int microbatches, int chunks = 1);

Schedule naive(int ranks, int microbatches);
Schedule gpipe(int ranks, int microbatches);
Schedule one_f_one_b(int ranks, int microbatches);
Schedule interleaved(int ranks, int microbatches, int chunks);

// Virtual stage of (rank, chunk) and back (see instr.h).
inline int virtual_stage(int rank, int chunk, int ranks) {
  return chunk * ranks + rank;
}

}  // namespace ndt
