// The per-group communication ledger (Note [Comm ledger] in
// comm/process_group.h) on the local (threads) backend: every operation is
// recorded exactly once, blocking and async forms alike, with the element
// count its documented `count` argument means and bytes by element type;
// a call rejected by its argument checks is not recorded, a zero-count
// call is; reset clears it; a split group keeps its own ledger. Exact.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "comm/local_process_group.h"

namespace ndt {
namespace {

constexpr OpType kAllOps[] = {
    OpType::kAllReduce,
    OpType::kReduceScatter,
    OpType::kAllGather,
    OpType::kBroadcast,
    OpType::kReduce,
    OpType::kAllToAll,
    OpType::kSend,
    OpType::kRecv,
    OpType::kBarrier,
};

struct Expect {
  int64_t calls = 0;
  int64_t elements = 0;
  int64_t bytes = 0;
};

// Compares the whole ledger (every OpType) with `want`, indexed by OpType.
void expect_ledger(
    const ProcessGroup& pg, const Expect (&want)[kNumOpTypes], int line) {
  for (OpType op : kAllOps) {
    const CommOpCount& got = pg.comm_ledger()[op];
    const Expect& w = want[static_cast<int>(op)];
    EXPECT_EQ(got.calls, w.calls)
        << to_string(op) << " calls, rank " << pg.rank() << ", line " << line;
    EXPECT_EQ(got.elements, w.elements) << to_string(op) << " elements, rank "
                                        << pg.rank() << ", line " << line;
    EXPECT_EQ(got.bytes, w.bytes)
        << to_string(op) << " bytes, rank " << pg.rank() << ", line " << line;
  }
}

Expect& at(Expect (&want)[kNumOpTypes], OpType op) {
  return want[static_cast<int>(op)];
}

TEST(CommLedger, EmptyAtStart) {
  run_local(2, [](ProcessGroup& pg) {
    Expect none[kNumOpTypes] = {};
    expect_ledger(pg, none, __LINE__);
  });
}

TEST(CommLedger, EachOperationOnceWithItsCount) {
  for (int n : {1, 2, 3}) {
    run_local(n, [n](ProcessGroup& pg) {
      const int r = pg.rank();
      const int64_t c = 5;  // per-op base count
      std::vector<float> f(n * 64, 1.0f), g(n * 64, 0.0f);
      std::vector<double> d(64, 1.0);
      Expect want[kNumOpTypes] = {};

      // all_reduce: count = the buffer; fp32 then fp64, blocking and async.
      pg.all_reduce(f.data(), 7);
      pg.all_reduce_async(f.data(), 3, ReduceOp::kMax)->wait();
      pg.all_reduce(d.data(), 11);
      at(want, OpType::kAllReduce) = {3, 7 + 3 + 11, 4 * (7 + 3) + 8 * 11};
      expect_ledger(pg, want, __LINE__);

      // reduce_scatter: count = the output block (input is n * count).
      pg.reduce_scatter(f.data(), g.data(), c);
      pg.reduce_scatter_async(f.data(), g.data(), 2 * c)->wait();
      at(want, OpType::kReduceScatter) = {2, 3 * c, 4 * 3 * c};
      expect_ledger(pg, want, __LINE__);

      // all_gather: count = the input per rank (output is n * count).
      pg.all_gather(f.data(), g.data(), c);
      at(want, OpType::kAllGather) = {1, c, 4 * c};
      expect_ledger(pg, want, __LINE__);

      pg.broadcast(f.data(), 9, 0);
      at(want, OpType::kBroadcast) = {1, 9, 36};
      pg.reduce(f.data(), g.data(), 4, n - 1);
      at(want, OpType::kReduce) = {1, 4, 16};
      // all_to_all: count = the block per peer.
      pg.all_to_all(f.data(), g.data(), 6);
      at(want, OpType::kAllToAll) = {1, 6, 24};
      pg.barrier();
      at(want, OpType::kBarrier) = {1, 0, 0};
      expect_ledger(pg, want, __LINE__);

      // send / recv around a ring: each rank one of each.
      if (n > 1) {
        auto s = pg.send_async(f.data(), 8, (r + 1) % n, 3);
        pg.recv(g.data(), 8, (r + n - 1) % n, 3);
        s->wait();
        at(want, OpType::kSend) = {1, 8, 32};
        at(want, OpType::kRecv) = {1, 8, 32};
        expect_ledger(pg, want, __LINE__);
      }

      // A zero-count call is a call that moves nothing.
      pg.all_gather(f.data(), g.data(), 0);
      at(want, OpType::kAllGather).calls += 1;
      expect_ledger(pg, want, __LINE__);

      // A call rejected by its argument checks is not recorded.
      EXPECT_THROW(pg.all_reduce(f.data(), -1), Error);
      EXPECT_THROW(pg.broadcast(f.data(), 1, n), Error);
      expect_ledger(pg, want, __LINE__);

      pg.reset_comm_ledger();
      Expect none[kNumOpTypes] = {};
      expect_ledger(pg, none, __LINE__);
    });
  }
}

TEST(CommLedger, SplitGroupsKeepTheirOwn) {
  run_local(4, [](ProcessGroup& pg) {
    std::vector<float> buf(16, 1.0f);
    pg.all_reduce(buf.data(), 16);
    auto half = pg.split(pg.rank() % 2, pg.rank(), "half");
    half->all_reduce(buf.data(), 4);
    half->all_reduce(buf.data(), 2);
    Expect parent[kNumOpTypes] = {};
    at(parent, OpType::kAllReduce) = {1, 16, 64};
    expect_ledger(pg, parent, __LINE__);
    Expect child[kNumOpTypes] = {};
    at(child, OpType::kAllReduce) = {2, 6, 24};
    expect_ledger(*half, child, __LINE__);
  });
}

}  // namespace
}  // namespace ndt
