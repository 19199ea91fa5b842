// GradSync: how one step's parameter gradients are combined across
// data-parallel replicas before the optimizer sees them. The step
// interpreter (pipeline/executor.h) calls it and knows nothing else about
// data parallelism, in the spirit of c10d's communication hooks and
// DeepSpeed's ReduceGrads instruction:
//
//   before each backward   begin_backward(last): whether this backward is
//                          the last one of the step for its model chunk (a
//                          backend that overlaps communication with
//                          backward starts it only then; ZeRO stage 2
//                          reduces after every backward)
//   kReduceGrads           finish(): on return the gradients hold the
//                          global-batch gradient wherever the optimizer
//                          reads them
//
// Implementations: DistributedDataParallel (MPI ranks, bucketed all-reduce
// overlapped with backward, parallel/ddp.h), ThreadsGradSync (replicas on
// the threads of one process, reduced to replica 0,
// parallel/threads_grad_sync.h). ZeRO stages 1 and 2 are modes of
// DistributedDataParallel.
#pragma once

namespace ndt {

class GradSync {
 public:
  virtual ~GradSync() = default;
  virtual void begin_backward(bool last) = 0;
  virtual void finish() = 0;
};

}  // namespace ndt
