// Engine: one configured layout of a run — the model replica(s), the
// optimizer, the data slice, and the data-parallel machinery — exposing
// one training step and evaluation. run_training() (trainer.h) drives it
// for a whole run; `ndtrain verify` drives a layout and the serial engine
// side by side.
//
// Layouts: serial (no group, dp = 1); distributed data parallel over an
// MPI group (parallel.dp = group size, one replica per rank, bucketed
// all-reduce overlapped with backward); single-process data parallel
// (parallel.dp_mode=threads: parallel.dp replicas on as many threads,
// gradients reduced to replica 0, one optimizer step, parameters broadcast
// back). Every layout may accumulate gradients over parallel.grad_accum
// micro-batches. Step s always consumes global samples [s*B, (s+1)*B).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/process_group.h"
#include "io/config.h"
#include "nn/builder.h"
#include "nn/model.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "parallel/ddp.h"
#include "train/data_source.h"

namespace ndt {

struct StepResult {
  double loss = 0;  // mean over the global batch
  float lr = 0;
  double grad_norm = 0;  // before clipping
};

struct EvalResult {
  double loss = 0;
  double accuracy = 0;
  int64_t samples = 0;
};

class Engine {
 public:
  // `dp_group`: the data-parallel group when parallel.dp_mode=mpi and
  // parallel.dp > 1 (its size must equal parallel.dp), else null.
  Engine(const Config& config, DataSource& data, ProcessGroup* dp_group);
  ~Engine();

  StepResult step(int64_t step);
  // Evaluates on the configured evaluation set (each data-parallel rank a
  // slice, results reduced).
  EvalResult evaluate(int64_t step);

  // Replica 0's model and the optimizer that updates it.
  Model& model() {
    return *replicas_[0];
  }
  Optimizer& optimizer() {
    return *opt_;
  }
  // Data-parallel statistics (zero when serial).
  const DistributedDataParallel* ddp() const {
    return ddp_.get();
  }

 private:
  void step_replica(
      Model& model,
      Context& ctx,
      int64_t step,
      int rank,
      const Tensor& input,
      const Tensor& targets,
      LossStats& stats);

  Config config_;
  DataSource& data_;
  ProcessGroup* group_;
  SerialBuilder builder_;
  std::vector<std::unique_ptr<Model>> replicas_;  // 1, or dp in threads mode
  std::vector<Context> contexts_;
  std::unique_ptr<Optimizer> opt_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  LrScheduleOptions schedule_;
  int dp_ = 1;    // replicas in the layout
  int rank_ = 0;  // this process's data-parallel rank (mpi mode)
  Tensor input_;  // this process's samples of one step
  Tensor targets_;
};

}  // namespace ndt
