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
// micro-batches. Pipeline (parallel.pp = P > 1): this rank holds the
// chunks of its pipeline rank (stage partition by parallel.pp_split or
// balanced by parameters, pipeline/partition.h) and a PipelineExecutor
// runs its instruction list of the configured schedule over
// parallel.microbatches micro-batches; composes with dp over MPI. Tensor
// parallel (parallel.tp > 1): the model is built by Tp1dBuilder over the tp
// group, so each rank holds its shards. World = dp x pp x tp. Step s
// always consumes global samples [s*B, (s+1)*B).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "comm/process_group.h"
#include "io/config.h"
#include "nn/builder.h"
#include "nn/model.h"
#include "optim/layer_norms.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "parallel/ddp.h"
#include "parallel/pipeline/executor.h"
#include "parallel/pipeline/schedules.h"
#include "parallel/pipeline/tracer.h"
#include "train/data_source.h"
#include "train/groups.h"

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

// A parameter of the whole model, whichever pipeline rank holds it.
struct ParamInfo {
  std::string name;
  Shape shape;      // global
  int pp_rank = 0;  // holder
};

class Engine {
 public:
  // Group sizes must equal parallel.dp and parallel.pp.
  Engine(const Config& config, DataSource& data, Groups groups);
  ~Engine();

  StepResult step(int64_t step);
  // Called in every step() once the gradients of model() are final
  // (accumulated over micro-batches and reduced over data-parallel ranks),
  // before clipping and the optimizer touch them.
  std::function<void()> on_grads_ready;
  // Evaluates on the configured evaluation set (each data-parallel rank a
  // slice, results reduced).
  EvalResult evaluate(int64_t step);

  // Replica 0's model (on a pipeline rank: only its chunks) and the
  // optimizer that updates it.
  Model& model() {
    return *replicas_[0];
  }
  const Groups& groups() const {
    return groups_;
  }
  // Every parameter of the model in serial order, with its holder.
  const std::vector<ParamInfo>& all_parameters() const {
    return all_params_;
  }
  // Blocks per virtual pipeline stage (empty without a pipeline).
  const std::vector<int>& stage_blocks() const {
    return stage_blocks_;
  }
  const PipelineExecutor* pipeline() const {
    return executor_.get();
  }
  Tracer& tracer() {
    return tracer_;
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

  void partition_pipeline();
  void optimizer_step();
  // Sums over the mesh axes that shard a parameter (tensor parallel).
  void axis_sum(const std::vector<std::string>& axes, double* v, int64_t n);
  AxisSumFn sum_axes_;  // axis_sum when tensor parallel, else null

  Config config_;
  DataSource& data_;
  Groups groups_;
  ProcessGroup* group_;               // groups_.dp
  std::unique_ptr<Builder> builder_;  // serial, or the tensor-parallel one
  std::vector<std::unique_ptr<Model>> replicas_;  // 1, or dp in threads mode
  std::vector<Context> contexts_;
  std::unique_ptr<Optimizer> opt_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  LrScheduleOptions schedule_;
  int dp_ = 1;    // replicas in the layout
  int rank_ = 0;  // this process's data-parallel rank (mpi mode)
  std::vector<ParamInfo> all_params_;
  // Pipeline:
  std::vector<int> stage_blocks_;
  Schedule pipe_;
  std::unique_ptr<PipelineExecutor> executor_;
  Tracer tracer_;
  int64_t step_ = 0;  // step being run (for the optimizer callback)
  StepResult result_;
  Tensor input_;  // this process's samples of one step
  Tensor targets_;
};

}  // namespace ndt
