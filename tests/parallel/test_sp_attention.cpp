// Sequence-parallel attention cores (ring_self_attention.h,
// ring_attention.h, ulysses_attention.h) against the serial AttentionCore
// on the whole sequence, master-vs-shard (CONVENTIONS.md 5): the global
// qkv [B, T, 3C] and output gradient [B, T, C] come from the counter RNG;
// run_local(N) gives every rank its tokens of both (seq_split.h, the split
// the algorithm uses); each rank compares its output and its dq, dk, dv
// with its tokens of the serial ones.
//
// Tolerance: max |a - b| / max |b| <= 1e-5 per tensor (kTol). The
// algorithms compute the serial math in another order only: scores block
// by block, online-softmax rescaling (ring), the reduce-scatter of dK / dV
// partial sums over ranks (rsa), the same kernel on regrouped heads
// (Ulysses). fp32 rounding of these is ~1e-7 relative; a wrong block,
// position, mask or missing contribution is O(1). Each case also compares
// its output with the serial tokens of a wrong chunk order, which must
// differ by more than 1e-1, so the comparison is shown to fail on one.
//
// Also here: the memory-lean ring's peak memory (allocator ledger) against
// an [T_local, T] score block, and its per-rank FLOPs under the causal
// zig-zag split (balanced) and the contiguous split (not balanced).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "comm/local_process_group.h"
#include "nn/attention_core.h"
#include "nn/seq_split.h"
#include "ops/ops.h"
#include "parallel/ring_attention.h"
#include "parallel/ring_self_attention.h"
#include "parallel/ulysses_attention.h"
#include "sp_cores.h"
#include "test_util.h"

