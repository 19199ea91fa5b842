// The MPI backend's ring / pairwise / chain schedules
// (comm/ring_algorithms.h),
// run without MPI: every rank's schedule in lockstep on an in-memory
// exchange (round k posted on every rank, each send copied into the
// receive its peer posted for it, round k finished on every rank). Results
// are checked bitwise against the reduction order each schedule documents,
// across group sizes, counts that do not divide evenly and chunk sizes
// that cut every transfer into pieces. Also checked: at most kMaxMsgs
// messages per round, none longer than a chunk, every send matched by one
// receive of the same length and type, and scratch asked for in round 0
// only and at most two chunks of it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "comm/ring_algorithms.h"

namespace ndt::detail {
namespace {

// Values whose sums round differently in different orders (as in
// test_local_process_group.cpp): an integer < 2^16 times a per-rank power
// of two.
template <typename T>
T value(int rank, int64_t i) {
  const int e = sizeof(T) == 4 ? 7 : 19;
  const int shift[] = {0, -2 * e - 3, -e, -3 * e - 1};
  T m = static_cast<T>((i * 7919 + rank * 104729 + 13) % 65536);
  return std::ldexp(m, shift[rank % 4]) + static_cast<T>(rank / 4);
}

size_t elem_bytes(ElemType t) {
  return t == ElemType::kDouble ? sizeof(double) : sizeof(float);
}

// One rank of the simulated group: its schedule and its scratch (asked
// for in round 0 only, at most two chunks).
struct SimRank final : ScratchSource {
  void* get(size_t bytes) override {
    EXPECT_EQ(round, 0) << "scratch after round 0";
    EXPECT_LE(bytes, 2 * std::max<size_t>(chunk_bytes, 8))
        << "scratch over two chunks";
    scratch.resize(std::max(scratch.size(), bytes));
    return scratch.data();
  }

