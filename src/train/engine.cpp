#include "train/engine.h"

#include <algorithm>
#include <map>

#include "base/check.h"
#include "base/fault.h"
#include "comm/local_process_group.h"
#include "ops/ops.h"
#include "optim/grad_norm.h"
#include "parallel/pipeline/partition.h"
#include "parallel/sequence_parallel.h"
#include "parallel/threads_grad_sync.h"
#include "train/factory.h"

namespace ndt {
namespace {

// train.trace keeps kTraceSteps steps, from step 1 (step 0 pays for
// first-touch allocations) when the run has more than one.
constexpr int64_t kTraceSteps = 10;

int64_t numel_of(const std::vector<ParamDesc>& ps) {
  int64_t n = 0;
  for (const ParamDesc& p : ps)
    n += p.numel;
  return n;
}

std::string axes_text(const std::vector<MeshAxis>& axes) {
  std::string s;
  for (const MeshAxis& a : axes)
    s += (s.empty() ? "" : " x ") + a.name + "=" + std::to_string(a.size);
  return s;
}

// ZeRO with tensor parallelism: the optimizer sums per-parameter
// norms over the tensor-parallel axes, so the ranks of those axes must
// update the same parameters. Their blocks have equal shapes (shards are
// even), hence equal buckets and owners; checked since a mismatch would
// pair collectives of different sizes. Collective over `peers`.
void check_same_owners(
    const DistributedDataParallel& ddp, Model& model, ProcessGroup& peers) {
  std::vector<double> hi, lo;
  for (Parameter* p : model.parameters()) {
    hi.push_back(ddp.owner(*p));
    lo.push_back(-hi.back());
  }
  const int64_t n = static_cast<int64_t>(hi.size());
  peers.all_reduce(hi.data(), n, ReduceOp::kMax);
  peers.all_reduce(lo.data(), n, ReduceOp::kMax);
  for (int64_t i = 0; i < n; ++i) {
    NDT_ASSERT(
        hi[i] == -lo[i],
        "ZeRO: tensor-parallel ranks assign parameter '",
        model.parameters()[i]->name,
        "' to different data-parallel owners");
  }
}

}  // namespace

Engine::Engine(const Config& config, DataSource& data, Mesh& mesh)
    : config_(config),
      data_(data),
      mesh_(mesh),
      mode_(make_tensor_parallel_mode(config)),
      tracer_(
          config.train.steps > 1 ? 1 : 0, config.train.trace ? kTraceSteps : 0),
      untraced_(0, 0) {
  const ParallelConfig& p = config.parallel;
  // The mesh must be the configured one.
  const std::vector<MeshAxis> want = mesh_axes(config);
  int ranks = 1;
  bool same = want.size() == mesh.names().size();
  for (size_t i = 0; i < want.size(); ++i) {
    ranks *= want[i].size;
    same = same && mesh.names()[i] == want[i].name &&
           mesh.sizes()[i] == want[i].size;
  }
  NDT_CHECK(
      same,
      ConfigError,
      "the layout ",
      axes_text(want),
      " needs ",
      ranks,
      " MPI ranks (mpirun -np ",
      ranks,
      "), this job has ",
      mesh.world().size());
  dp_ = p.dp;
  threads_ = p.dp_mode == DpMode::kThreads && dp_ > 1;
  if (!threads_)
    rank_ = mesh.coord("dp");
  sp_ = p.sp;
  builder_ = sp_ > 1 ? make_sequence_parallel_builder(config, mesh)
                     : mode_->make_builder(mesh);
  // A first build that keeps no module describes them all (each is freed
  // as soon as it is built).
  const std::unique_ptr<Model> described =
      make_model(config.model, *builder_, keep_no_module);
  for (int m = 0; m < described->num_modules(); ++m) {
    for (const ParamDesc& d : described->described(m))
      all_params_.push_back({d.name, d.global_shape, 0});
  }
  const std::vector<bool> keep = partition_pipeline(*described);
  // Sequence-parallel ranks see a share of every sample's tokens, and the
  // mode's replica axes (2.5D's depth) other samples: their gradients are
  // summed with the data-parallel replicas', as one reduction.
  std::vector<std::string> candidates = {"dp"};
  for (const std::string& a : mode_->replica_axes()) {
    if (!NDT_FAULT(kTp2p5dSkipDepthReduce))
      candidates.push_back(a);
  }
  if (!NDT_FAULT(kSpSkipGradReduce))
    candidates.push_back("sp");
  for (const std::string& a : candidates) {
    if (mesh.size(a) > 1)
      grad_axes_.push_back(a);
  }
  // Data parallelism lays out its buckets before the model is built and
  // takes over each module's parameters as soon as it is built and
  // initialised, so that no rank ever holds more of them than its share
  // (ZeRO) and one module.
  if (!threads_ && !grad_axes_.empty()) {
    ddp_ = std::make_unique<DistributedDataParallel>(
        described->described_modules(),
        keep,
        mesh.group(grad_axes_),
        static_cast<int64_t>(p.bucket_mb * (1 << 20)),
        p.zero,
        p.recompute == Recompute::kNone);
    ddp_->defer_broadcasts(p.defer_broadcast);
  }
  const int n_replicas = threads_ ? dp_ : 1;
  for (int r = 0; r < n_replicas; ++r) {
    DistributedDataParallel* ddp = r == 0 ? ddp_.get() : nullptr;
    const uint64_t seed = config.train.seed;
    replicas_.push_back(make_model(
        config.model,
        *builder_,
        [&keep, ddp, seed](int m, const std::vector<Parameter*>& params) {
          if (!keep[m])
            return false;
          for (Parameter* q : params)
            init_parameter(*q, seed);
          if (ddp)
            ddp->adopt(m, params);
          return true;
        }));
  }
  if (NDT_FAULT(kParamRenamed) && (dp_ > 1 || p.pp > 1 || p.tp > 1)) {
    all_params_.back().name += ".renamed";
    if (keep.back())
      replicas_[0]->parameters().back()->name += ".renamed";
  }
  for (Parameter* q : replicas_[0]->parameters()) {
    if (!q->layout.placements.empty()) {
      sum_axes_ =
          [this](const std::vector<std::string>& axes, double* v, int64_t n) {
            axis_sum(axes, v, n);
          };
      break;
    }
  }
  schedule_ = make_lr_schedule(config, data_.train_size());
  if (ddp_) {
    ddp_->attach(*replicas_[0]);
    ddp_->check_replicas_identical();
    std::vector<std::string> peers;  // the other axes but the pipeline's
    for (const std::string& a : mesh.names()) {
      if (a != "pp" && mesh.size(a) > 1 &&
          std::find(grad_axes_.begin(), grad_axes_.end(), a) ==
              grad_axes_.end())
        peers.push_back(a);
    }
    if (ddp_->shards_optimizer() && !peers.empty())
      check_same_owners(*ddp_, *replicas_[0], mesh.group(peers));
  }
  // ZeRO: this rank updates (and keeps state for) its buckets only.
  opt_ = make_optimizer(
      config.optim,
      ddp_ ? ddp_->owned_parameters() : replicas_[0]->parameters(),
      sum_axes_);
  // One executor per replica. Threads mode: each replica's GradSync is
  // made per step on its thread, and the engine steps the optimizer after
  // all replicas are done.
  const TensorParallelMode& mode = *mode_;
  Mesh* mesh_ptr = &mesh;
  for (int r = 0; r < n_replicas; ++r) {
    std::function<void()> opt_step = [this] { optimizer_step(); };
    if (threads_)
      opt_step = [] {};
    executors_.push_back(std::make_unique<PipelineExecutor>(
        *replicas_[r],
        mesh.group("pp"),
        chunks_,
        p.pp * static_cast<int>(chunks_.size()),
        [&mode, this](const Shape& s) {
          return mode.local_activation(
              sp_ > 1 ? sequence_local_activation(s, sp_) : s);
        },
        [&mode, mesh_ptr](int64_t n) { return mode.sample_rows(*mesh_ptr, n); },
        ddp_.get(),
        p.recompute == Recompute::kBlock,
        r == 0 ? tracer_ : untraced_,
        opt_step));
  }
  const int64_t local = config.train.batch_size / (threads_ ? 1 : dp_);
  input_ = data.make_input(local);
  targets_ = data.make_targets(local);
  // The evaluation batches must split as the mode splits samples: fail now
  // rather than at the first evaluation.
  const auto [first, end] = eval_range();
  const int64_t B = micro_batch_size(config);
  try {
    if (end - first >= B)
      mode_->sample_rows(mesh_, B);
    if ((end - first) % B != 0)
      mode_->sample_rows(mesh_, (end - first) % B);
  } catch (const ConfigError& e) {
    throw ConfigError(
        "the evaluation set (" + std::to_string(end - first) +
        " samples on this data-parallel rank, in batches of the training "
        "micro-batch, train.batch_size / parallel.dp / parallel.microbatches "
        "= " +
        std::to_string(B) + "; see train.eval_samples): " + e.what());
  }
  if (sp_ > 1 && config.model.kind == ModelKind::kGpt)
    sp_tokens_ = std::make_unique<SeqShard>(sequence_shard(config, mesh));
}

// This rank's share [first, end) of the evaluation set: data-parallel
// ranks a contiguous share each.
std::pair<int64_t, int64_t> Engine::eval_range() const {
  int64_t total = data_.eval_size();
  if (config_.train.eval_samples > 0)
    total = std::min(total, config_.train.eval_samples);
  const int parts = threads_ ? 1 : dp_;
  return {total * rank_ / parts, total * (rank_ + 1) / parts};
}

Tensor Engine::my_tokens(const Tensor& t) const {
  return sp_tokens_ ? take_tokens(t, *sp_tokens_) : t;
}

// Cuts the model into P x V virtual stages (one stage without a
// pipeline) from its description, records which pipeline rank holds each
// parameter, and makes the step's schedule: the configured one, or the
// naive one-stage schedule over the micro-batches. Returns the modules
// this rank holds.
std::vector<bool> Engine::partition_pipeline(const Model& described) {
  const ParallelConfig& p = config_.parallel;
  const int modules = described.num_modules();
  const int P = p.pp;
  if (P == 1) {
    chunks_ = {{0, modules - 1}};
    pipe_ = make_schedule(PipeSchedule::kNaive, 1, p.microbatches, 1);
    return std::vector<bool>(modules, true);
  }
  const int V = p.pp_chunks;
  if (!p.pp_split.empty()) {
    stage_blocks_ = p.pp_split;
  } else {
    std::vector<int64_t> cost;
    for (int m = 1; m < modules - 1; ++m)
      cost.push_back(numel_of(described.described(m)));
    stage_blocks_ = partition_blocks(
        cost,
        P * V,
        numel_of(described.described(0)),
        numel_of(described.described(modules - 1)));
  }
  std::map<std::string, ParamInfo*> by_name;
  for (ParamInfo& info : all_params_)
    by_name[info.name] = &info;
  const int me = mesh_.coord("pp");
  std::vector<bool> keep(modules, false);
  for (int q = 0; q < P; ++q) {
    for (const ModuleRange& c : chunk_modules(stage_blocks_, P, q)) {
      for (int m = c.first; m <= c.last; ++m) {
        for (const ParamDesc& d : described.described(m))
          by_name.at(d.name)->pp_rank = q;
        if (q == me)
          keep[m] = true;
      }
    }
  }
  chunks_ = chunk_modules(stage_blocks_, P, me);
  pipe_ = make_schedule(p.schedule, P, p.microbatches, V);
  return keep;
}

Engine::~Engine() = default;

std::vector<std::string> Engine::replica_axes(const Parameter& p) const {
  std::vector<std::string> out;
  for (const std::string& axis : mesh_.names()) {
    bool sharded = axis == "pp";
    for (const Placement& pl : p.layout.placements) {
      if (pl.axis == axis && pl.kind == Placement::Kind::kShard)
        sharded = true;
    }
    if (!sharded)
      out.push_back(axis);
  }
  return out;
}

void Engine::axis_sum(
    const std::vector<std::string>& axes, double* v, int64_t n) {
  if (axes.size() == 1) {
    mesh_.group(axes[0]).all_reduce(v, n);
  } else {
    mesh_.group(axes).all_reduce(v, n);
  }
}

// Clipping (global norm of the logical gradients: shards summed over the
// axes that shard them, each pipeline rank's parameters once) and the
// optimizer step; sets result_'s lr and grad_norm (without clipping, the
// norm of the grads the step read).
void Engine::optimizer_step() {
  const double t0 = tracer_.now();
  if (on_grads_ready)
    on_grads_ready();
  // The ranks holding the model's other parameters: pipeline stages, and
  // under ZeRO the data-parallel ranks that update the other
  // buckets (each parameter is updated by exactly one of them).
  const bool sharded = ddp_ && ddp_->shards_optimizer();
  std::function<void(double&)> sum_stages;
  if (config_.parallel.pp > 1 || sharded) {
    sum_stages = [this, sharded](double& sq) {
      if (config_.parallel.pp > 1)
        mesh_.group("pp").all_reduce(&sq, 1);
      if (sharded)
        ddp_->group().all_reduce(&sq, 1);
    };
  }
  result_.lr = lr_at(schedule_, step_);
  const auto& params = opt_->parameters();
  if (config_.optim.clip_grad_norm > 0) {
    result_.grad_norm = clip_grad_norm(
        params, config_.optim.clip_grad_norm, sum_axes_, sum_stages);
    opt_->step(result_.lr);
  } else {
    // Nothing clips: the norm is only reported, so its sums of squares
    // come from the update's own pass over the grads where it has one.
    opt_->step_with_grad_squares(result_.lr, grad_squares_);
    result_.grad_norm =
        grad_norm_from_squares(params, grad_squares_, sum_axes_, sum_stages);
  }
  result_.update_s = tracer_.now() - t0;
  if (threads_)  // otherwise the executor records its kOptimizerStep
    tracer_.add({Op::kOptimizerStep, -1, -1, -1, step_, t0, tracer_.now()});
}

StepResult Engine::step(int64_t step) {
  const int64_t B = config_.train.batch_size;
  const int64_t local = B / dp_;
  const int M = config_.parallel.microbatches;
  step_ = step;
  result_ = StepResult();
  PipelineBatch batch;
  batch.seed = config_.train.seed;
  batch.step = step;
  batch.loss_scale = 1.0f / float(B * replicas_[0]->loss_terms_per_sample);
  if (NDT_FAULT(kAccumScale))
    batch.loss_scale /= float(M);
  const std::vector<Instr>& instrs = pipe_.instrs.at(mesh_.coord("pp"));
  LossStats stats;
  if (!threads_) {
    data_.train_batch(step * B + rank_ * local, local, input_, targets_);
    batch.input = my_tokens(input_);
    batch.targets = my_tokens(targets_);
    batch.sample_offset = rank_ * local;
    if (ddp_ && ddp_->zero_stage() >= 2) {
      // ZeRO stages 2 and 3: the other ranks' buckets are zeroed as
      // backward reaches them (their slots are shared).
      for (Parameter* q : opt_->parameters())
        ops::zero_(q->grad);
    } else {
      replicas_[0]->zero_grad();
    }
    executors_[0]->run(instrs, M, batch, stats);
  } else {
    // Single-process data parallel: the whole global batch, one slice per
    // replica thread.
    data_.train_batch(step * B, B, input_, targets_);
    std::vector<LossStats> per(replicas_.size());
    run_local(dp_, [&](ProcessGroup& pg) {
      const int r = pg.rank();
      Model& m = *replicas_[r];
      // Parameters from replica 0 (updated by the last step).
      for (Parameter* p : m.parameters())
        pg.broadcast(p->value.data(), p->value.numel(), 0);
      ThreadsGradSync sync(m, pg);
      PipelineBatch mine = batch;
      mine.input = input_.rows(r * local, local);
      mine.targets = targets_.rows(r * local, local);
      mine.sample_offset = r * local;
      m.zero_grad();
      executors_[r]->set_grad_sync(&sync);
      executors_[r]->run(instrs, M, mine, per[r]);
      executors_[r]->set_grad_sync(nullptr);
    });
    for (const LossStats& s : per) {
      stats.loss_sum += s.loss_sum;
      stats.count += s.count;
    }
    optimizer_step();
  }
  // The loss lives on the last stage of each pipeline, per replica, and
  // per block of samples of the tensor-parallel mode.
  double v[2] = {stats.loss_sum, double(stats.count)};
  try {
    sum_loss_stats(v, 2);
  } catch (const CommError& e) {
    throw CommError(
        "step " + std::to_string(step) +
        ", loss reduction after the step's schedule: " + e.what());
  }
  result_.loss = v[0] / v[1];
  // ZeRO: the owners' new values to every rank, after the loss reduction
  // so that its wait does not finish broadcasts deferred into the next
  // forward (stage 3: the slots marked old).
  if (ddp_ && ddp_->shards_optimizer())
    ddp_->broadcast_parameters();
  return result_;
}

void Engine::sum_loss_stats(double* v, int64_t n) {
  mesh_.group("pp").all_reduce(v, n);
  mesh_.group("dp").all_reduce(v, n);
  for (const std::string& axis : mode_->sample_axes()) {
    if (!NDT_FAULT(kSampleAxesLoss))
      mesh_.group(axis).all_reduce(v, n);
  }
  if (sp_ > 1)
    mesh_.group("sp").all_reduce(v, n);
}

Model& Engine::model() {
  if (ddp_)
    ddp_->settle_broadcasts();
  return *replicas_[0];
}

EvalResult Engine::evaluate(int64_t step) {
  if (ddp_)
    ddp_->settle_broadcasts();
  int64_t total = data_.eval_size();
  if (config_.train.eval_samples > 0) {
    total = std::min(total, config_.train.eval_samples);
  }
  // Data parallel over ranks: each rank a contiguous share, stats reduced.
  const auto [first, end] = eval_range();
  const int64_t B = micro_batch_size(config_);
  auto forward = [&](int64_t i, int64_t n, LossStats& into) {
    Tensor input = data_.make_input(n);
    Tensor targets = data_.make_targets(n);
    data_.eval_batch(i, n, input, targets);
    executors_[0]->forward_eval(
        my_tokens(input), my_tokens(targets), config_.train.seed, step, into);
  };
  LossStats stats;
  for (int64_t i = first; i < end; i += B)
    forward(i, std::min(B, end - i), stats);
  if (ddp_ && ddp_->zero_stage() == 3) {
    // ZeRO stage 3 gathers parameters in every forward, collectively over
    // the data-parallel ranks: a rank with fewer batches than another runs
    // that rank's first batch until it has as many (not counted).
    const int64_t mine = (end - first + B - 1) / B;
    int64_t most = 0, pad_first = 0, pad_n = 0;
    for (int r = 0; r < dp_; ++r) {
      const int64_t lo = total * r / dp_;
      const int64_t n = total * (r + 1) / dp_ - lo;
      if ((n + B - 1) / B > most) {
        most = (n + B - 1) / B;
        pad_first = lo;
        pad_n = std::min(B, n);
      }
    }
    LossStats ignored;
    for (int64_t k = mine; k < most; ++k)
      forward(pad_first, pad_n, ignored);
  }
  // The loss lives on the last stage of each pipeline.
  double v[3] = {stats.loss_sum, double(stats.count), double(stats.correct)};
  sum_loss_stats(v, 3);
  stats.loss_sum = v[0];
  stats.count = static_cast<int64_t>(v[1]);
  stats.correct = static_cast<int64_t>(v[2]);
  EvalResult r;
  r.loss = stats.loss_sum / std::max<int64_t>(stats.count, 1);
  r.accuracy = double(stats.correct) / std::max<int64_t>(stats.count, 1);
  r.samples = total;
  return r;
}

}  // namespace ndt
