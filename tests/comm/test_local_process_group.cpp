// Every collective of the local (threads) backend against values computed
// directly, plus async Works, send/recv, the watchdog and failure
// propagation. Sums are checked bitwise: the backend adds in rank order,
// and so does the expected value here.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"
#include "comm/local_process_group.h"

namespace ndt {
namespace {

// Deterministic inputs whose sums round differently in different orders:
// an integer < 2^16 times a per-rank power of two (every product is exact,
// so the inputs do not depend on how the compiler contracts arithmetic).
template <typename T>
T value(int rank, int64_t i) {
  const int e = sizeof(T) == 4 ? 7 : 19;  // spread within the mantissa
  const int shift[] = {0, -2 * e - 3, -e, -3 * e - 1};
  T m = static_cast<T>((i * 7919 + rank * 104729 + 13) % 65536);
  return std::ldexp(m, shift[rank % 4]) + static_cast<T>(rank / 4);
}

template <typename T>
T sum_in_rank_order(int n, int64_t i) {
  T acc = value<T>(0, i);
  for (int j = 1; j < n; ++j)
    acc += value<T>(j, i);
  return acc;
}

template <typename T>
T max_over_ranks(int n, int64_t i) {
  T m = value<T>(0, i);
  for (int j = 1; j < n; ++j)
    m = std::max(m, value<T>(j, i));
  return m;
}

const int kRankCounts[] = {1, 2, 3, 4};
const int64_t kCounts[] = {0, 1, 7, 1000, 4099};

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

template <typename T>
void check_all_reduce() {
  for (int n : kRankCounts) {
    for (int64_t count : kCounts) {
      run_local(n, [&](ProcessGroup& pg) {
        const int r = pg.rank();
        std::vector<T> buf(count), mx(count);
        for (int64_t i = 0; i < count; ++i)
          buf[i] = mx[i] = value<T>(r, i);
        pg.all_reduce(buf.data(), count);
        pg.all_reduce(mx.data(), count, ReduceOp::kMax);
        for (int64_t i = 0; i < count; ++i) {
          ASSERT_EQ(buf[i], sum_in_rank_order<T>(n, i))
              << "n " << n << " count " << count << " i " << i;
          ASSERT_EQ(mx[i], max_over_ranks<T>(n, i));
        }
      });
    }
  }
}

TEST(LocalProcessGroup, AllReduceFloat) {
  check_all_reduce<float>();
}

TEST(LocalProcessGroup, AllReduceDouble) {
  check_all_reduce<double>();
}

TEST(LocalProcessGroup, RankSizeName) {
  for (int n : kRankCounts) {
    std::vector<int> seen(n, 0);
    run_local(n, [&](ProcessGroup& pg) {
      EXPECT_EQ(pg.size(), n);
      EXPECT_EQ(pg.name(), "world");
      EXPECT_EQ(pg.timeout_s(), ProcessGroup::kDefaultTimeoutS);
      seen[pg.rank()] += 1;
    });
    for (int s : seen)
      EXPECT_EQ(s, 1);
  }
}

TEST(LocalProcessGroup, ReduceScatter) {
  for (int n : kRankCounts) {
    for (int64_t count : kCounts) {
      run_local(n, [&](ProcessGroup& pg) {
        const int r = pg.rank();
        std::vector<float> in(n * count), out(count, -1.0f);
        for (int64_t i = 0; i < n * count; ++i)
          in[i] = value<float>(r, i);
        pg.reduce_scatter(in.data(), out.data(), count);
        for (int64_t i = 0; i < count; ++i) {
          ASSERT_EQ(out[i], sum_in_rank_order<float>(n, r * count + i));
        }
      });
    }
  }
}

TEST(LocalProcessGroup, AllGatherOutOfPlaceAndInPlace) {
  for (int n : kRankCounts) {
    for (int64_t count : kCounts) {
      run_local(n, [&](ProcessGroup& pg) {
        const int r = pg.rank();
        std::vector<float> in(count), out(n * count, -1.0f);
        for (int64_t i = 0; i < count; ++i)
          in[i] = value<float>(r, i);
        pg.all_gather(in.data(), out.data(), count);
        std::vector<float> inplace(n * count, -1.0f);
        std::copy(in.begin(), in.end(), inplace.begin() + r * count);
        pg.all_gather(inplace.data() + r * count, inplace.data(), count);
        for (int j = 0; j < n; ++j) {
          for (int64_t i = 0; i < count; ++i) {
            ASSERT_EQ(out[j * count + i], value<float>(j, i));
            ASSERT_EQ(inplace[j * count + i], value<float>(j, i));
          }
        }
      });
    }
  }
}

TEST(LocalProcessGroup, Broadcast) {
  for (int n : kRankCounts) {
    for (int64_t count : kCounts) {
      for (int root : {0, n - 1}) {
        run_local(n, [&](ProcessGroup& pg) {
          std::vector<float> buf(count);
          for (int64_t i = 0; i < count; ++i)
            buf[i] = value<float>(pg.rank(), i);
          pg.broadcast(buf.data(), count, root);
          for (int64_t i = 0; i < count; ++i) {
            ASSERT_EQ(buf[i], value<float>(root, i));
          }
        });
      }
    }
  }
}

TEST(LocalProcessGroup, ReduceToRootInPlaceAndNot) {
  for (int n : kRankCounts) {
    for (int64_t count : kCounts) {
      const int root = n / 2;
      run_local(n, [&](ProcessGroup& pg) {
        const int r = pg.rank();
        std::vector<float> in(count), out(count, -1.0f);
        for (int64_t i = 0; i < count; ++i)
          in[i] = value<float>(r, i);
        // Out of place; non-roots pass no output.
        pg.reduce(in.data(), r == root ? out.data() : nullptr, count, root);
        // In place on root.
        std::vector<float> io = in;
        pg.reduce(io.data(), r == root ? io.data() : nullptr, count, root);
        for (int64_t i = 0; i < count; ++i) {
          if (r == root) {
            ASSERT_EQ(out[i], sum_in_rank_order<float>(n, i));
            ASSERT_EQ(io[i], sum_in_rank_order<float>(n, i));
          } else {
            ASSERT_EQ(io[i], in[i]);  // untouched
          }
        }
      });
    }
  }
}

TEST(LocalProcessGroup, AllToAll) {
  for (int n : kRankCounts) {
    for (int64_t count : kCounts) {
      run_local(n, [&](ProcessGroup& pg) {
        const int r = pg.rank();
        std::vector<float> in(n * count), out(n * count, -1.0f);
        // Block j of rank r's input: value(r, j * count + i).
        for (int64_t i = 0; i < n * count; ++i)
          in[i] = value<float>(r, i);
        pg.all_to_all(in.data(), out.data(), count);
        for (int j = 0; j < n; ++j) {
          for (int64_t i = 0; i < count; ++i) {
            ASSERT_EQ(out[j * count + i], value<float>(j, r * count + i));
          }
        }
      });
    }
  }
}

TEST(LocalProcessGroup, AsyncWorksTestAndWait) {
  for (int n : kRankCounts) {
    run_local(n, [&](ProcessGroup& pg) {
      const int64_t count = 1000;
      std::vector<float> a(count), b(count);
      for (int64_t i = 0; i < count; ++i)
        a[i] = b[i] = value<float>(pg.rank(), i);
      auto wa = pg.all_reduce_async(a.data(), count);
      auto wb = pg.all_reduce_async(b.data(), count, ReduceOp::kMax);
      while (!wb->test()) {
      }
      wb->wait();
      wa->wait(1.0);
      EXPECT_TRUE(wa->test());
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(a[i], sum_in_rank_order<float>(n, i));
        ASSERT_EQ(b[i], max_over_ranks<float>(n, i));
      }
      pg.barrier();
    });
  }
}

TEST(LocalProcessGroup, SendRecvRing) {
  for (int n : kRankCounts) {
    for (int64_t count : kCounts) {
      run_local(n, [&](ProcessGroup& pg) {
        const int r = pg.rank();
        const int next = (r + 1) % n, prev = (r + n - 1) % n;
        std::vector<float> out(count), in(count, -1.0f);
        for (int64_t i = 0; i < count; ++i)
          out[i] = value<float>(r, i);
        // Receive first on even ranks, send first on odd ones: both orders
        // must work because both sides are asynchronous.
        std::unique_ptr<Work> ws, wr;
        if (r % 2 == 0) {
          wr = pg.recv_async(in.data(), count, prev, 3);
          ws = pg.send_async(out.data(), count, next, 3);
        } else {
          ws = pg.send_async(out.data(), count, next, 3);
          wr = pg.recv_async(in.data(), count, prev, 3);
        }
        wr->wait();
        ws->wait();
        for (int64_t i = 0; i < count; ++i) {
          ASSERT_EQ(in[i], value<float>(prev, i));
        }
      });
    }
  }
}

TEST(LocalProcessGroup, SameTagMessagesKeepTheirOrder) {
  run_local(2, [](ProcessGroup& pg) {
    if (pg.rank() == 0) {
      std::vector<float> msgs = {1, 2, 3, 4};
      std::vector<std::unique_ptr<Work>> ws;
      for (float& m : msgs)
        ws.push_back(pg.send_async(&m, 1, 1, 5));
      for (auto& w : ws)
        w->wait();
    } else {
      for (float expect : {1.0f, 2.0f, 3.0f, 4.0f}) {
        float got = 0;
        pg.recv(&got, 1, 0, 5);
        EXPECT_EQ(got, expect);
      }
    }
  });
}

TEST(LocalProcessGroup, SkippedCollectiveTimesOutOnTheOthers) {
  std::atomic<int> errors{0};
  auto start = std::chrono::steady_clock::now();
  run_local(3, [&](ProcessGroup& pg) {
    pg.set_timeout_s(0.2);
    if (pg.rank() == 2)
      return;  // never joins
    float x = 1;
    try {
      pg.all_reduce(&x, 1);
      ADD_FAILURE() << "rank " << pg.rank() << ": no timeout";
    } catch (const CommError& e) {
      std::string msg = e.what();
      EXPECT_TRUE(contains(msg, "all_reduce on group world")) << msg;
      EXPECT_TRUE(contains(msg, "timed out after 0.2 s")) << msg;
      EXPECT_TRUE(contains(msg, "rank " + std::to_string(pg.rank()))) << msg;
      ++errors;
    }
    // The group is unusable afterwards and says so immediately.
    EXPECT_THROW(pg.barrier(), CommError);
  });
  EXPECT_EQ(errors.load(), 2);
  double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_LT(s, 3.0);
}

TEST(LocalProcessGroup, UnmatchedRecvTimesOutAndGroupStaysUsable) {
  run_local(2, [](ProcessGroup& pg) {
    if (pg.rank() == 0) {
      float x = 0;
      auto w = pg.recv_async(&x, 1, 1, 7);
      EXPECT_FALSE(w->test());
      try {
        w->wait(0.2);
        ADD_FAILURE() << "no timeout";
      } catch (const CommError& e) {
        std::string msg = e.what();
        EXPECT_TRUE(contains(msg, "rank 0: recv from peer 1 (tag 7)")) << msg;
        EXPECT_TRUE(contains(msg, "timed out after 0.2 s")) << msg;
      }
    }
    pg.barrier();
    // The withdrawn recv does not swallow a later message.
    float v = pg.rank() == 1 ? 42.0f : 0.0f;
    if (pg.rank() == 1) {
      pg.send(&v, 1, 0, 7);
    } else {
      pg.recv(&v, 1, 1, 7);
      EXPECT_EQ(v, 42.0f);
    }
    float s = 1;
    pg.all_reduce(&s, 1);
    EXPECT_EQ(s, 2.0f);
  });
}

TEST(LocalProcessGroup, ExceptionOnOneRankDoesNotHangTheOthers) {
  std::atomic<int> peer_errors{0};
  auto start = std::chrono::steady_clock::now();
  try {
    run_local(3, [&](ProcessGroup& pg) {
      // Default timeout (300 s): only failure propagation can end this fast.
      if (pg.rank() == 1)
        throw std::runtime_error("boom on rank 1");
      float x = 1;
      try {
        pg.all_reduce(&x, 1);
      } catch (const CommError& e) {
        EXPECT_TRUE(contains(e.what(), "rank 1 failed: boom on rank 1"))
            << e.what();
        ++peer_errors;
        throw;
      }
    });
    ADD_FAILURE() << "run_local did not rethrow";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "boom on rank 1");  // the first failure
  }
  EXPECT_EQ(peer_errors.load(), 2);
  double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_LT(s, 3.0);
}

