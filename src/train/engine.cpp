#include "train/engine.h"

#include <algorithm>
#include <map>

#include "base/activity.h"
#include "base/check.h"
#include "base/fault.h"
#include "comm/local_process_group.h"
#include "ops/ops.h"
#include "optim/grad_norm.h"
#include "parallel/pipeline/partition.h"
#include "parallel/tp1d_builder.h"
#include "train/factory.h"

namespace ndt {
namespace {

// train.trace keeps kTraceSteps steps, from step 1 (step 0 pays for
// first-touch allocations) when the run has more than one.
constexpr int64_t kTraceSteps = 10;

int64_t numel_of(const std::vector<Parameter*>& ps) {
  int64_t n = 0;
  for (Parameter* p : ps)
    n += p->value.numel();
  return n;
}

ScheduleKind schedule_kind(PipeSchedule s) {
  switch (s) {
    case PipeSchedule::kNaive:
      return ScheduleKind::kNaive;
    case PipeSchedule::kGpipe:
      return ScheduleKind::kGpipe;
    case PipeSchedule::kOneFOneB:
      return ScheduleKind::kOneFOneB;
    case PipeSchedule::kInterleaved:
      return ScheduleKind::kInterleaved;
  }
  NDT_ASSERT(false, "invalid PipeSchedule ", static_cast<int>(s));
  return ScheduleKind::kOneFOneB;
}

}  // namespace

Engine::Engine(const Config& config, DataSource& data, Groups groups)
    : config_(config),
      data_(data),
      groups_(groups),
      group_(groups.dp),
      tracer_(
          config.train.steps > 1 ? 1 : 0,
          config.train.trace ? kTraceSteps : 0) {
  const ParallelConfig& p = config.parallel;
  dp_ = p.dp;
  const bool threads = p.dp_mode == DpMode::kThreads && dp_ > 1;
  if (!threads && dp_ > 1) {
    NDT_CHECK(
        group_ != nullptr && group_->size() == dp_,
        ConfigError,
        "parallel.dp=",
        dp_,
        " with parallel.dp_mode=mpi needs ",
        dp_,
        " MPI ranks (mpirun -np ",
        dp_ * p.pp,
        "), this job has ",
        group_ ? group_->size() : 1,
        " data-parallel ranks");
    rank_ = group_->rank();
  }
  if (p.pp > 1) {
    NDT_CHECK(
        groups.pp != nullptr && groups.pp->size() == p.pp,
        ConfigError,
        "parallel.pp=",
        p.pp,
        " needs parallel.dp x parallel.pp = ",
        dp_ * p.pp,
        " MPI ranks (mpirun -np ",
        dp_ * p.pp,
        ")");
  }
  if (p.tp > 1) {
    NDT_CHECK(
        groups.tp != nullptr && groups.tp->size() == p.tp,
        ConfigError,
        "parallel.tp=",
        p.tp,
        " needs parallel.dp x parallel.pp x parallel.tp = ",
        dp_ * p.pp * p.tp,
        " MPI ranks (mpirun -np ",
        dp_ * p.pp * p.tp,
        ")");
    builder_ = std::make_unique<Tp1dBuilder>(
        *groups.tp, p.tp_seq, model_tokens(config.model));
  } else {
    builder_ = std::make_unique<SerialBuilder>();
  }
  const int n_replicas = threads ? dp_ : 1;
  for (int r = 0; r < n_replicas; ++r) {
    replicas_.push_back(make_model(config.model, *builder_));
    replicas_.back()->init(config.train.seed);
  }
  if (NDT_FAULT(kParamRenamed) && (dp_ > 1 || p.pp > 1 || p.tp > 1))
    replicas_[0]->parameters().back()->name += ".renamed";
  for (Parameter* q : replicas_[0]->parameters())
    all_params_.push_back({q->name, q->layout.global_shape, 0});
  if (p.pp > 1)
    partition_pipeline();
  contexts_.resize(n_replicas);
  if (groups_.tp != nullptr) {
    sum_axes_ =
        [this](const std::vector<std::string>& axes, double* v, int64_t n) {
          axis_sum(axes, v, n);
        };
  }
  opt_ = make_optimizer(config.optim, replicas_[0]->parameters(), sum_axes_);
  schedule_ = make_lr_schedule(config);
  if (!threads && dp_ > 1) {
    ddp_ = std::make_unique<DistributedDataParallel>(
        *replicas_[0], *group_, static_cast<int64_t>(p.bucket_mb * (1 << 20)));
    ddp_->check_replicas_identical();
  }
  if (p.pp > 1) {
    executor_ = std::make_unique<PipelineExecutor>(
        *replicas_[0],
        *groups_.pp,
        chunk_modules(stage_blocks_, p.pp, groups_.pp->rank()),
        p.pp * p.pp_chunks,
        p.tp_seq ? p.tp : 1,
        ddp_.get(),
        p.recompute == Recompute::kBlock,
        tracer_,
        [this] { optimizer_step(); });
  }
  const int64_t local = config.train.batch_size / (threads ? 1 : dp_);
  input_ = data.make_input(local);
  targets_ = data.make_targets(local);
}

// Cuts the model into P x V virtual stages, records which pipeline rank
// holds each parameter and drops the modules this rank does not hold.
void Engine::partition_pipeline() {
  const ParallelConfig& p = config_.parallel;
  Model& model = *replicas_[0];
  const int P = p.pp, V = p.pp_chunks;
  if (!p.pp_split.empty()) {
    stage_blocks_ = p.pp_split;
  } else {
    std::vector<int64_t> cost;
    for (size_t i = 0; i < model.blocks.size(); ++i)
      cost.push_back(numel_of(model.module_parameters(1 + int(i))));
    stage_blocks_ = partition_blocks(
        cost,
        P * V,
        numel_of(model.module_parameters(0)),
        numel_of(model.module_parameters(model.num_modules() - 1)));
  }
  std::map<std::string, ParamInfo*> by_name;
  for (ParamInfo& info : all_params_)
    by_name[info.name] = &info;
  std::vector<bool> keep(model.num_modules(), false);
  for (int q = 0; q < P; ++q) {
    for (const ModuleRange& c : chunk_modules(stage_blocks_, P, q)) {
      for (int m = c.first; m <= c.last; ++m) {
        for (Parameter* x : model.module_parameters(m))
          by_name.at(x->name)->pp_rank = q;
        if (q == groups_.pp->rank())
          keep[m] = true;
      }
    }
  }
  model.keep_modules(keep);
  pipe_ = make_schedule(schedule_kind(p.schedule), P, p.microbatches, V);
}

Engine::~Engine() = default;

// Forward and backward of this replica's grad_accum micro-batches; `input`
// holds this replica's samples of the step (rows of the global batch
// starting at rank * B / dp).
void Engine::step_replica(
    Model& model,
    Context& ctx,
    int64_t step,
    int rank,
    const Tensor& input,
    const Tensor& targets,
    LossStats& stats) {
  const int64_t B = config_.train.batch_size;
  const int K = config_.parallel.grad_accum;
  const int64_t local = B / dp_, mb = local / K;
  float scale = 1.0f / float(B * model.loss_terms_per_sample);
  if (NDT_FAULT(kAccumScale))
    scale /= float(K);
  model.zero_grad();
  for (int k = 0; k < K; ++k) {
    ctx.run.training = true;
    ctx.run.seed = config_.train.seed;
    ctx.run.step = step;
    ctx.run.sample_offset = rank * local + k * mb;
    if (ddp_)
      ddp_->set_sync(k == K - 1);
    const int head = model.num_modules() - 1;
    if (rank == rank_)
      set_activity(
          "step " + std::to_string(step) + ", micro-batch " +
          std::to_string(k) + ": forward and backward");
    const double t0 = tracer_.now();
    model.forward_range(
        0, head, input.rows(k * mb, mb), targets.rows(k * mb, mb), ctx, stats);
    const double t1 = tracer_.now();
    model.backward_range(0, head, Tensor(), ctx, scale);
    if (rank == 0 || replicas_.size() == 1) {  // one thread records
      tracer_.add({Op::kForward, k, 0, -1, step, t0, t1});
      tracer_.add({Op::kBackward, k, 0, -1, step, t1, tracer_.now()});
    }
  }
  if (ddp_) {
    set_activity(
        "step " + std::to_string(step) +
        ": data-parallel gradient all-reduce (group dp)");
    const double t0 = tracer_.now();
    ddp_->finish();
    tracer_.add({Op::kReduceGrads, -1, -1, -1, step, t0, tracer_.now()});
  }
}

void Engine::axis_sum(
    const std::vector<std::string>& axes, double* v, int64_t n) {
  // Parameters are sharded on the tensor-parallel axis only.
  NDT_ASSERT(
      axes.size() == 1 && axes[0] == "tp" && groups_.tp != nullptr,
      "sum over unexpected mesh axes");
  groups_.tp->all_reduce(v, n);
}

// Clipping (global norm of the logical gradients: tensor-parallel shards
// summed over tp, each pipeline rank's parameters once) and the optimizer
// step; sets result_'s lr and grad_norm.
void Engine::optimizer_step() {
  const double t0 = tracer_.now();
  if (on_grads_ready)
    on_grads_ready();
  std::function<void(double&)> sum_stages;
  if (groups_.pp != nullptr) {
    sum_stages = [this](double& sq) { groups_.pp->all_reduce(&sq, 1); };
  }
  result_.grad_norm = clip_grad_norm(
      replicas_[0]->parameters(),
      config_.optim.clip_grad_norm,
      sum_axes_,
      sum_stages);
  result_.lr = lr_at(schedule_, step_);
  opt_->step(result_.lr);
  if (!executor_)  // the executor records its kOptimizerStep instruction
    tracer_.add({Op::kOptimizerStep, -1, -1, -1, step_, t0, tracer_.now()});
}

StepResult Engine::step(int64_t step) {
  const int64_t B = config_.train.batch_size;
  const int64_t local = B / dp_;
  LossStats stats;
  step_ = step;
  result_ = StepResult();
  if (executor_) {
    data_.train_batch(step * B + rank_ * local, local, input_, targets_);
    PipelineBatch batch;
    batch.input = input_;
    batch.targets = targets_;
    batch.seed = config_.train.seed;
    batch.step = step;
    batch.sample_offset = rank_ * local;
    batch.loss_scale = 1.0f / float(B * replicas_[0]->loss_terms_per_sample);
    if (NDT_FAULT(kAccumScale))
      batch.loss_scale /= float(config_.parallel.microbatches);
    replicas_[0]->zero_grad();
    executor_->run(
        pipe_.instrs.at(groups_.pp->rank()),
        config_.parallel.microbatches,
        batch,
        stats);
    // The loss lives on the last stage of each pipeline.
    double v[2] = {stats.loss_sum, double(stats.count)};
    try {
      groups_.pp->all_reduce(v, 2);
      if (group_ != nullptr)
        group_->all_reduce(v, 2);
    } catch (const CommError& e) {
      throw CommError(
          "step " + std::to_string(step) + ", loss reduction after the " +
          "pipeline schedule: " + e.what());
    }
    result_.loss = v[0] / v[1];
    return result_;
  }
  if (replicas_.size() == 1) {
    data_.train_batch(
        step * B + rank_ * local, input_.dim(0), input_, targets_);
    step_replica(
        *replicas_[0], contexts_[0], step, rank_, input_, targets_, stats);
    if (group_ != nullptr && dp_ > 1) {
      double v[2] = {stats.loss_sum, double(stats.count)};
      group_->all_reduce(v, 2);
      stats.loss_sum = v[0];
      stats.count = static_cast<int64_t>(v[1]);
    }
  } else {
    // Single-process data parallel: the whole global batch, one slice per
    // replica thread.
    data_.train_batch(step * B, B, input_, targets_);
    std::vector<LossStats> per(replicas_.size());
    run_local(dp_, [&](ProcessGroup& pg) {
      const int r = pg.rank();
      Model& m = *replicas_[r];
      auto params = m.parameters();
      // Parameters from replica 0 (updated by the last step).
      for (Parameter* p : params) {
        pg.broadcast(p->value.data(), p->value.numel(), 0);
      }
      step_replica(
          m,
          contexts_[r],
          step,
          r,
          input_.rows(r * local, local),
          targets_.rows(r * local, local),
          per[r]);
      for (Parameter* p : params) {
        if (NDT_FAULT(kDpGradScale) && r == 1)
          ops::scale_(p->grad, 1.5f);
        pg.reduce(
            p->grad.data(),
            r == 0 ? p->grad.data() : nullptr,
            p->grad.numel(),
            0);
        if (NDT_FAULT(kDpMeanNotSum) && r == 0)
          ops::scale_(p->grad, 1.0f / float(dp_));
      }
    });
    for (const LossStats& s : per) {
      stats.loss_sum += s.loss_sum;
      stats.count += s.count;
    }
  }
  optimizer_step();
  result_.loss = stats.loss_sum / double(stats.count);
  return result_;
}

EvalResult Engine::evaluate(int64_t step) {
  int64_t total = data_.eval_size();
  if (config_.train.eval_samples > 0) {
    total = std::min(total, config_.train.eval_samples);
  }
  // MPI data parallel: each rank a contiguous share, stats reduced.
  int64_t first = 0, end = total;
  const bool shared = ddp_ != nullptr;
  if (shared) {
    first = total * rank_ / dp_;
    end = total * (rank_ + 1) / dp_;
  }
  const int64_t B = config_.train.batch_size;
  Model& model = *replicas_[0];
  LossStats stats;
  Context ctx;
  ctx.run.seed = config_.train.seed;
  ctx.run.step = step;
  for (int64_t i = first; i < end; i += B) {
    int64_t n = std::min(B, end - i);
    Tensor input = data_.make_input(n);
    Tensor targets = data_.make_targets(n);
    data_.eval_batch(i, n, input, targets);
    if (executor_) {
      executor_->forward_eval(input, targets, config_.train.seed, step, stats);
    } else {
      model.forward_eval(input, targets, ctx, stats);
    }
  }
  if (shared || executor_) {
    double v[3] = {stats.loss_sum, double(stats.count), double(stats.correct)};
    if (executor_)
      groups_.pp->all_reduce(v, 3);  // the loss lives on the last stage
    if (shared)
      group_->all_reduce(v, 3);
    stats.loss_sum = v[0];
    stats.count = static_cast<int64_t>(v[1]);
    stats.correct = static_cast<int64_t>(v[2]);
  }
  EvalResult r;
  r.loss = stats.loss_sum / std::max<int64_t>(stats.count, 1);
  r.accuracy = double(stats.correct) / std::max<int64_t>(stats.count, 1);
  r.samples = total;
  return r;
}

}  // namespace ndt
