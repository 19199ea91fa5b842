// The plan's sequence-parallel attention costs (plan/sp_attention_cost.h)
// against the layers: each core runs one forward and one backward on
// run_local(N) threads.
//   Communication: the sp group's CommLedger after each pass must equal
//   the prediction exactly (calls, elements and bytes per OpType) on every
//   rank, N = 1..4, causal and not. exact: counts, not values.
//   Memory: the allocator's peak growth over one forward and backward. One
//   rank: equal to the formula (shapes chosen so every allocation is a
//   whole size class: no rounding). N ranks in one process: the peak of
//   their sum, between one rank's formula and N times it (+12.5% size-class
//   rounding).
#include <gtest/gtest.h>
#include <omp.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/local_process_group.h"
#include "comm/self_process_group.h"
#include "plan/sp_attention_cost.h"
#include "sp_cores.h"
#include "test_util.h"

namespace ndt {
namespace {

using test::kSpCores;
using test::name_of;
using test::randn;
using test::SpCore;
using test::split_of;

constexpr int kBlock = 16;

PassVolume predicted_comm(SpCore a, const SpAttentionShape& s) {
  switch (a) {
    case SpCore::kRsa:
      return rsa_attention_comm(s);
    case SpCore::kRing:
    case SpCore::kRingZigzag:
      return ring_attention_comm(s);
    case SpCore::kUlysses:
      return ulysses_attention_comm(s);
  }
  return {};
}

int64_t predicted_peak(SpCore a, const SpAttentionShape& s, int threads) {
  switch (a) {
    case SpCore::kRsa:
      return rsa_attention_peak_bytes(s);
    case SpCore::kRing:
    case SpCore::kRingZigzag:
      return ring_attention_peak_bytes(s, split_of(a), kBlock, threads);
    case SpCore::kUlysses:
      return ulysses_attention_peak_bytes(s);
  }
  return 0;
}

struct Inputs {
  std::vector<Tensor> qkv, dout;  // per rank, MemTag::kOther
};

Inputs inputs_of(SpCore a, const SpAttentionShape& s) {
  const Tensor q = randn({s.B, s.T, 3 * s.C}, 1, "qkv");
  const Tensor g = randn({s.B, s.T, s.C}, 2, "dout");
  Inputs in;
  for (int r = 0; r < s.N; ++r) {
    const SeqShard mine(split_of(a), s.T, r, s.N);
    in.qkv.push_back(take_tokens(q, mine));
    in.dout.push_back(take_tokens(g, mine));
  }
  return in;
}

// One forward and backward of the core on rank pg.rank(), the output held
// until backward returns.
void run_pass(
    SpCore a,
    const SpAttentionShape& s,
    bool causal,
    const Inputs& in,
    ProcessGroup& pg,
    PassVolume* measured = nullptr) {
  std::unique_ptr<Module> core =
      test::make_sp_core(a, static_cast<int>(s.heads), causal, pg, kBlock);
  Context ctx;
  pg.reset_comm_ledger();
  Tensor out = core->forward(in.qkv[pg.rank()], ctx);
  if (measured != nullptr)
    measured->fwd = from_ledger(pg.comm_ledger());
  pg.reset_comm_ledger();
  Tensor dqkv = core->backward(in.dout[pg.rank()], ctx);
  if (measured != nullptr)
    measured->bwd = from_ledger(pg.comm_ledger());
}

TEST(SpAttentionCost, CommMatchesLedger) {
  for (SpCore a : kSpCores) {
    for (int N : {1, 2, 3, 4}) {
      for (bool causal : {false, true}) {
        const SpAttentionShape s{N, 2, 48, 24, 12};
        const std::string label = std::string(name_of(a)) +
                                  " N=" + std::to_string(N) +
                                  (causal ? " causal" : "");
        SCOPED_TRACE(label);
        const Inputs in = inputs_of(a, s);
        const PassVolume want = predicted_comm(a, s);
        std::vector<PassVolume> got(N);
        run_local(N, [&](ProcessGroup& pg) {
          run_pass(a, s, causal, in, pg, &got[pg.rank()]);
        });
        for (int r = 0; r < N; ++r) {
          EXPECT_EQ(got[r].fwd, want.fwd)
              << "rank " << r << " forward: measured " << to_string(got[r].fwd)
              << "; predicted " << to_string(want.fwd);
          EXPECT_EQ(got[r].bwd, want.bwd)
              << "rank " << r << " backward: measured " << to_string(got[r].bwd)
              << "; predicted " << to_string(want.bwd);
        }
        if (N > 1) {
          EXPECT_GT(want.step().total_bytes(), 0);
        }
      }
    }
  }
}

// Growth of the allocator's total peak during fn over what was live before.
int64_t peak_growth(const std::function<void()>& fn) {
  const int64_t before = memory_stats().total_current_bytes;
  memory_reset_peaks();
  fn();
  return memory_stats().total_peak_bytes - before;
}

// Threads that run the ring's (b, h) pairs on the calling thread.
int head_threads(const SpAttentionShape& s) {
  const int t = omp_get_max_threads();
  return s.B * s.heads >= t && s.B * s.heads > 1 ? t : 1;
}

TEST(SpAttentionCost, PeakMemoryMatchesAllocator) {
  // Every allocation a whole size class at N = 1 (E = 16 KiB, S = 512 KiB).
  const SpAttentionShape one{1, 2, 128, 16, 4};
  for (SpCore a : kSpCores) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(std::string(name_of(a)) + (causal ? " causal" : ""));
      const Inputs in = inputs_of(a, one);
      std::unique_ptr<ProcessGroup> self = make_self_group("sp");
      const int64_t got =
          peak_growth([&] { run_pass(a, one, causal, in, *self); });
      EXPECT_EQ(got, predicted_peak(a, one, head_threads(one)));
      for (int N : {2, 4}) {
        const SpAttentionShape s{N, 2, 128, 16, 4};
        const Inputs inN = inputs_of(a, s);
        const int64_t sum = peak_growth([&] {
          run_local(
              N, [&](ProcessGroup& pg) { run_pass(a, s, causal, inN, pg); });
        });
        // Inside run_local each rank runs its (b, h) pairs on 1 thread, or
        // on up to omp_get_max_threads() where nesting is enabled.
        EXPECT_GE(sum, predicted_peak(a, s, 1)) << "N=" << N;
        EXPECT_LE(sum, 1.125 * N * predicted_peak(a, s, omp_get_max_threads()))
            << "N=" << N;
      }
    }
  }
}

}  // namespace
}  // namespace ndt