TEST(LocalProcessGroup, ExceptionWakesPendingRecv) {
  EXPECT_THROW(
      run_local(
          2,
          [](ProcessGroup& pg) {
            if (pg.rank() == 0)
              throw std::logic_error("sender died");
            float x = 0;
            pg.recv(&x, 1, 0, 1);
          }),
      std::logic_error);
}

TEST(LocalProcessGroup, MismatchedCollectivesAreReported) {
  std::atomic<int> errors{0};
  run_local(2, [&](ProcessGroup& pg) {
    std::vector<float> buf(8, 1.0f);
    try {
      if (pg.rank() == 0) {
        pg.all_reduce(buf.data(), 4);
      } else {
        pg.broadcast(buf.data(), 5, 0);
      }
    } catch (const CommError& e) {
      EXPECT_TRUE(contains(e.what(), "does not match")) << e.what();
      ++errors;
    }
  });
  EXPECT_EQ(errors.load(), 2);
}

TEST(LocalProcessGroup, SplitMakesIndependentSubgroups) {
  run_local(4, [](ProcessGroup& pg) {
    const int r = pg.rank();
    // Colors: even / odd ranks; key reverses the order.
    auto sub = pg.split(r % 2, -r, r % 2 ? "odd" : "even");
    EXPECT_EQ(sub->size(), 2);
    EXPECT_EQ(sub->rank(), r < 2 ? 1 : 0);
    EXPECT_EQ(sub->name(), r % 2 ? "odd" : "even");
    float v = static_cast<float>(r);
    sub->all_reduce(&v, 1);
    EXPECT_EQ(v, r % 2 ? 4.0f : 2.0f);
  });
}

TEST(LocalProcessGroup, BadArgumentsThrow) {
  run_local(2, [](ProcessGroup& pg) {
    float x[4] = {};
    EXPECT_THROW(pg.broadcast(x, 1, 2), Error);
    EXPECT_THROW(pg.send(x, 1, 5, 0), Error);
    EXPECT_THROW(pg.send(x, 1, 1, -1), Error);
    EXPECT_THROW(pg.all_reduce(static_cast<float*>(nullptr), 3), Error);
    EXPECT_THROW(pg.all_to_all(x, x + 1, 1), Error);  // overlap
    EXPECT_THROW(pg.set_timeout_s(0), ConfigError);
  });
}

TEST(LocalProcessGroup, RunLocalRejectsZeroRanks) {
  EXPECT_THROW(run_local(0, [](ProcessGroup&) {}), ConfigError);
}

}  // namespace
}  // namespace ndt
