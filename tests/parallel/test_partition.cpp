// Stage partitioning is pure integer bookkeeping, so every check here is
// exact: partition_blocks against a brute-force enumeration of all
// contiguous splits (the minimised largest stage cost must match), and
// chunk_modules' module ranges, with every module of the model held by
// exactly one (rank, chunk).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "parallel/pipeline/partition.h"

namespace ndt {
namespace {

// Largest stage cost of `sizes` (blocks per stage) under the cost model of
// partition_blocks.
int64_t max_stage_cost(
    const std::vector<int64_t>& cost,
    const std::vector<int>& sizes,
    int64_t first_cost,
    int64_t last_cost) {
  int64_t worst = 0;
  size_t block = 0;
  for (size_t s = 0; s < sizes.size(); ++s) {
    int64_t c = 0;
    for (int k = 0; k < sizes[s]; ++k)
      c += cost.at(block++);
    if (s == 0)
      c += first_cost;
    if (s + 1 == sizes.size())
      c += last_cost;
    worst = std::max(worst, c);
  }
  return worst;
}

// The smallest largest stage cost over every split of the blocks into
// `stages` contiguous non-empty runs (all compositions of n into `stages`
// positive parts).
int64_t brute_force_best(
    const std::vector<int64_t>& cost,
    int stages,
    int64_t first_cost,
    int64_t last_cost) {
  const int n = static_cast<int>(cost.size());
  int64_t best = std::numeric_limits<int64_t>::max();
  std::vector<int> sizes;
  std::function<void(int)> place = [&](int left) {
    const int s = static_cast<int>(sizes.size());
    if (s == stages - 1) {
      sizes.push_back(left);
      best = std::min(best, max_stage_cost(cost, sizes, first_cost, last_cost));
      sizes.pop_back();
      return;
    }
    // Leave at least one block for each later stage.
    for (int k = 1; k <= left - (stages - 1 - s); ++k) {
      sizes.push_back(k);
      place(left - k);
      sizes.pop_back();
    }
  };
  place(n);
  return best;
}

// Checks the result is a valid split: `stages` entries >= 1 summing to the
// number of blocks.
void expect_valid_split(const std::vector<int>& sizes, int stages, int n) {
  ASSERT_EQ(static_cast<int>(sizes.size()), stages);
  int sum = 0;
  for (int k : sizes) {
    EXPECT_GE(k, 1);
    sum += k;
  }
  EXPECT_EQ(sum, n);
}

std::vector<std::pair<int, int>> ranges_of(
    const std::vector<ModuleRange>& ranges) {
  std::vector<std::pair<int, int>> out;
  for (const ModuleRange& r : ranges)
    out.emplace_back(r.first, r.last);
  return out;
}

using Ranges = std::vector<std::pair<int, int>>;

TEST(PartitionBlocks, EqualCostsSplitEvenly) {
  EXPECT_EQ(
      partition_blocks(std::vector<int64_t>(8, 5), 4),
      (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(
      partition_blocks(std::vector<int64_t>(12, 7), 3),
      (std::vector<int>{4, 4, 4}));
  EXPECT_EQ(
      partition_blocks(std::vector<int64_t>(6, 1), 1), (std::vector<int>{6}));
  // Not divisible: the largest stage holds ceil(n / stages) blocks, the
  // least possible, and the split is as even as possible (stage sizes
  // differ by at most one: 7 over 3 is 3 2 2 or a permutation, never 3 3 1).
  for (int n : {7, 10}) {
    for (int stages = 1; stages <= n; ++stages) {
      SCOPED_TRACE(std::to_string(n) + " blocks, " + std::to_string(stages));
      auto sizes = partition_blocks(std::vector<int64_t>(n, 3), stages);
      expect_valid_split(sizes, stages, n);
      const int hi = *std::max_element(sizes.begin(), sizes.end());
      const int lo = *std::min_element(sizes.begin(), sizes.end());
      EXPECT_EQ(hi, (n + stages - 1) / stages);
      EXPECT_LE(hi - lo, 1);
    }
  }
}

TEST(PartitionBlocks, MatchesBruteForceOnRandomCases) {
  std::mt19937 gen(20240607);  // fixed seed: the same cases every run
  std::uniform_int_distribution<int> n_dist(1, 9);
  std::uniform_int_distribution<int64_t> cost_dist(1, 100);
  std::uniform_int_distribution<int64_t> end_dist(0, 150);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = n_dist(gen);
    std::vector<int64_t> cost(n);
    for (int64_t& c : cost)
      c = cost_dist(gen);
    const int stages = std::uniform_int_distribution<int>(1, n)(gen);
    // A third of the cases without end costs, the rest with.
    const int64_t first = trial % 3 == 0 ? 0 : end_dist(gen);
    const int64_t last = trial % 3 == 0 ? 0 : end_dist(gen);
    SCOPED_TRACE(
        "trial " + std::to_string(trial) + ": " + std::to_string(n) +
        " blocks, " + std::to_string(stages) + " stages, first " +
        std::to_string(first) + ", last " + std::to_string(last));
    auto sizes = partition_blocks(cost, stages, first, last);
    expect_valid_split(sizes, stages, n);
    EXPECT_EQ(
        max_stage_cost(cost, sizes, first, last),
        brute_force_best(cost, stages, first, last));
    // Deterministic: the same answer (not only the same cost) again.
    EXPECT_EQ(partition_blocks(cost, stages, first, last), sizes);
  }
}

TEST(PartitionBlocks, UnequalCostsMinimiseLargestStage) {
  // One heavy block: it gets a stage to itself, the others share.
  std::vector<int64_t> cost = {1, 1, 1, 10, 1, 1, 1, 1};
  auto sizes = partition_blocks(cost, 3);
  EXPECT_EQ(sizes, (std::vector<int>{3, 1, 4}));
  EXPECT_EQ(max_stage_cost(cost, sizes, 0, 0), 10);
  EXPECT_EQ(max_stage_cost(cost, sizes, 0, 0), brute_force_best(cost, 3, 0, 0));
}

TEST(PartitionBlocks, EndCostsShiftBlocksAwayFromEndStages) {
  // 8 blocks of 10 over 4 stages: evenly 2 each (largest 20). An input
  // layer costing 15 on stage 0: 2 blocks there would cost 35, so stage 0
  // keeps one block and the largest stage costs 30.
  const std::vector<int64_t> cost(8, 10);
  auto first = partition_blocks(cost, 4, 15, 0);
  expect_valid_split(first, 4, 8);
  EXPECT_EQ(first.front(), 1);
  EXPECT_EQ(max_stage_cost(cost, first, 15, 0), 30);
  // The same for a head on the last stage.
  auto last = partition_blocks(cost, 4, 0, 15);
  expect_valid_split(last, 4, 8);
  EXPECT_EQ(last.back(), 1);
  EXPECT_EQ(max_stage_cost(cost, last, 0, 15), 30);
  // Both ends: the middle stages take the blocks.
  auto both = partition_blocks(cost, 4, 15, 15);
  EXPECT_EQ(both, (std::vector<int>{1, 3, 3, 1}));
  // An end cost as large as everything else: that stage keeps one block.
  EXPECT_EQ(partition_blocks(cost, 2, 1000, 0).front(), 1);
  EXPECT_EQ(partition_blocks(cost, 2, 0, 1000).back(), 1);
}

TEST(PartitionBlocks, OneBlockPerStageWhenStagesEqualBlocks) {
  EXPECT_EQ(partition_blocks({5, 1, 9, 2}, 4), (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(
      partition_blocks({5, 1, 9, 2}, 4, 100, 100),
      (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(partition_blocks({3}, 1, 7, 7), (std::vector<int>{1}));
}

TEST(ChunkModules, OneChunkPerRank) {
  // 5 blocks as 2 + 3: modules 0 (input layer), 1..5 (blocks), 6 (head).
  const std::vector<int> stage_blocks = {2, 3};
  EXPECT_EQ(ranges_of(chunk_modules(stage_blocks, 2, 0)), (Ranges{{0, 2}}));
  EXPECT_EQ(ranges_of(chunk_modules(stage_blocks, 2, 1)), (Ranges{{3, 6}}));
}

TEST(ChunkModules, TwoChunksPerRankInterleave) {
  // 6 blocks as 1 + 2 + 1 + 2 over virtual stages 0..3; chunk c of rank r
  // is virtual stage 2c + r. Modules 0 (input), 1..6 (blocks), 7 (head).
  const std::vector<int> stage_blocks = {1, 2, 1, 2};
  EXPECT_EQ(
      ranges_of(chunk_modules(stage_blocks, 2, 0)), (Ranges{{0, 1}, {4, 4}}));
  EXPECT_EQ(
      ranges_of(chunk_modules(stage_blocks, 2, 1)), (Ranges{{2, 3}, {5, 7}}));
}

TEST(ChunkModules, EveryModuleExactlyOnce) {
  const std::vector<std::pair<int, int>> layouts = {
      {1, 1}, {2, 1}, {2, 2}, {4, 1}, {4, 2}, {3, 3}};
  for (auto [P, V] : layouts) {
    for (int extra : {0, 1, 5}) {
      // P * V stages with 1 + (s * 7 + extra) % 3 blocks each.
      std::vector<int> stage_blocks;
      int blocks = 0;
      for (int s = 0; s < P * V; ++s) {
        stage_blocks.push_back(1 + (s * 7 + extra) % 3);
        blocks += stage_blocks.back();
      }
      SCOPED_TRACE(
          "P " + std::to_string(P) + " V " + std::to_string(V) + " blocks " +
          std::to_string(blocks));
      const int modules = blocks + 2;
      std::vector<int> seen(modules, 0);
      for (int r = 0; r < P; ++r) {
        auto chunks = chunk_modules(stage_blocks, P, r);
        ASSERT_EQ(static_cast<int>(chunks.size()), V);
        for (int c = 0; c < V; ++c) {
          const ModuleRange& m = chunks[c];
          const int vs = c * P + r;
          // Size: the stage's blocks, plus the input layer / the head.
          EXPECT_EQ(
              m.last - m.first + 1,
              stage_blocks[vs] + (vs == 0) + (vs == P * V - 1));
          for (int k = m.first; k <= m.last; ++k) {
            ASSERT_GE(k, 0);
            ASSERT_LT(k, modules);
            ++seen[k];
          }
        }
      }
      for (int k = 0; k < modules; ++k)
        EXPECT_EQ(seen[k], 1) << "module " << k;
    }
  }
}

}  // namespace
}  // namespace ndt