namespace ndt {
namespace {

using test::randn;
using test::rel_diff;
using test::SpCore;

constexpr double kTol = 1e-5;
constexpr double kWrongOrder = 1e-1;
// 12 heads split over 2, 3 and 4 ranks (Ulysses); T = 48 splits into 2N
// chunks for N = 2, 3, 4 (zig-zag); a ring tile of 5 keys leaves partial
// tiles in every chunk.
constexpr int64_t kB = 2, kT = 48, kHeads = 12, kHs = 4, kC = kHeads * kHs;
constexpr int kBlock = 5;

// Columns [part C, (part + 1) C) of x [.., 3C]: dq, dk or dv.
Tensor part_of(const Tensor& x, int part) {
  Shape s = x.shape();
  s.back() = kC;
  Tensor out(s, MemTag::kOther);
  ops::copy_columns(out, 0, x, part * kC, kC);
  return out;
}

struct Serial {
  Tensor qkv, dout, out, dqkv;
};

Serial serial_run(bool causal) {
  Serial s;
  s.qkv = randn({kB, kT, 3 * kC}, 5, "qkv");
  s.dout = randn({kB, kT, kC}, 6, "dout");
  AttentionCore core(kHeads, causal);
  Context ctx;
  s.out = core.forward(s.qkv, ctx).clone(MemTag::kOther);
  s.dqkv = core.backward(s.dout, ctx).clone(MemTag::kOther);
  return s;
}

struct RankResult {
  double out = 0, dq = 0, dk = 0, dv = 0, wrong_order = 0;
};

void check_case(SpCore algo, int N, bool causal, int block = kBlock) {
  const std::string label =
      std::string(name_of(algo)) + " N=" + std::to_string(N) +
      (causal ? " causal" : "") + " block=" + std::to_string(block);
  SCOPED_TRACE(label);
  const Serial s = serial_run(causal);
  const SeqSplit split = test::split_of(algo);
  std::vector<RankResult> res(N);
  run_local(N, [&](ProcessGroup& pg) {
    const int r = pg.rank();
    const SeqShard mine(split, kT, r, N);
    std::unique_ptr<Module> core =
        test::make_sp_core(algo, kHeads, causal, pg, block);
    Context ctx;
    const Tensor out = core->forward(take_tokens(s.qkv, mine), ctx);
    const Tensor dqkv = core->backward(take_tokens(s.dout, mine), ctx);
    const Tensor want = take_tokens(s.dqkv, mine);
    RankResult& rr = res[r];
    rr.out = rel_diff(out, take_tokens(s.out, mine));
    rr.dq = rel_diff(part_of(dqkv, 0), part_of(want, 0));
    rr.dk = rel_diff(part_of(dqkv, 1), part_of(want, 1));
    rr.dv = rel_diff(part_of(dqkv, 2), part_of(want, 2));
    // The serial tokens in a wrong chunk order: the contiguous chunks
    // (zig-zag runs) or the next rank's chunk (contiguous runs).
    const SeqShard wrong = split == SeqSplit::kZigzag
                               ? SeqShard(SeqSplit::kContiguous, kT, r, N)
                               : mine.of_rank((r + 1) % N);
    rr.wrong_order = rel_diff(out, take_tokens(s.out, wrong));
  });
  for (int r = 0; r < N; ++r) {
    const RankResult& rr = res[r];
    EXPECT_LE(rr.out, kTol) << "rank " << r << " out";
    EXPECT_LE(rr.dq, kTol) << "rank " << r << " dq";
    EXPECT_LE(rr.dk, kTol) << "rank " << r << " dk";
    EXPECT_LE(rr.dv, kTol) << "rank " << r << " dv";
    if (N > 1) {  // one rank has one order
      EXPECT_GT(rr.wrong_order, kWrongOrder) << "rank " << r;
    }
    if (r == 0 && std::getenv("NDT_SP_VERBOSE") != nullptr)
      std::printf(
          "%s: out %.2g dq %.2g dk %.2g dv %.2g wrong order %.2g\n",
          label.c_str(),
          rr.out,
          rr.dq,
          rr.dk,
          rr.dv,
          rr.wrong_order);
  }
}

// Every core at N = 1 (the serial attention), 2, 3 and 4 ranks.
void check_all_sizes(SpCore algo) {
  for (int N : {1, 2, 3, 4}) {
    for (bool causal : {false, true})
      check_case(algo, N, causal);
  }
}

TEST(SpAttention, RingSelfAttentionMatchesSerial) {
  check_all_sizes(SpCore::kRsa);
}

TEST(SpAttention, RingAttentionMatchesSerial) {
  check_all_sizes(SpCore::kRing);
  check_all_sizes(SpCore::kRingZigzag);
  // One tile covers a whole chunk.
  check_case(SpCore::kRingZigzag, 2, true, RingAttention::kDefaultBlock);
}

TEST(SpAttention, UlyssesMatchesSerial) {
  check_all_sizes(SpCore::kUlysses);
}

TEST(SpAttention, UlyssesRejectsHeadsNotDivisible) {
  std::string what;
  try {
    run_local(3, [&](ProcessGroup& pg) { UlyssesAttention u(4, false, pg); });
  } catch (const ConfigError& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("model.heads (4)"), std::string::npos) << what;
  EXPECT_NE(what.find("parallel.sp (3)"), std::string::npos) << what;
}

TEST(SpAttention, ZigzagSplitPositions) {
  // T = 16 over N = 4: chunks of 2; rank 1 holds chunks 1 and 6.
  const SeqShard z(SeqSplit::kZigzag, 16, 1, 4);
  std::vector<int64_t> pos;
  for (int64_t i = 0; i < z.T_local(); ++i)
    pos.push_back(z.global_position(i));
  EXPECT_EQ(pos, (std::vector<int64_t>{2, 3, 12, 13}));
  const SeqShard c(SeqSplit::kContiguous, 16, 1, 4);
  EXPECT_EQ(c.global_position(0), 4);
  EXPECT_EQ(c.global_position(3), 7);
  EXPECT_THROW(SeqShard(SeqSplit::kZigzag, 12, 0, 4), ConfigError);
  // Every position is held by exactly one rank, and take / put invert.
  for (SeqSplit split : {SeqSplit::kContiguous, SeqSplit::kZigzag}) {
    std::vector<int> seen(16, 0);
    Tensor full = randn({2, 16, 3}, 1, "full");
    Tensor back = Tensor::zeros({2, 16, 3}, MemTag::kOther);
    for (int r = 0; r < 4; ++r) {
      const SeqShard sh(split, 16, r, 4);
      for (int64_t i = 0; i < sh.T_local(); ++i)
        ++seen[sh.global_position(i)];
      put_tokens(take_tokens(full, sh), back, sh);
    }
    EXPECT_EQ(seen, std::vector<int>(16, 1));
    EXPECT_EQ(test::max_abs_diff(back, full), 0.0);  // exact
  }
}

// Bytes the layer allocates at its peak over one forward and backward, the
// forward's output held through backward as a model holds it: the growth
// of the allocator's total peak (every tag) over what was live before.
// Inputs are made before and tagged kOther. With N ranks in one process
// this is the peak of the sum over ranks.
int64_t peak_growth(int N, const std::function<void(ProcessGroup&)>& pass) {
  const int64_t before = memory_stats().total_current_bytes;
  memory_reset_peaks();
  run_local(N, pass);
  return memory_stats().total_peak_bytes - before;
}

// The ring never holds a [T_local, T] score block: over N ranks its peak
// stays under a quarter of N such blocks (B NH T_local T fp32 each), while
// ring self-attention, which holds them, needs more than N blocks.
TEST(SpAttention, RingAttentionHoldsNoScoreBlock) {
  constexpr int N = 4;
  constexpr int64_t B = 2, NH = 4, C = 16, T = 512, Tl = T / N;
  constexpr int block = 16;
  const int64_t score_block = B * NH * Tl * T * 4;
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "non-causal");
    std::vector<Tensor> qkv(N), dout(N);
    const Tensor q = randn({B, T, 3 * C}, 7, "qkv");
    const Tensor g = randn({B, T, C}, 8, "dout");
    const SeqSplit split = causal ? SeqSplit::kZigzag : SeqSplit::kContiguous;
    for (int r = 0; r < N; ++r) {
      qkv[r] = take_tokens(q, SeqShard(split, T, r, N));
      dout[r] = take_tokens(g, SeqShard(split, T, r, N));
    }
    const int64_t ring = peak_growth(N, [&](ProcessGroup& pg) {
      RingAttention m(NH, causal, pg, split, block);
      Context ctx;
      Tensor out = m.forward(qkv[pg.rank()], ctx);
      Tensor dqkv = m.backward(dout[pg.rank()], ctx);
    });
    for (int r = 0; r < N; ++r) {
      qkv[r] = take_tokens(q, SeqShard(SeqSplit::kContiguous, T, r, N));
      dout[r] = take_tokens(g, SeqShard(SeqSplit::kContiguous, T, r, N));
    }
    const int64_t rsa = peak_growth(N, [&](ProcessGroup& pg) {
      RingSelfAttention m(NH, causal, pg);
      Context ctx;
      Tensor out = m.forward(qkv[pg.rank()], ctx);
      Tensor dqkv = m.backward(dout[pg.rank()], ctx);
    });
    std::printf(
        "peak over %d ranks: ring %lld B, rsa %lld B, %d score blocks "
        "%lld B\n",
        N,
        static_cast<long long>(ring),
        static_cast<long long>(rsa),
        N,
        static_cast<long long>(N * score_block));
    EXPECT_LT(4 * ring, N * score_block);
    EXPECT_GT(rsa, N * score_block);
  }
}

