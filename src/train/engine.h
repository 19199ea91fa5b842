// Engine: one configured layout of a run — the model replica(s), the
// optimizer, the data slice, and the data-parallel machinery — exposing
// one training step and evaluation. run_training() (trainer.h) drives it
// for a whole run; `ndtrain verify` drives a layout and the serial engine
// side by side.
//
// The layout lives on a Mesh whose axes are those of mesh_axes(config)
// (parallel/tensor_parallel_mode.h): dp, pp and the tensor-parallel mode's
// axes, every one present (size 1 where unused). The tensor-parallel mode
// builds the model, so each rank holds its shards; with pp > 1 this rank
// keeps the chunks of its pipeline rank (stage partition by
// parallel.pp_split or balanced by parameters, pipeline/partition.h).
//
// One step interpreter: every step is this rank's instruction list run by
// a PipelineExecutor: the configured pipeline schedule when pp > 1, else
// the one-stage schedule over the replica's micro-batches (gradient
// accumulation; one micro-batch is the plain serial step). Gradients are
// reduced across replicas by a GradSync: DDP over the mesh's dp group
// (parallel.dp_mode=mpi), or the threads of one process
// (parallel.dp_mode=threads: parallel.dp replicas, one executor each,
// replica 0 steps the optimizer and its parameters are broadcast to the
// others before the next step). Step s always consumes global samples
// [s*B, (s+1)*B). A tensor-parallel mode that splits samples (2d: the grid
// rows) gives each rank its rows of every micro-batch and evaluation batch
// (TensorParallelMode::sample_rows, applied by the executor); the loss and
// evaluation statistics are then summed over the mode's sample axes too.
// With sequence parallelism (parallel.sp > 1) the sp
// ranks of a replica share its samples by token (the GPT's token ids and
// targets are cut here, sequence_parallel.h), DDP runs over the dp x sp
// group and the loss is summed over sp too.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "comm/mesh.h"
#include "io/config.h"
#include "nn/builder.h"
#include "nn/model.h"
#include "nn/seq_split.h"
#include "optim/layer_norms.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "parallel/ddp.h"
#include "parallel/pipeline/executor.h"
#include "parallel/pipeline/schedules.h"
#include "parallel/pipeline/tracer.h"
#include "parallel/tensor_parallel_mode.h"
#include "train/data_source.h"

namespace ndt {

struct StepResult {
  double loss = 0;  // mean over the global batch
  float lr = 0;
  double grad_norm = 0;  // before clipping
  // Seconds in the optimizer step: clipping's norm and the update (not
  // ZeRO's broadcast of the updated values).
  double update_s = 0;
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
  // mesh: the job's mesh, with the axes of mesh_axes(config) and their
  // sizes (throws ConfigError naming the rank count otherwise). The mesh
  // and data must outlive the engine.
  Engine(const Config& config, DataSource& data, Mesh& mesh);
  ~Engine();

  StepResult step(int64_t step);
  // Called in every step() once the gradients of model() are final
  // (accumulated over micro-batches and reduced over data-parallel ranks;
  // under ZeRO only those of optimizer().parameters(), which this
  // rank updates), before clipping and the optimizer touch them.
  std::function<void()> on_grads_ready;
  // Evaluates on the configured evaluation set (each data-parallel rank a
  // slice, results reduced), in batches of the training micro-batch
  // (micro_batch_size), so that an evaluation holds no more activations
  // than a training step's forward.
  EvalResult evaluate(int64_t step);

