// PipelineExecutor: the one interpreter of pipeline instruction lists
// (instr.h). run() walks this rank's list with a switch over Op; it has no
// model-specific branches: a chunk is a contiguous module range of the
// Model (Model::forward_range / backward_range).
//
// State per (micro-batch, chunk): a Context (so several micro-batches are
// in flight), the received input activation, the output to send, the
// received output gradient and the input gradient to send. A context is
// cleared right after its backward, so the live activations are those of
// the in-flight pairs, which is what the schedule's max_in_flight bounds.
// Sends are asynchronous: a send's buffer stays alive until its wait
// instruction (kWaitSendAct / kWaitSendGrad, placed where the matching
// receive has completed: send_waits.h) or, without one, kOptimizerStep, so
// the live buffers are the same in every run (between instructions the
// executor advances them: Note [MPI progress]); a receive is posted when
// its instruction comes and waited for by the same instruction. A receive or
// send that fails or outlives the watchdog throws CommError naming the stage
// and instruction.
//
// It is also the step of every layout without a pipeline: one stage (a
// group of one rank) running the naive schedule over M micro-batches is
// gradient accumulation, M = 1 the plain serial step.
//
// Data parallelism composes through a GradSync (parallel/grad_sync.h):
// told before each backward whether it is its chunk's last of the step
// (DDP launches its buckets then), and finished at kReduceGrads.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "nn/model.h"
#include "parallel/grad_sync.h"
#include "parallel/pipeline/partition.h"
#include "parallel/pipeline/schedules.h"
#include "parallel/pipeline/tracer.h"
#include "parallel/sample_rows.h"

namespace ndt {

// One step's inputs on this rank: the rows of every micro-batch (input
// rows used by virtual stage 0, target rows by the last), and the values
// that key dropout. Of each micro-batch, the executor hands the model the
// rows of sample_rows (all of them unless the tensor-parallel mode splits
// samples).
struct PipelineBatch {
  Tensor input;    // [M * mbs, ...] this replica's samples of the step
  Tensor targets;  // [M * mbs, ...]
  uint64_t seed = 0;
  int64_t step = 0;
  int64_t sample_offset = 0;  // global index of input row 0
  float loss_scale = 1;       // 1 / global loss terms of the step
};

// Timing of the last run(): compute time and the span from entry to the
// last compute instruction, for bubble measurements.
struct PipelineTiming {
  double start = 0;  // tracer time at entry to run()
  double end = 0;    // tracer time when the last forward/backward ended
  double busy = 0;   // seconds inside forward/backward
};

class PipelineExecutor {
 public:
  // chunks[c]: the module range of local chunk c. group: the pipeline
  // group (rank = pipeline rank). local_activation: this rank's block of an
  // activation between stages given its global shape (one micro-batch),
  // from the tensor-parallel mode; null: the whole activation. sample_rows:
  // this rank's samples of a micro-batch (or evaluation batch) of n, from
  // the tensor-parallel mode; null: all n. grad_sync may be null (no data
  // parallelism across ranks). optimizer_step runs at kOptimizerStep. The
  // model, group, grad_sync and tracer must outlive it.
  PipelineExecutor(
      Model& model,
      ProcessGroup& group,
      std::vector<ModuleRange> chunks,
      int virtual_stages,
      std::function<Shape(const Shape&)> local_activation,
      std::function<SampleRows(int64_t)> sample_rows,
      GradSync* grad_sync,
      bool recompute,
      Tracer& tracer,
      std::function<void()> optimizer_step);

  // Runs `instrs` (this rank's list of a schedule with `microbatches`
  // micro-batches) on `batch`; the loss terms computed here (last virtual
  // stage only) are added to stats.
  void run(
      const std::vector<Instr>& instrs,
      int microbatches,
      const PipelineBatch& batch,
      LossStats& stats);

  // Forward only through every stage (evaluation, one batch of n rows).
  // Every pipeline rank calls it with the same n.
  void forward_eval(
      const Tensor& input,
      const Tensor& targets,
      uint64_t seed,
      int64_t step,
      LossStats& stats);

  // Replaces the GradSync (e.g. one per step on the threads of run_local).
  void set_grad_sync(GradSync* grad_sync) {
    grad_sync_ = grad_sync;
  }

  const PipelineTiming& timing() const {
    return timing_;
  }

 private:
  struct Slot {  // one (micro-batch, chunk)
    Context ctx;
    Tensor act_in;    // received input activation
    Tensor act_out;   // output activation to send
    Tensor grad_out;  // received gradient of the output
    Tensor grad_in;   // gradient of the input to send
    std::unique_ptr<Work> recv;
  };
  struct PendingSend {
    Tensor buffer;  // keeps the data alive until the send completes
    std::unique_ptr<Work> work;
    Instr instr;
    int index;
  };

  void execute(const Instr& in, int index);
  int virtual_stage(int chunk) const;
  Shape act_shape(int chunk, bool output) const;
  Slot& slot(const Instr& in);
  void post_send(const Instr& in, int index, const Tensor& t, int tag);
  void post_recv(const Instr& in, int index, Tensor& dst, Shape shape, int tag);
  void wait_recv(Slot& s, const Instr& in, int index);
  void wait_send(const Instr& in);
  void wait_sends();
  // "pipeline stage S of P, instruction I 'RG3<1' (recv_grad)", or with
  // one stage "step N, instruction I 'F0' (forward)".
  std::string label(const Instr& in, int index) const;
  [[noreturn]] void fail(const Instr& in, int index, const char* what) const;

  Model& model_;
  ProcessGroup& group_;
  std::vector<ModuleRange> chunks_;
  int virtual_stages_;
  std::function<Shape(const Shape&)> local_activation_;
  std::function<SampleRows(int64_t)> sample_rows_;
  GradSync* grad_sync_;
  bool recompute_;
  Tracer& tracer_;
  std::function<void()> optimizer_step_;

  // Per run():
  const PipelineBatch* batch_ = nullptr;
  LossStats* stats_ = nullptr;
  int64_t mbs_ = 0;                       // rows per micro-batch
  SampleRows mine_;                       // my rows of each micro-batch
  std::vector<std::vector<Slot>> slots_;  // [mb][chunk]
  std::vector<Tensor> mb_input_;          // per mb, after kLoadMicroBatch
  std::vector<Tensor> mb_targets_;
  std::vector<int> last_backward_mb_;  // per chunk: its last backward
  std::vector<PendingSend> sends_;
  PipelineTiming timing_;
};

}  // namespace ndt