struct Flops {
  std::vector<int64_t> per_rank;
  double imbalance() const {  // max / min
    const auto [lo, hi] = std::minmax_element(per_rank.begin(), per_rank.end());
    return double(*hi) / double(*lo);
  }
};

Flops causal_flops(int N, SeqSplit split) {
  constexpr int64_t B = 2, NH = 4, C = 16, T = 240;  // 2N chunks, N <= 4
  const Tensor q = randn({B, T, 3 * C}, 9, "qkv");
  const Tensor g = randn({B, T, C}, 10, "dout");
  Flops f;
  f.per_rank.assign(N, 0);
  run_local(N, [&](ProcessGroup& pg) {
    const SeqShard mine(split, T, pg.rank(), N);
    RingAttention m(NH, true, pg, split, 8);
    Context ctx;
    m.forward(take_tokens(q, mine), ctx);
    m.backward(take_tokens(g, mine), ctx);
    f.per_rank[pg.rank()] = m.forward_flops() + m.backward_flops();
  });
  return f;
}

// Causal ring attention: the zig-zag split gives every rank the same work
// (within 10%); the contiguous split does not (the check can fail).
TEST(SpAttention, ZigzagBalancesCausalWork) {
  for (int N : {2, 3, 4}) {
    const Flops zig = causal_flops(N, SeqSplit::kZigzag);
    const Flops con = causal_flops(N, SeqSplit::kContiguous);
    std::printf("N=%d causal FLOPs per rank, zig-zag:", N);
    for (int64_t x : zig.per_rank)
      std::printf(" %lld", static_cast<long long>(x));
    std::printf(" (max/min %.3f); contiguous:", zig.imbalance());
    for (int64_t x : con.per_rank)
      std::printf(" %lld", static_cast<long long>(x));
    std::printf(" (max/min %.3f)\n", con.imbalance());
    EXPECT_LE(zig.imbalance(), 1.10) << "N=" << N;
    EXPECT_GT(con.imbalance(), 1.10) << "N=" << N;
    // Same total work: the split only moves it between ranks.
    int64_t zs = 0, cs = 0;
    for (int r = 0; r < N; ++r) {
      zs += zig.per_rank[r];
      cs += con.per_rank[r];
    }
    EXPECT_NEAR(double(zs), double(cs), 0.1 * double(cs)) << "N=" << N;
  }
}

}  // namespace
}  // namespace ndt
