// Watchdog under MPI: a recv that never gets its message times out with a
// CommError naming the rank, the operation and the peer; the recv is
// cancelled, so the world stays usable for the tests that follow.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "base/error.h"
#include "mpi_env.h"

namespace ndt {
namespace {

TEST(MpiWatchdog, RecvThatNeverComesTimesOut) {
  MpiProcessGroup& pg = test::mpi_world();
  const int n = pg.size(), r = pg.rank();
  const int peer = n > 1 ? 1 : 0;
  if (r == 0) {
    float x = -1;
    auto start = std::chrono::steady_clock::now();
    try {
      pg.recv_async(&x, 1, peer, 999)->wait(0.5);
      ADD_FAILURE() << "recv did not time out";
    } catch (const CommError& e) {
      std::string msg = e.what();
      EXPECT_NE(
          msg.find("rank 0: recv from peer " + std::to_string(peer)),
          std::string::npos)
          << msg;
      EXPECT_NE(msg.find("timed out after 0.5 s"), std::string::npos) << msg;
      EXPECT_NE(msg.find("group world"), std::string::npos) << msg;
    }
    double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    EXPECT_GE(s, 0.5);
    EXPECT_LT(s, 5.0);
    EXPECT_EQ(x, -1);
  }
  pg.barrier();
  // Same tag again: the cancelled recv must not take this message.
  if (n > 1 && r == 1) {
    float v = 42;
    pg.send(&v, 1, 0, 999);
  } else if (r == 0) {
    float v = 0;
    if (n == 1) {
      float self = 42;
      auto ws = pg.send_async(&self, 1, 0, 999);
      pg.recv(&v, 1, 0, 999);
      ws->wait();
    } else {
      pg.recv(&v, 1, peer, 999);
    }
    EXPECT_EQ(v, 42.0f);
  }
  float one = 1;
  pg.all_reduce(&one, 1);
  EXPECT_EQ(one, static_cast<float>(n));
}

}  // namespace
}  // namespace ndt
