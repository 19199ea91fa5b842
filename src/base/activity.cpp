#include "base/activity.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace ndt {
namespace {

char g_activity[256] = "start-up";
char g_comm_wait[512] = "";
char g_prefix[128] = "";

void write_all(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0)
      return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

extern "C" void on_sigterm(int) {
  write_all(g_prefix);
  write_all(g_activity);
  if (g_comm_wait[0] != '\0') {
    write_all("; waiting in ");
    write_all(g_comm_wait);
  }
  write_all("\n");
  ::_exit(143);
}

}  // namespace

void set_activity(std::string_view text) {
  const size_t n = std::min(text.size(), sizeof g_activity - 1);
  std::memcpy(g_activity, text.data(), n);
  g_activity[n] = '\0';
}

void set_comm_wait(std::string_view text) {
  const size_t n = std::min(text.size(), sizeof g_comm_wait - 1);
  std::memcpy(g_comm_wait, text.data(), n);
  g_comm_wait[n] = '\0';
}

void install_termination_report(int world_rank) {
  std::snprintf(
      g_prefix,
      sizeof g_prefix,
      "[rank %d] terminated by the launcher (another rank ended) during: ",
      world_rank);
  struct sigaction sa = {};
  sa.sa_handler = on_sigterm;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
}

}  // namespace ndt
