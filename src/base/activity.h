// Activity: what this process is doing right now (e.g. "pipeline stage 0
// of 2, instruction 18 'RG3<1' (recv_grad)"), for the one message a rank
// prints when the launcher terminates it because another rank died
// (mpirun sends SIGTERM to the survivors). Kept in a fixed buffer so the
// signal handler can write it without allocating.
#pragma once

#include <string_view>

namespace ndt {

// Records `text` (truncated to 255 bytes). Cheap: a copy into the buffer.
void set_activity(std::string_view text);

// Records the communication operation this process is blocked in, e.g.
// "all_reduce on group dp (this rank is on host a; group dp has world
// ranks 0, 1 on a and 2, 3 on b)"; empty: none. Set by the comm layer's
// waits.
void set_comm_wait(std::string_view text);

// Installs a SIGTERM handler that prints
//   "[rank R] terminated by the launcher (another rank ended) during:
//   <activity>[; waiting in <comm wait>]"
// to stderr and exits with status 143.
void install_termination_report(int world_rank);

}  // namespace ndt
