// Stage partitioning: which contiguous run of the model's blocks each
// virtual pipeline stage holds (instr.h explains virtual stages).
//
// Cost estimate: the parameter count of each block, plus the input layer's
// parameters on the first stage and the head's on the last. For the
// transformer models every block has the same count, so blocks split
// evenly; parameters (not FLOPs) are used because they are exact, known
// before any data is seen, and also what a stage must hold in memory.
#pragma once

#include <cstdint>
#include <vector>

namespace ndt {

// Blocks per stage (stages entries, each >= 1, summing to
// block_cost.size()) minimising the largest stage cost, where a stage's
// cost is the sum of its blocks' costs plus first_cost on stage 0 and
// last_cost on the last stage; among such splits, the most even one
// (smallest sum of squared stage costs). Deterministic. Requires 1 <= stages <=
// block_cost.size().
std::vector<int> partition_blocks(
    const std::vector<int64_t>& block_cost,
    int stages,
    int64_t first_cost = 0,
    int64_t last_cost = 0);

// Modules [first, last] of a Model (0 = input layer, 1 + i = block i,
// last module = head) held as one pipeline chunk.
struct ModuleRange {
  int first = 0;
  int last = 0;
};

// The module ranges of `rank`'s chunks (chunk c = virtual stage
// c * ranks + rank) given blocks per virtual stage (stage_blocks, ranks x
// chunks entries): the input layer joins virtual stage 0, the head the last.
std::vector<ModuleRange> chunk_modules(
    const std::vector<int>& stage_blocks, int ranks, int rank);

}  // namespace ndt