  // The tensor-parallel mode (NoTensorParallel at tp = 1).
  const TensorParallelMode& tensor_parallel_mode() const {
    return *mode_;
  }
  // Replica 0's model (on a pipeline rank: only its chunks) and the
  // optimizer that updates it. model() first waits for the broadcasts of
  // updated values still in flight (ZeRO stages 1 and 2 with
  // parallel.defer_broadcast), so that the values read are current.
  Model& model();
  Mesh& mesh() {
    return mesh_;
  }
  // Every parameter of the model in serial order, with its holder.
  const std::vector<ParamInfo>& all_parameters() const {
    return all_params_;
  }
  // Mesh axes over which this rank's block of `p` is a replica: every axis
  // but those that shard it and the pipeline axis (whose ranks hold
  // different parameters).
  std::vector<std::string> replica_axes(const Parameter& p) const;
  // The mesh axes (with more than one rank) over which the data-parallel
  // gradient sync sums: dp, the mode's replica axes and sp.
  const std::vector<std::string>& grad_axes() const {
    return grad_axes_;
  }
  // Blocks per virtual pipeline stage (empty without a pipeline).
  const std::vector<int>& stage_blocks() const {
    return stage_blocks_;
  }
  const PipelineExecutor& executor() const {
    return *executors_[0];
  }
  Tracer& tracer() {
    return tracer_;
  }
  Optimizer& optimizer() {
    return *opt_;
  }
  // The learning-rate schedule, optim.scale_lr and optim.warmup_epochs
  // resolved.
  const LrScheduleOptions& lr_schedule() const {
    return schedule_;
  }
  // Data-parallel statistics (null unless DDP runs over more than one
  // rank).
  const DistributedDataParallel* ddp() const {
    return ddp_.get();
  }
  DistributedDataParallel* ddp() {
    return ddp_.get();
  }

 private:
  std::vector<bool> partition_pipeline(const Model& described);
  void optimizer_step();
  // This rank's share [first, end) of the evaluation set.
  std::pair<int64_t, int64_t> eval_range() const;
  // Sums loss statistics (loss, count, ...) in place over the ranks that
  // hold other parts of the step: pipeline stages (only the last has the
  // loss), data-parallel replicas, the tensor-parallel mode's sample axes
  // and the sequence-parallel ranks.
  void sum_loss_stats(double* v, int64_t n);
  // Sums over the mesh axes that shard a parameter.
  void axis_sum(const std::vector<std::string>& axes, double* v, int64_t n);
  // Sequence parallelism: my tokens of a batch of token ids or targets
  // (the GPT's; others pass through).
  Tensor my_tokens(const Tensor& t) const;

  Config config_;
  DataSource& data_;
  Mesh& mesh_;
  std::unique_ptr<TensorParallelMode> mode_;
  std::unique_ptr<Builder> builder_;
  std::vector<std::unique_ptr<Model>> replicas_;  // 1, or dp in threads mode
  std::unique_ptr<Optimizer> opt_;
  std::vector<double> grad_squares_;  // optimizer_step's, reused
  std::unique_ptr<DistributedDataParallel> ddp_;
  LrScheduleOptions schedule_;
  AxisSumFn sum_axes_;                   // null when no parameter is sharded
  std::vector<std::string> grad_axes_;   // see grad_axes()
  bool threads_ = false;                 // parallel.dp_mode=threads with dp > 1
  int dp_ = 1;                           // replicas in the layout
  int sp_ = 1;                           // sequence-parallel ranks per replica
  std::unique_ptr<SeqShard> sp_tokens_;  // GPT with sp > 1: my tokens
  int rank_ = 0;  // this process's data-parallel rank (mpi mode)
  std::vector<ParamInfo> all_params_;
  std::vector<int> stage_blocks_;
  std::vector<ModuleRange> chunks_;  // this rank's module ranges
  Schedule pipe_;                    // the step's instruction lists
  Tracer tracer_;
  Tracer untraced_;  // for threads-mode replicas other than 0
  std::vector<std::unique_ptr<PipelineExecutor>> executors_;  // per replica
  int64_t step_ = 0;  // step being run (for the optimizer callback)
  StepResult result_;
  Tensor input_;  // this process's samples of one step
  Tensor targets_;
};

}  // namespace ndt