  std::unique_ptr<RoundSchedule> schedule;
  std::vector<unsigned char> scratch;
  int64_t chunk_bytes = 0;
  int64_t round = -1;  // round being posted
};

// The RingGroup of rank r of n, with sim as its scratch.
RingGroup sim_group(SimRank& sim, int r, int n, int64_t chunk_bytes) {
  sim.chunk_bytes = chunk_bytes;
  return RingGroup{r, n, chunk_bytes, &sim};
}

void run_lockstep(std::vector<SimRank>& ranks, int64_t chunk_bytes) {
  const int n = static_cast<int>(ranks.size());
  const int64_t rounds = ranks[0].schedule->rounds();
  for (const SimRank& s : ranks)
    ASSERT_EQ(s.schedule->rounds(), rounds);
  for (int64_t k = 0; k < rounds; ++k) {
    std::vector<std::vector<RoundMsg>> posted(n);
    for (int r = 0; r < n; ++r) {
      RoundMsg msgs[RoundSchedule::kMaxMsgs];
      ranks[r].round = k;
      const int m = ranks[r].schedule->post(k, msgs);
      ASSERT_GE(m, 0);
      ASSERT_LE(m, RoundSchedule::kMaxMsgs);
      for (int i = 0; i < m; ++i) {
        ASSERT_GE(msgs[i].peer, 0);
        ASSERT_LT(msgs[i].peer, n);
        ASSERT_LE(
            msgs[i].len * static_cast<int64_t>(elem_bytes(msgs[i].type)),
            std::max<int64_t>(chunk_bytes, elem_bytes(msgs[i].type)))
            << "message over a chunk";
      }
      posted[r].assign(msgs, msgs + m);
    }
    // Every send meets the first unmatched receive its peer posted for it.
    std::vector<std::vector<bool>> used(n);
    for (int r = 0; r < n; ++r)
      used[r].assign(posted[r].size(), false);
    for (int r = 0; r < n; ++r) {
      for (const RoundMsg& snd : posted[r]) {
        if (!snd.send)
          continue;
        auto& theirs = posted[snd.peer];
        size_t j = 0;
        while (j < theirs.size() &&
               (theirs[j].send || theirs[j].peer != r || used[snd.peer][j]))
          ++j;
        ASSERT_LT(j, theirs.size())
            << "round " << k << ": rank " << r << "'s send to " << snd.peer
            << " has no receive";
        used[snd.peer][j] = true;
        ASSERT_EQ(theirs[j].len, snd.len);
        ASSERT_EQ(theirs[j].type, snd.type);
        std::memcpy(theirs[j].buf, snd.buf, snd.len * elem_bytes(snd.type));
      }
    }
    for (int r = 0; r < n; ++r) {
      for (size_t j = 0; j < posted[r].size(); ++j) {
        ASSERT_TRUE(posted[r][j].send || used[r][j])
            << "round " << k << ": rank " << r << " receives from "
            << posted[r][j].peer << ", which sends nothing";
      }
    }
    for (int r = 0; r < n; ++r)
      ranks[r].schedule->finish(k);
  }
}

const int kSizes[] = {2, 3, 4, 5};
const int64_t kCounts[] = {1, 3, 7, 1000, 1001};
const int64_t kChunkBytes[] = {8, 60, 1024, int64_t{8} << 20};

template <typename T>
void check_all_reduce(ReduceOp op) {
  for (int n : kSizes) {
    for (int64_t count : kCounts) {
      for (int64_t chunk : kChunkBytes) {
        std::vector<std::vector<T>> bufs(n, std::vector<T>(count));
        std::vector<SimRank> ranks(n);
        for (int r = 0; r < n; ++r) {
          for (int64_t i = 0; i < count; ++i)
            bufs[r][i] = value<T>(r, i);
          ranks[r].schedule = std::make_unique<RingAllReduce<T>>(
              sim_group(ranks[r], r, n, chunk), bufs[r].data(), count, op);
        }
        run_lockstep(ranks, chunk);
        // Segment s: x_s, then each rank s+1, s+2, ... combines its own
        // values with the partial result it received.
        for (int s = 0; s < n; ++s) {
          for (int64_t i = count * s / n; i < count * (s + 1) / n; ++i) {
            T acc = value<T>(s, i);
            for (int j = 1; j < n; ++j) {
              T own = value<T>((s + j) % n, i);
              acc = op == ReduceOp::kSum ? own + acc : std::max(own, acc);
            }
            for (int r = 0; r < n; ++r) {
              ASSERT_EQ(bufs[r][i], acc)
                  << "n " << n << " count " << count << " chunk " << chunk
                  << " rank " << r << " i " << i;
            }
          }
        }
      }
    }
  }
}

TEST(RingAlgorithms, AllReduceFloatSumAndMax) {
  check_all_reduce<float>(ReduceOp::kSum);
  check_all_reduce<float>(ReduceOp::kMax);
}

TEST(RingAlgorithms, AllReduceDoubleSumAndMax) {
  check_all_reduce<double>(ReduceOp::kSum);
  check_all_reduce<double>(ReduceOp::kMax);
}

TEST(RingAlgorithms, ReduceScatter) {
  for (int n : kSizes) {
    for (int64_t count : kCounts) {
      for (int64_t chunk : kChunkBytes) {
        std::vector<std::vector<float>> in(n, std::vector<float>(n * count));
        std::vector<std::vector<float>> out(n, std::vector<float>(count, -1));
        std::vector<SimRank> ranks(n);
        for (int r = 0; r < n; ++r) {
          for (int64_t i = 0; i < n * count; ++i)
            in[r][i] = value<float>(r, i);
          ranks[r].schedule = std::make_unique<RingReduceScatter>(
              sim_group(ranks[r], r, n, chunk),
              in[r].data(),
              out[r].data(),
              count);
        }
        run_lockstep(ranks, chunk);
        // Block b: x_{b+1} + x_{b+2} + ... + x_b, left to right.
        for (int b = 0; b < n; ++b) {
          for (int64_t i = 0; i < count; ++i) {
            const int64_t at = b * count + i;
            float acc = value<float>((b + 1) % n, at);
            for (int j = 2; j <= n; ++j)
              acc = acc + value<float>((b + j) % n, at);
            ASSERT_EQ(out[b][i], acc)
                << "n " << n << " count " << count << " chunk " << chunk
                << " block " << b << " i " << i;
          }
        }
      }
    }
  }
}

TEST(RingAlgorithms, AllGatherOutOfPlaceAndInPlace) {
  for (bool in_place : {false, true}) {
    for (int n : kSizes) {
      for (int64_t count : kCounts) {
        for (int64_t chunk : kChunkBytes) {
          std::vector<std::vector<float>> in(n, std::vector<float>(count));
          std::vector<std::vector<float>> out(
              n, std::vector<float>(n * count, -1));
          std::vector<SimRank> ranks(n);
          for (int r = 0; r < n; ++r) {
            float* src = in_place ? out[r].data() + r * count : in[r].data();
            for (int64_t i = 0; i < count; ++i)
              src[i] = value<float>(r, i);
            ranks[r].schedule = std::make_unique<RingAllGather>(
                sim_group(ranks[r], r, n, chunk), src, out[r].data(), count);
          }
          run_lockstep(ranks, chunk);
          for (int r = 0; r < n; ++r) {
            for (int j = 0; j < n; ++j) {
              for (int64_t i = 0; i < count; ++i) {
                ASSERT_EQ(out[r][j * count + i], value<float>(j, i))
                    << "in_place " << in_place << " n " << n << " count "
                    << count << " chunk " << chunk << " rank " << r;
              }
            }
          }
        }
      }
    }
  }
}

TEST(RingAlgorithms, PairwiseAllToAll) {
  for (int n : kSizes) {
    for (int64_t count : kCounts) {
      for (int64_t chunk : kChunkBytes) {
        std::vector<std::vector<float>> in(n, std::vector<float>(n * count));
        std::vector<std::vector<float>> out(
            n, std::vector<float>(n * count, -1));
        std::vector<SimRank> ranks(n);
        for (int r = 0; r < n; ++r) {
          for (int64_t i = 0; i < n * count; ++i)
            in[r][i] = value<float>(r, i);
          ranks[r].schedule = std::make_unique<PairwiseAllToAll>(
              sim_group(ranks[r], r, n, chunk),
              in[r].data(),
              out[r].data(),
              count);
        }
        run_lockstep(ranks, chunk);
        // Block j of rank r's out = block r of rank j's in.
        for (int r = 0; r < n; ++r) {
          for (int j = 0; j < n; ++j) {
            for (int64_t i = 0; i < count; ++i) {
              ASSERT_EQ(out[r][j * count + i], in[j][r * count + i])
                  << "n " << n << " count " << count << " chunk " << chunk;
            }
          }
        }
      }
    }
  }
}

TEST(RingAlgorithms, ChainBroadcastFromEveryRoot) {
  for (int n : kSizes) {
    for (int root = 0; root < n; ++root) {
      for (int64_t count : kCounts) {
        for (int64_t chunk : kChunkBytes) {
          std::vector<std::vector<float>> bufs(n, std::vector<float>(count));
          std::vector<SimRank> ranks(n);
          for (int r = 0; r < n; ++r) {
            for (int64_t i = 0; i < count; ++i)
              bufs[r][i] = value<float>(r, i);
            ranks[r].schedule = std::make_unique<ChainBroadcast>(
                sim_group(ranks[r], r, n, chunk), bufs[r].data(), count, root);
          }
          run_lockstep(ranks, chunk);
          for (int r = 0; r < n; ++r) {
            for (int64_t i = 0; i < count; ++i) {
              ASSERT_EQ(bufs[r][i], value<float>(root, i))
                  << "n " << n << " root " << root << " count " << count
                  << " chunk " << chunk << " rank " << r;
            }
          }
        }
      }
    }
  }
}

TEST(RingAlgorithms, ChainReduceToEveryRootInPlaceAndNot) {
  for (bool in_place : {false, true}) {
    for (int n : kSizes) {
      for (int root = 0; root < n; ++root) {
        for (int64_t count : kCounts) {
          for (int64_t chunk : kChunkBytes) {
            std::vector<std::vector<float>> in(n, std::vector<float>(count));
            std::vector<float> out(count, -1.0f);
            std::vector<SimRank> ranks(n);
            for (int r = 0; r < n; ++r) {
              for (int64_t i = 0; i < count; ++i)
                in[r][i] = value<float>(r, i);
              float* dst = r != root  ? nullptr
                           : in_place ? in[r].data()
                                      : out.data();
              ranks[r].schedule = std::make_unique<ChainReduce>(
                  sim_group(ranks[r], r, n, chunk),
                  in[r].data(),
                  dst,
                  count,
                  root);
            }
            run_lockstep(ranks, chunk);
            const std::vector<float>& got = in_place ? in[root] : out;
            for (int64_t i = 0; i < count; ++i) {
              // root+1 first, then each rank adds its own, root last.
              float acc = value<float>((root + 1) % n, i);
              for (int j = 2; j <= n; ++j)
                acc = acc + value<float>((root + j) % n, i);
              ASSERT_EQ(got[i], acc)
                  << "in_place " << in_place << " n " << n << " root " << root
                  << " count " << count << " chunk " << chunk << " i " << i;
            }
            for (int r = 0; r < n; ++r) {
              if (r == root && in_place)
                continue;
              for (int64_t i = 0; i < count; ++i)
                ASSERT_EQ(in[r][i], value<float>(r, i)) << "in changed";
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace ndt::detail
