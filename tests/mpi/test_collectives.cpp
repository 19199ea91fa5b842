// Every MPI collective, float and double where offered, at sizes 0, 1,
// 1000 and one past 8 MiB (several pieces), against closed-form values.
// Inputs are small integers (or multiples of 1/4), so every sum is exact
// whatever order MPI adds in.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "mpi_env.h"

namespace ndt {
namespace {

float fval(int rank, int64_t idx) {
  return static_cast<float>((rank + 1) * 8 + idx % 1024);
}
float fsum(int n, int64_t idx) {
  return static_cast<float>(4 * n * (n + 1) + n * (idx % 1024));
}
float fmax(int n, int64_t idx) {
  return static_cast<float>(8 * n + idx % 1024);
}
double dval(int rank, int64_t idx) {
  return (rank + 1) * 0.5 + (idx % 1000) * 0.25;
}
double dsum(int n, int64_t idx) {
  return 0.25 * n * (n + 1) + n * (idx % 1000) * 0.25;
}

// Buffer counts: one past 8 MiB for buffers of `count` elements...
constexpr int64_t kBig = (int64_t{8} << 20) / 4 + 12345;
// ...and per-rank counts whose size()*count buffers pass 8 MiB.
int64_t big_block(int n) {
  return kBig / n + 4099;
}

std::vector<int64_t> counts() {
  return {0, 1, 1000, kBig};
}
std::vector<int64_t> block_counts(int n) {
  return {0, 1, 1000, big_block(n)};
}

// First index where got != expect(i), or -1.
template <typename T, typename F>
int64_t first_mismatch(const std::vector<T>& got, int64_t count, F expect) {
  for (int64_t i = 0; i < count; ++i) {
    if (got[i] != expect(i))
      return i;
  }
  return -1;
}

TEST(MpiCollectives, AllReduceFloat) {
  ProcessGroup& pg = test::mpi_world();
  const int n = pg.size(), r = pg.rank();
  for (int64_t count : counts()) {
    std::vector<float> sum(count), mx(count);
    for (int64_t i = 0; i < count; ++i)
      sum[i] = mx[i] = fval(r, i);
    pg.all_reduce(sum.data(), count);
    pg.all_reduce(mx.data(), count, ReduceOp::kMax);
    EXPECT_EQ(
        first_mismatch(sum, count, [&](int64_t i) { return fsum(n, i); }), -1)
        << "count " << count;
    EXPECT_EQ(
        first_mismatch(mx, count, [&](int64_t i) { return fmax(n, i); }), -1)
        << "count " << count;
  }
}

TEST(MpiCollectives, AllReduceDouble) {
  ProcessGroup& pg = test::mpi_world();
  const int n = pg.size(), r = pg.rank();
  for (int64_t count : counts()) {
    std::vector<double> sum(count), mx(count);
    for (int64_t i = 0; i < count; ++i)
      sum[i] = mx[i] = dval(r, i);
    pg.all_reduce(sum.data(), count);
    pg.all_reduce(mx.data(), count, ReduceOp::kMax);
    EXPECT_EQ(
        first_mismatch(sum, count, [&](int64_t i) { return dsum(n, i); }), -1)
        << "count " << count;
    EXPECT_EQ(
        first_mismatch(mx, count, [&](int64_t i) { return dval(n - 1, i); }),
        -1)
        << "count " << count;
  }
}

// Every rank ends with rank 0's numbers, NaN and infinities included,
// whatever the others held, on the world and on a sub-group.
TEST(MpiCollectives, ShareFromRank0) {
  ProcessGroup& pg = test::mpi_world();
  const int r = pg.rank();
  constexpr double inf = std::numeric_limits<double>::infinity();
  auto check = [](ProcessGroup& g, int world_rank) {
    const double ours[4] = {1.5, -2.25, inf, -inf};
    double v[5] = {1.5, -2.25, inf, -inf, std::nan("")};
    if (g.rank() != 0) {
      for (double& x : v)
        x = 7.0 + world_rank;
    }
    g.share_from_rank0(v, 5);
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(v[i], ours[i]) << "rank " << world_rank << " value " << i;
    EXPECT_TRUE(std::isnan(v[4])) << "rank " << world_rank << ": " << v[4];
  };
  check(pg, r);
  std::unique_ptr<ProcessGroup> odd = pg.split(r % 2, r, "share_odd");
  check(*odd, r);
}

TEST(MpiCollectives, ReduceScatter) {
  ProcessGroup& pg = test::mpi_world();
  const int n = pg.size(), r = pg.rank();
  for (int64_t count : block_counts(n)) {
    std::vector<float> in(n * count), out(count, -1.0f);
    for (int64_t i = 0; i < n * count; ++i)
      in[i] = fval(r, i);
    pg.reduce_scatter(in.data(), out.data(), count);
    EXPECT_EQ(
        first_mismatch(
            out, count, [&](int64_t i) { return fsum(n, r * count + i); }),
        -1)
        << "count " << count;
  }
}

TEST(MpiCollectives, AllGatherOutOfPlaceAndInPlace) {
  ProcessGroup& pg = test::mpi_world();
  const int n = pg.size(), r = pg.rank();
  for (int64_t count : block_counts(n)) {
    std::vector<float> in(count), out(n * count, -1.0f), io(n * count, -1.0f);
    for (int64_t i = 0; i < count; ++i)
      in[i] = io[r * count + i] = fval(r, i);
    pg.all_gather(in.data(), out.data(), count);
    pg.all_gather(io.data() + r * count, io.data(), count);
    auto expect = [&](int64_t i) {
      return fval(static_cast<int>(i / count), i % count);
    };
    EXPECT_EQ(first_mismatch(out, n * count, expect), -1) << "count " << count;
    EXPECT_EQ(first_mismatch(io, n * count, expect), -1) << "count " << count;
  }
}

TEST(MpiCollectives, Broadcast) {
  ProcessGroup& pg = test::mpi_world();
  const int n = pg.size(), r = pg.rank();
  for (int64_t count : counts()) {
    for (int root : {0, n - 1}) {
      std::vector<float> buf(count);
      for (int64_t i = 0; i < count; ++i)
        buf[i] = fval(r, i);
      pg.broadcast(buf.data(), count, root);
      EXPECT_EQ(
          first_mismatch(buf, count, [&](int64_t i) { return fval(root, i); }),
          -1)
          << "count " << count << " root " << root;
    }
  }
}

TEST(MpiCollectives, ReduceToRootInPlaceAndNot) {
  ProcessGroup& pg = test::mpi_world();
  const int n = pg.size(), r = pg.rank(), root = n / 2;
  for (int64_t count : counts()) {
    std::vector<float> in(count), out(count, -1.0f);
    for (int64_t i = 0; i < count; ++i)
      in[i] = fval(r, i);
    pg.reduce(in.data(), r == root ? out.data() : nullptr, count, root);
    std::vector<float> io = in;
    pg.reduce(io.data(), r == root ? io.data() : nullptr, count, root);
    if (r == root) {
      auto expect = [&](int64_t i) { return fsum(n, i); };
      EXPECT_EQ(first_mismatch(out, count, expect), -1) << "count " << count;
      EXPECT_EQ(first_mismatch(io, count, expect), -1) << "count " << count;
    } else {
      EXPECT_EQ(io, in);
    }
  }
}

TEST(MpiCollectives, AllToAll) {
  ProcessGroup& pg = test::mpi_world();
  const int n = pg.size(), r = pg.rank();
  for (int64_t count : block_counts(n)) {
    std::vector<float> in(n * count), out(n * count, -1.0f);
    for (int64_t i = 0; i < n * count; ++i)
      in[i] = fval(r, i);
    pg.all_to_all(in.data(), out.data(), count);
    // Block j of out is block r of rank j's input.
    auto expect = [&](int64_t i) {
      return fval(static_cast<int>(i / count), r * count + i % count);
    };
    EXPECT_EQ(first_mismatch(out, n * count, expect), -1) << "count " << count;
  }
}

TEST(MpiCollectives, SendRecvRing) {
  ProcessGroup& pg = test::mpi_world();
  const int n = pg.size(), r = pg.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (int64_t count : counts()) {
    std::vector<float> out(count), in(count, -1.0f);
    for (int64_t i = 0; i < count; ++i)
      out[i] = fval(r, i);
    auto wr = pg.recv_async(in.data(), count, prev, 11);
    auto ws = pg.send_async(out.data(), count, next, 11);
    ws->wait();
    wr->wait();
    EXPECT_EQ(
        first_mismatch(in, count, [&](int64_t i) { return fval(prev, i); }), -1)
        << "count " << count;
  }
}

TEST(MpiCollectives, ManyAsyncInFlightWaitedInReverse) {
  ProcessGroup& pg = test::mpi_world();
  const int n = pg.size(), r = pg.rank();
  std::vector<float> a(kBig), b(1000), g(n * 1000, -1.0f);
  std::vector<double> c(77);
  for (int64_t i = 0; i < kBig; ++i)
    a[i] = fval(r, i);
  for (int64_t i = 0; i < 1000; ++i)
    b[i] = fval(r, i);
  for (int64_t i = 0; i < 77; ++i)
    c[i] = dval(r, i);
  auto wa = pg.all_reduce_async(a.data(), kBig);
  auto wb = pg.all_reduce_async(b.data(), 1000, ReduceOp::kMax);
  auto wg = pg.all_gather_async(b.data(), g.data(), 0);  // count 0: done
  EXPECT_TRUE(wg->test());
  auto wc = pg.all_reduce_async(c.data(), 77);
  while (!wc->test()) {
    pg.progress();
  }
  wb->wait();
  wa->wait();
  EXPECT_TRUE(wa->test());
  EXPECT_EQ(first_mismatch(a, kBig, [&](int64_t i) { return fsum(n, i); }), -1);
  EXPECT_EQ(first_mismatch(b, 1000, [&](int64_t i) { return fmax(n, i); }), -1);
  EXPECT_EQ(first_mismatch(c, 77, [&](int64_t i) { return dsum(n, i); }), -1);
}

// Restores the world's tuning when a test changes it.
class TuningGuard {
 public:
  TuningGuard()
      : chunk_(test::mpi_world().chunk_bytes()),
        ring_min_(test::mpi_world().ring_min_bytes()) {}
  ~TuningGuard() {
    test::mpi_world().set_chunk_bytes(chunk_);
    test::mpi_world().set_ring_min_bytes(ring_min_);
  }

