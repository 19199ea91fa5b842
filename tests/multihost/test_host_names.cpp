// Host names in watchdog messages (part of test_mpi, run under mpirun on
// one host by mpi_np* and across the namespace hosts of scripts/hosts.sh
// by tests/multihost/multihost.sh): a timed-out recv names the host of this
// rank and of the peer, as each rank reports it itself (gethostname, which
// is what OpenMPI's MPI_Get_processor_name returns).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "../mpi/mpi_env.h"
#include "base/error.h"

namespace ndt {
namespace {

constexpr int kNameChars = 64;

// Every rank's host name, gathered as one float per character.
std::vector<std::string> all_host_names(ProcessGroup& pg) {
  char name[kNameChars + 1] = {};
  gethostname(name, kNameChars);
  std::vector<float> mine(kNameChars, 0.0f), all(kNameChars * pg.size());
  for (int i = 0; i < kNameChars && name[i] != 0; ++i)
    mine[i] = static_cast<unsigned char>(name[i]);
  pg.all_gather(mine.data(), all.data(), kNameChars);
  std::vector<std::string> names(pg.size());
  for (int r = 0; r < pg.size(); ++r) {
    for (int i = 0; i < kNameChars && all[r * kNameChars + i] != 0; ++i)
      names[r] += static_cast<char>(all[r * kNameChars + i]);
  }
  return names;
}

TEST(MpiWatchdog, TimeoutNamesTheHostsOfRankAndPeer) {
  MpiProcessGroup& pg = test::mpi_world();
  const std::vector<std::string> hosts = all_host_names(pg);
  const int n = pg.size();
  const int peer = n - 1;  // on another host when the job spans several
  if (pg.rank() == 0) {
    float x = -1;
    try {
      pg.recv_async(&x, 1, peer, 998)->wait(0.3);
      ADD_FAILURE() << "recv did not time out";
    } catch (const CommError& e) {
      const std::string msg = e.what();
      const std::string want = "timed out after 0.3 s (this rank is on host " +
                               hosts[0] + "; peer " + std::to_string(peer) +
                               " is world rank " + std::to_string(peer) +
                               " on host " + hosts[peer] + ")";
      EXPECT_NE(msg.find(want), std::string::npos) << msg << "\nwant: " << want;
      std::printf("host names: %s\n", msg.c_str());
    }
  }
  pg.barrier();
  // The cancelled recv must not take this message.
  if (n > 1 && pg.rank() == peer) {
    float v = 7;
    pg.send(&v, 1, 0, 998);
  } else if (pg.rank() == 0) {
    float v = 0;
    if (n == 1) {
      float self = 7;
      auto ws = pg.send_async(&self, 1, 0, 998);
      pg.recv(&v, 1, 0, 998);
      ws->wait();
    } else {
      pg.recv(&v, 1, peer, 998);
    }
    EXPECT_EQ(v, 7.0f);
  }
}

}  // namespace
}  // namespace ndt
