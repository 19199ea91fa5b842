// The observer hook of ProcessGroup (comm/comm_observer.h) and CommTimer
// on the local (threads) backend: which calls are observed and in which
// phase, that observing changes neither results nor the ledger, and that
// the timer counts the time a rank waits for a slower peer, per operation
// type, for blocking and async forms alike.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "base/error.h"
#include "comm/comm_timer.h"
#include "comm/local_process_group.h"

namespace ndt {
namespace {

// Records every before() / after() as (op, phase, is_before).
class Recorder final : public CommObserver {
 public:
  struct Event {
    OpType op;
    CommPhase phase;
    bool before;
    bool operator==(const Event&) const = default;
  };
  void before(OpType op, CommPhase phase) override {
    events.push_back({op, phase, true});
  }
  void after(OpType op, CommPhase phase) override {
    events.push_back({op, phase, false});
  }
  std::vector<Event> events;
};

using Ev = Recorder::Event;

TEST(CommObserver, SeesStartTestAndWaitOfEachOperation) {
  run_local(2, [](ProcessGroup& pg) {
    Recorder rec;
    pg.set_observer(&rec);
    EXPECT_EQ(pg.observer(), &rec);
    std::vector<float> buf(8, 1.0f);
    pg.all_reduce(buf.data(), 8);
    EXPECT_EQ(buf[0], 2.0f);
    auto w = pg.all_reduce_async(buf.data(), 0);  // moves nothing
    EXPECT_TRUE(w->test());
    pg.barrier();
    // Rejected by the argument checks: neither observed nor recorded.
    EXPECT_THROW(pg.broadcast(buf.data(), 1, 5), Error);
    const auto A = OpType::kAllReduce;
    const auto S = CommPhase::kStart, W = CommPhase::kWait,
               T = CommPhase::kTest;
    std::vector<Ev> want = {
        {A, S, true},
        {A, S, false},
        {A, W, true},
        {A, W, false},
        {A, S, true},
        {A, S, false},
        {A, T, true},
        {A, T, false},
        {OpType::kBarrier, S, true},
        {OpType::kBarrier, S, false},
    };
    EXPECT_EQ(rec.events, want);
    EXPECT_EQ(pg.comm_ledger()[OpType::kAllReduce].calls, 2);
    EXPECT_EQ(pg.comm_ledger()[OpType::kBroadcast].calls, 0);
    // Groups made by split() start without an observer.
    auto sub = pg.split(0, pg.rank(), "sub");
    EXPECT_EQ(sub->observer(), nullptr);
    pg.set_observer(nullptr);
    pg.all_reduce(buf.data(), 8);
    EXPECT_EQ(rec.events.size(), want.size());
  });
}

TEST(CommObserver, AfterRunsWhenTheOperationThrows) {
  run_local(2, [](ProcessGroup& pg) {
    pg.set_timeout_s(0.2);
    Recorder rec;
    pg.set_observer(&rec);
    float x = 0;
    if (pg.rank() == 0) {
      auto w = pg.recv_async(&x, 1, 1, 7);  // never sent
      EXPECT_THROW(w->wait(), CommError);
      ASSERT_EQ(rec.events.size(), 4u);
      EXPECT_EQ(
          rec.events.back(), (Ev{OpType::kRecv, CommPhase::kWait, false}));
    }
    pg.set_observer(nullptr);
  });
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

TEST(CommTimer, CountsWaitingForASlowerPeerPerOperation) {
  constexpr double kDelay = 0.1;
  run_local(2, [&](ProcessGroup& pg) {
    const int r = pg.rank();
    CommTimer timer(pg);
    EXPECT_EQ(pg.observer(), &timer);
    EXPECT_THROW(CommTimer second(pg), Error);
    std::vector<float> buf(64, 1.0f);

    // Rank 1 is late to the all-reduce: rank 0 waits inside it.
    if (r == 1)
      std::this_thread::sleep_for(std::chrono::duration<double>(kDelay));
    auto t0 = std::chrono::steady_clock::now();
    pg.all_reduce(buf.data(), 64);
    const double in_call = seconds_since(t0);
    EXPECT_EQ(buf[0], 2.0f);
    const double ar = timer.seconds(OpType::kAllReduce);
    EXPECT_GT(ar, 0);
    EXPECT_LE(ar, in_call);
    if (r == 0) {
      EXPECT_GE(ar, 0.5 * kDelay);
    }
    EXPECT_EQ(timer.seconds(OpType::kBroadcast), 0);

    // Async: a recv posted early and waited for while the sender is late.
    float x = 0;
    if (r == 0) {
      auto w = pg.recv_async(&x, 1, 1, 3);
      w->wait();
      EXPECT_EQ(x, 5.0f);
      EXPECT_GE(timer.seconds(OpType::kRecv), 0.5 * kDelay);
    } else {
      std::this_thread::sleep_for(std::chrono::duration<double>(kDelay));
      float v = 5;
      pg.send(&v, 1, 0, 3);
    }
    EXPECT_DOUBLE_EQ(
        timer.seconds(),
        timer.seconds(OpType::kAllReduce) + timer.seconds(OpType::kSend) +
            timer.seconds(OpType::kRecv));
    // Timing leaves the ledger as it was.
    EXPECT_EQ(pg.comm_ledger()[OpType::kAllReduce].calls, 1);
    timer.reset();
    EXPECT_EQ(timer.seconds(), 0);
  });
}

TEST(CommTimer, DetachesOnDestruction) {
  run_local(1, [](ProcessGroup& pg) {
    {
      CommTimer timer(pg);
      pg.barrier();
      EXPECT_GE(timer.seconds(OpType::kBarrier), 0);
    }
    EXPECT_EQ(pg.observer(), nullptr);
    CommTimer again(pg);  // a new one may attach
    EXPECT_EQ(pg.observer(), &again);
  });
}

}  // namespace
}  // namespace ndt