 private:
  int64_t chunk_;
  int64_t ring_min_;
};

// Every operation with tiny pieces (many pipelined rounds, uneven last
// pieces) on the ring and pairwise paths, then on MPI's own collectives
// (chunked where they can be).
void check_every_op_with_small_chunks(MpiProcessGroup& pg) {
  const int n = pg.size(), r = pg.rank();
  for (int64_t ring_min : {int64_t{0}, int64_t{1} << 40}) {
    pg.set_chunk_bytes(ring_min == 0 ? 256 : 1024);
    pg.set_ring_min_bytes(ring_min);
    for (int64_t count :
         {int64_t{1}, int64_t{5}, int64_t{1000}, int64_t{4099}}) {
      SCOPED_TRACE(
          testing::Message() << "ring_min " << ring_min << " count " << count);
      std::vector<float> ar(count);
      std::vector<double> ard(count);
      for (int64_t i = 0; i < count; ++i)
        ar[i] = fval(r, i), ard[i] = dval(r, i);
      pg.all_reduce(ar.data(), count);
      pg.all_reduce(ard.data(), count);
      EXPECT_EQ(
          first_mismatch(ar, count, [&](int64_t i) { return fsum(n, i); }), -1);
      EXPECT_EQ(
          first_mismatch(ard, count, [&](int64_t i) { return dsum(n, i); }),
          -1);

      std::vector<float> in(n * count), rs(count), ag(n * count),
          a2a(n * count);
      for (int64_t i = 0; i < n * count; ++i)
        in[i] = fval(r, i);
      pg.reduce_scatter(in.data(), rs.data(), count);
      EXPECT_EQ(
          first_mismatch(
              rs, count, [&](int64_t i) { return fsum(n, r * count + i); }),
          -1);
      pg.all_gather(in.data(), ag.data(), count);
      EXPECT_EQ(
          first_mismatch(
              ag,
              n * count,
              [&](int64_t i) {
                return fval(static_cast<int>(i / count), i % count);
              }),
          -1);
      pg.all_to_all(in.data(), a2a.data(), count);
      EXPECT_EQ(
          first_mismatch(
              a2a,
              n * count,
              [&](int64_t i) {
                return fval(static_cast<int>(i / count), r * count + i % count);
              }),
          -1);
      std::vector<float> bc(count);
      for (int64_t i = 0; i < count; ++i)
        bc[i] = fval(r, i);
      pg.broadcast(bc.data(), count, n - 1);
      EXPECT_EQ(
          first_mismatch(bc, count, [&](int64_t i) { return fval(n - 1, i); }),
          -1);
      std::vector<float> red(count, -1.0f);
      pg.reduce(in.data(), red.data(), count, 0);
      if (r == 0) {
        EXPECT_EQ(
            first_mismatch(red, count, [&](int64_t i) { return fsum(n, i); }),
            -1);
      }
      std::vector<float> p2p(count, -1.0f);
      auto wr = pg.recv_async(p2p.data(), count, (r + n - 1) % n, 12);
      pg.send(in.data(), count, (r + 1) % n, 12);
      wr->wait();
      EXPECT_EQ(
          first_mismatch(
              p2p, count, [&](int64_t i) { return fval((r + n - 1) % n, i); }),
          -1);
    }
  }
}

TEST(MpiCollectives, SmallChunksRingAndNbcPaths) {
  TuningGuard guard;
  check_every_op_with_small_chunks(test::mpi_world());
}

// Odd group sizes (3 and 7 at 4 and 8 ranks; rank 0 alone: size 1).
TEST(MpiCollectives, SmallChunksOnASubgroup) {
  ProcessGroup& world = test::mpi_world();
  const int r = world.rank();
  auto rest = world.split(r == 0 ? 1 : 0, r, "rest");
  EXPECT_EQ(rest->size(), r == 0 ? 1 : world.size() - 1);
  check_every_op_with_small_chunks(dynamic_cast<MpiProcessGroup&>(*rest));
}

// Broadcasts and reduces of different roots run at the same time (two
// lanes per group, Note [MPI progress]). On a pair of ranks, rank 1 starts
// a big reduce to rank 0 and then a small broadcast from, or reduce to,
// itself; it then tells rank 0 and blocks in a plain MPI_Recv (MPI
// progresses, the group's operations post nothing new). The big reduce
// moves in 256 KiB pieces, above OpenMPI's eager limits (shared memory 4
// KiB, TCP 64 KiB), so a piece leaves only once rank 0 receives it, and
// rank 1 posts the next pieces only from the group's progress calls. Only
// then does rank 0 start the same two: its small operation must complete
// while the big one cannot. With one queue per group the small one waits
// behind the big one.
TEST(MpiCollectives, TwoRootsRunAtTheSameTime) {
  ProcessGroup& world = test::mpi_world();
  if (world.size() < 2)
    GTEST_SKIP() << "needs 2 ranks";
  const int r = world.rank();
  auto pair = world.split(r < 2 ? 0 : 1, r, "pair");
  if (r >= 2)
    return;
  dynamic_cast<MpiProcessGroup&>(*pair).set_chunk_bytes(256 << 10);
  // Plain messages on MPI_COMM_WORLD, which no group uses.
  constexpr int kReadyTag = 7301, kGoTag = 7302;
  for (bool reduce : {false, true}) {
    std::vector<float> a(kBig), big_sum(kBig, -1.0f), b(16), sum(16, -1.0f);
    for (int64_t i = 0; i < kBig; ++i)
      a[i] = fval(r, i);
    for (int64_t i = 0; i < 16; ++i)
      b[i] = fval(r, i);
    auto start = [&] {
      auto big = pair->reduce_async(
          a.data(), r == 0 ? big_sum.data() : nullptr, kBig, 0);
      auto small = reduce ? pair->reduce_async(
                                b.data(), r == 1 ? sum.data() : nullptr, 16, 1)
                          : pair->broadcast_async(b.data(), 16, 1);
      return std::make_pair(std::move(big), std::move(small));
    };
    int token = 0;
    std::unique_ptr<Work> wa, wb;
    if (r == 1) {
      std::tie(wa, wb) = start();
      ASSERT_EQ(
          MPI_Send(&token, 1, MPI_INT, 0, kReadyTag, MPI_COMM_WORLD),
          MPI_SUCCESS);
      ASSERT_EQ(
          MPI_Recv(
              &token, 1, MPI_INT, 0, kGoTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
          MPI_SUCCESS);
    } else {
      ASSERT_EQ(
          MPI_Recv(
              &token,
              1,
              MPI_INT,
              1,
              kReadyTag,
              MPI_COMM_WORLD,
              MPI_STATUS_IGNORE),
          MPI_SUCCESS);
      std::tie(wa, wb) = start();
      const auto deadline =
          std::chrono::steady_clock::now() + std::chrono::seconds(10);
      bool small_done = false;
      while (!small_done && std::chrono::steady_clock::now() < deadline)
        small_done = wb->test();
      const bool big_done = wa->test();
      ASSERT_EQ(
          MPI_Send(&token, 1, MPI_INT, 1, kGoTag, MPI_COMM_WORLD), MPI_SUCCESS);
      EXPECT_TRUE(small_done)
          << (reduce ? "reduce" : "broadcast")
          << " of rank 1 waited behind the reduce to rank 0";
      EXPECT_FALSE(big_done) << "the big reduce finished without rank 1";
    }
    wb->wait();
    wa->wait();
    if (r == 0) {
      EXPECT_EQ(
          first_mismatch(big_sum, kBig, [](int64_t i) { return fsum(2, i); }),
          -1);
    }
    if (!reduce) {
      EXPECT_EQ(
          first_mismatch(b, 16, [](int64_t i) { return fval(1, i); }), -1);
    } else if (r == 1) {
      EXPECT_EQ(
          first_mismatch(sum, 16, [](int64_t i) { return fsum(2, i); }), -1);
    }
  }
}

TEST(MpiCollectives, BarrierAndSplit) {
  ProcessGroup& pg = test::mpi_world();
  pg.barrier();
  const int n = pg.size(), r = pg.rank();
  auto sub = pg.split(r % 2, -r, "parity");
  EXPECT_EQ(sub->size(), (n - r % 2 + 1) / 2);
  EXPECT_EQ(sub->name(), "parity");
  EXPECT_EQ(sub->timeout_s(), pg.timeout_s());
  float v = static_cast<float>(r);
  sub->all_reduce(&v, 1);
  float expect = 0;
  for (int j = r % 2; j < n; j += 2)
    expect += static_cast<float>(j);
  EXPECT_EQ(v, expect);
  // key -r: ranks in reverse order.
  EXPECT_EQ(sub->rank(), (n - 1 - r) / 2);
  sub->barrier();
}

}  // namespace
}  // namespace ndt
