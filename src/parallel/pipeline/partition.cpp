#include "parallel/pipeline/partition.h"

#include <algorithm>
#include <limits>

#include "base/check.h"

namespace ndt {

// Linear partitioning by dynamic programming over (stages so far, blocks
// so far), O(S N^2) for N blocks and S stages, small for any real model.
// Pass 1 finds the smallest possible largest stage cost C*. Among the
// splits that reach C*, pass 2 picks the one with the smallest sum of
// squared stage costs, i.e. the most even one (10 equal blocks over 4
// stages: 3 3 2 2, not 3 3 3 1, whose idle last stage would still pay the
// pipeline's bubble).
std::vector<int> partition_blocks(
    const std::vector<int64_t>& block_cost,
    int stages,
    int64_t first_cost,
    int64_t last_cost) {
  const int n = static_cast<int>(block_cost.size());
  NDT_ASSERT(stages >= 1 && stages <= n, stages, " stages for ", n, " blocks");
  std::vector<int64_t> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i)
    prefix[i + 1] = prefix[i] + block_cost[i];
  // Cost of stage s holding blocks [a, b).
  auto cost = [&](int s, int a, int b) {
    int64_t c = prefix[b] - prefix[a];
    if (s == 0)
      c += first_cost;
    if (s == stages - 1)
      c += last_cost;
    return c;
  };
  // best[s][i]: the objective when blocks [0, i) form stages 0..s-1;
  // combine(prefix objective, stage cost) extends it by one stage. Stages
  // costing more than `cap` are not allowed.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, -1));
  auto solve = [&](auto combine, double cap) {
    std::vector<std::vector<double>> best(
        stages + 1, std::vector<double>(n + 1, kInf));
    best[0][0] = 0;
    for (int s = 1; s <= stages; ++s) {
      for (int i = s; i <= n - (stages - s); ++i) {
        for (int j = i - 1; j >= s - 1; --j) {  // stage s - 1 = [j, i)
          const double c = static_cast<double>(cost(s - 1, j, i));
          if (best[s - 1][j] == kInf || c > cap)
            continue;
          const double v = combine(best[s - 1][j], c);
          if (v < best[s][i]) {
            best[s][i] = v;
            cut[s][i] = j;
          }
        }
      }
    }
    return best[stages][n];
  };
  const double largest =
      solve([](double acc, double c) { return std::max(acc, c); }, kInf);
  solve([](double acc, double c) { return acc + c * c; }, largest);
  std::vector<int> sizes(stages);
  for (int s = stages, i = n; s >= 1; --s) {
    int j = cut[s][i];
    sizes[s - 1] = i - j;
    i = j;
  }
  return sizes;
}

std::vector<ModuleRange> chunk_modules(
    const std::vector<int>& stage_blocks, int ranks, int rank) {
  const int stages = static_cast<int>(stage_blocks.size());
  NDT_ASSERT(ranks >= 1 && stages % ranks == 0 && rank >= 0 && rank < ranks);
  std::vector<int> start(stages + 1, 0);
  for (int s = 0; s < stages; ++s)
    start[s + 1] = start[s] + stage_blocks[s];
  const int head = start[stages] + 1;  // module number of the head
  std::vector<ModuleRange> out;
  for (int vs = rank; vs < stages; vs += ranks) {
    ModuleRange r;
    r.first = vs == 0 ? 0 : 1 + start[vs];
    r.last = vs == stages - 1 ? head : start[vs + 1];
    out.push_back(r);
  }
  return out;
}

}  // namespace ndt
