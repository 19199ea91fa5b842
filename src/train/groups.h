// Groups: the process groups of a run's layout, as the Engine, the trainer
// and `ndtrain verify` see them. Null where an axis has size 1 or the job
// is a single process.
#pragma once

#include "comm/process_group.h"

namespace ndt {

struct Groups {
  ProcessGroup* world = nullptr;
  ProcessGroup* dp = nullptr;  // parallel.dp_mode=mpi and parallel.dp > 1
  ProcessGroup* pp = nullptr;  // parallel.pp > 1
  ProcessGroup* tp = nullptr;  // parallel.tp > 1
};

}  // namespace ndt
