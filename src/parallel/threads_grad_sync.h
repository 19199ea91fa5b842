// ThreadsGradSync: data parallelism on the threads of one process
// (parallel.dp_mode=threads). Each replica runs on one thread of a
// run_local group (comm/local_process_group.h) with its own model copy;
// finish() sums every gradient into replica 0's (ProcessGroup::reduce,
// rank order, so the result is deterministic). Replica 0 then runs the
// optimizer; the engine broadcasts its parameters to the other replicas
// before the next step. Loss scales are 1 / (global loss terms), so the
// sum is the global-batch gradient.
#pragma once

#include <vector>

#include "comm/process_group.h"
#include "nn/model.h"
#include "parallel/grad_sync.h"

namespace ndt {

class ThreadsGradSync final : public GradSync {
 public:
  // group: the run_local group of this step (rank = replica index); model:
  // this thread's replica. Both must outlive the object.
  ThreadsGradSync(Model& model, ProcessGroup& group)
      : params_(model.parameters()), group_(group) {}
  void begin_backward(bool /*last*/) override {}
  void finish() override;

 private:
  std::vector<Parameter*> params_;
  ProcessGroup& group_;
};

}  // namespace ndt
