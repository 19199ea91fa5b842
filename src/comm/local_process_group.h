// Local backend: N ranks as the N threads of one OpenMP parallel region in
// one process, sharing memory. It runs the unit tests without mpirun and
// single-process multi-thread data parallelism.
//
// Why OpenMP threads and not std::thread: OpenBLAS's OpenMP build is only
// safe to call concurrently from inside an OpenMP parallel region (there
// it runs single-threaded per caller).
//
// Collectives run to completion inside the *_async call (the ranks are the
// compute threads themselves, so there is nothing to overlap with) and
// return a finished Work; a timeout or a failed peer therefore throws from
// that call. send/recv are truly asynchronous: a send is matched with the
// recv of the same (source, destination, tag) in posting order and copied
// by whichever side arrives second.
//
// Reductions add in rank order (((x0 + x1) + x2) + ...), so results are
// deterministic and identical on every rank.
#pragma once

#include <functional>

#include "comm/process_group.h"

namespace ndt {

// Runs fn(pg) on n threads of one `#pragma omp parallel num_threads(n)`
// region; pg.rank() == omp_get_thread_num(), pg.name() == "world". An
// exception thrown by fn on any rank marks the run failed: peers blocked
// in (or later calling) an operation throw CommError naming the failed
// rank instead of hanging, and after the region the first exception (in
// time) is rethrown in the caller. Throws Error when OpenMP cannot start n
// threads (e.g. when called from inside another parallel region).
void run_local(int n, const std::function<void(ProcessGroup& pg)>& fn);

}  // namespace ndt
