#include "train/engine.h"

#include <algorithm>

#include "base/check.h"
#include "comm/local_process_group.h"
#include "optim/grad_norm.h"
#include "train/factory.h"

namespace ndt {
namespace {

// Rows [first, first + n) of a batch tensor (dim 0), sharing storage.
Tensor rows(const Tensor& t, int64_t first, int64_t n) {
  int64_t per = t.numel() / t.dim(0);
  Shape s = t.shape();
  s[0] = n;
  return t.slice(first * per, s);
}

}  // namespace

Engine::Engine(const Config& config, DataSource& data, ProcessGroup* group)
    : config_(config), data_(data), group_(group) {
  const ParallelConfig& p = config.parallel;
  dp_ = p.dp;
  const bool threads = p.dp_mode == DpMode::kThreads && dp_ > 1;
  if (!threads && dp_ > 1) {
    NDT_CHECK(
        group != nullptr && group->size() == dp_,
        ConfigError,
        "parallel.dp=",
        dp_,
        " with parallel.dp_mode=mpi needs ",
        dp_,
        " MPI ranks (mpirun -np ",
        dp_,
        "), this job has ",
        group ? group->size() : 1);
    rank_ = group->rank();
  }
  const int n_replicas = threads ? dp_ : 1;
  for (int r = 0; r < n_replicas; ++r) {
    replicas_.push_back(make_model(config.model, builder_));
    replicas_.back()->init(config.train.seed);
  }
  contexts_.resize(n_replicas);
  opt_ = make_optimizer(config.optim, replicas_[0]->parameters());
  schedule_ = make_lr_schedule(config);
  if (!threads && dp_ > 1) {
    ddp_ = std::make_unique<DistributedDataParallel>(
        *replicas_[0], *group, static_cast<int64_t>(p.bucket_mb * (1 << 20)));
    ddp_->check_replicas_identical();
  }
  const int64_t local = config.train.batch_size / (threads ? 1 : dp_);
  input_ = data.make_input(local);
  targets_ = data.make_targets(local);
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
  const float scale = 1.0f / float(B * model.loss_terms_per_sample);
  model.zero_grad();
  for (int k = 0; k < K; ++k) {
    ctx.run.training = true;
    ctx.run.seed = config_.train.seed;
    ctx.run.step = step;
    ctx.run.sample_offset = rank * local + k * mb;
    if (ddp_)
      ddp_->set_sync(k == K - 1);
    model.forward_backward(
        rows(input, k * mb, mb), rows(targets, k * mb, mb), ctx, scale, stats);
  }
  if (ddp_)
    ddp_->finish();
}

StepResult Engine::step(int64_t step) {
  const int64_t B = config_.train.batch_size;
  const int64_t local = B / dp_;
  LossStats stats;
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
          rows(input_, r * local, local),
          rows(targets_, r * local, local),
          per[r]);
      for (Parameter* p : params) {
        pg.reduce(
            p->grad.data(),
            r == 0 ? p->grad.data() : nullptr,
            p->grad.numel(),
            0);
      }
    });
    for (const LossStats& s : per) {
      stats.loss_sum += s.loss_sum;
      stats.count += s.count;
    }
  }
  StepResult res;
  res.loss = stats.loss_sum / double(stats.count);
  res.grad_norm =
      clip_grad_norm(replicas_[0]->parameters(), config_.optim.clip_grad_norm);
  res.lr = lr_at(schedule_, step);
  opt_->step(res.lr);
  return res;
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
    model.forward_eval(input, targets, ctx, stats);
  }
  if (shared) {
    double v[3] = {stats.loss_sum, double(stats.count), double(stats.correct)};
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
