#include "train/trainer.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "base/check.h"
#include "comm/self_process_group.h"
#include "io/checkpoint.h"
#include "io/untrusted.h"
#include "nn/builder.h"
#include "ops/ops.h"
#include "optim/grad_norm.h"
#include "parallel/ddp.h"
#include "parallel/sequence_parallel.h"
#include "parallel/tensor_parallel_mode.h"
#include "tensor/memory.h"
#include "train/data_source.h"
#include "train/engine.h"
#include "train/factory.h"
#include "train/peak.h"
#include "train/run_checkpoint.h"
#include "train/trace_file.h"

namespace ndt {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string human_bytes(double b) {
  char buf[32];
  if (b >= 1 << 30) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1 << 30));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1 << 20));
  }
  return buf;
}

std::string human_duration(double s) {
  char buf[32];
  int t = static_cast<int>(s + 0.5);
  if (t >= 3600) {
    std::snprintf(buf, sizeof buf, "%dh%02dm", t / 3600, (t / 60) % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%dm%02ds", t / 60, t % 60);
  }
  return buf;
}

// Whether `run_dir` holds what a previous run leaves behind: a checkpoint
// step directory or a non-empty metrics.jsonl.
bool holds_previous_run(const std::string& run_dir) {
  std::error_code ec;
  if (!latest_checkpoint(run_dir + "/checkpoints").empty())
    return true;
  const std::string metrics = run_dir + "/metrics.jsonl";
  return fs::is_regular_file(metrics, ec) && fs::file_size(metrics, ec) > 0 &&
         !ec;
}

// Checks the run directory before any data is read or memory allocated,
// without changing anything: it is (or can be created as) a writable
// directory, and a fresh run does not mix with a previous run's files
// unless train.overwrite=true.
void check_run_dir(const Config& config) {
  const std::string dir = config.run_dir();
  std::error_code ec;
  // The directory, or the nearest ancestor that exists, must be a writable
  // directory.
  fs::path at = fs::absolute(dir, ec);
  while (!fs::exists(fs::symlink_status(at, ec)) && at.has_relative_path() &&
         at != at.parent_path()) {
    at = at.parent_path();
  }
  NDT_CHECK(
      fs::is_directory(at, ec),
      ConfigError,
      "run.dir ",
      printable(dir),
      " cannot be created: ",
      printable(at.string()),
      " is not a directory");
  NDT_CHECK(
      ::access(at.c_str(), W_OK | X_OK) == 0,
      ConfigError,
      "run.dir ",
      printable(dir),
      " cannot be written: ",
      printable(at.string()),
      ": ",
      std::strerror(errno));
  NDT_CHECK(
      !config.train.resume.empty() || config.train.overwrite ||
          !holds_previous_run(dir),
      ConfigError,
      "run.dir ",
      printable(dir),
      " already holds a previous run (checkpoints or metrics.jsonl); a "
      "fresh run would overwrite it. Choose another run.name or run.dir, "
      "resume it with train.resume=latest, or set train.overwrite=true to "
      "replace it");
}

// Creates the run directory; for a fresh run with train.overwrite=true
// removes the previous run's checkpoints and trace (metrics.jsonl is
// truncated when opened), so that train.resume=latest can never pick up a
// step of the replaced run.
void prepare_run_dir(const Config& config) {
  const std::string dir = config.run_dir();
  std::error_code ec;
  fs::create_directories(dir, ec);
  NDT_CHECK(
      !ec, Error, "cannot create run.dir ", printable(dir), ": ", ec.message());
  if (!config.train.resume.empty() || !config.train.overwrite)
    return;
  fs::remove_all(dir + "/checkpoints", ec);
  NDT_CHECK(
      !ec,
      Error,
      "train.overwrite: cannot remove ",
      printable(dir),
      "/checkpoints: ",
      ec.message());
  fs::remove(dir + "/trace.json", ec);
}

// Throws naming the step and the tensor when a parameter or optimizer
// state holds NaN or Inf, so that no checkpoint ever stores one.
void check_finite_state(Engine& engine, int64_t step) {
  auto check = [&](const std::string& name, const Tensor& t) {
    if (!t.defined() || t.dtype() != DType::kF32)
      return;
    const float* p = t.data();
    for (int64_t i = 0; i < t.numel(); ++i) {
      NDT_CHECK(
          std::isfinite(p[i]),
          Error,
          "training diverged: ",
          name,
          " holds ",
          p[i],
          " (element ",
          i,
          ") after step ",
          step,
          "; no checkpoint written (lower optim.lr or set "
          "optim.clip_grad_norm)");
    }
  };
  // The parameters this rank updates (under ZeRO stage 3 the others are
  // not held between steps).
  for (Parameter* p : engine.optimizer().parameters())
    check("parameter " + p->name, p->value);
  for (const auto& [name, t] : engine.optimizer().state())
    check("optimizer state " + name, t);
}

}  // namespace

TrainSummary run_training(const Config& config, const TrainOptions& options) {
  std::vector<std::string> names;
  for (const MeshAxis& a : mesh_axes(config))
    names.push_back(a.name);
  SingleRankMesh single(names);
  return run_training(config, options, single.mesh());
}

TrainSummary run_training(
    const Config& config, const TrainOptions& options, Mesh& mesh) {
  const bool lead = mesh.rank() == 0;
  std::ostringstream quiet;
  std::ostream& out = !lead ? quiet : options.out ? *options.out : std::cout;
  const int threads = train_threads(config);
  ops::set_num_threads(threads);

  // The run directory, then data: a bad path fails before the model is
  // allocated or the machine is measured.
  if (lead)
    check_run_dir(config);
  DataSource data(config);
  // Every rank measures at the same time, so on a shared (oversubscribed)
  // machine each sees its share of the cores, as during training; and
  // before the model is built, so that the sgemm measurement's matrices
  // (6.75 MiB) never sit on top of the model's memory (train.mem_cap_mb).
  // The sgemm rate is only reported (MFU divides by the FMA peak): when
  // those matrices would not fit under train.mem_cap_mb beside what is
  // live (the data), it is not measured.
  mesh.world().barrier();
  const double peak = measure_fma_peak_gflops();
  const int64_t cap = memory_cap();
  const bool measure_sgemm =
      cap == 0 ||
      memory_stats().total_current_bytes + sgemm_peak_bytes(kSgemmStartN) <=
          cap;
  const double sgemm =
      measure_sgemm ? measure_sgemm_peak_gflops(kSgemmStartN) : 0;
  Engine engine(config, data, mesh);
  Model& model = engine.model();

  const int64_t B = config.train.batch_size;
  const int dp = config.parallel.dp;
  const int pp = config.parallel.pp;
  const int ranks = mesh.world().size();
  int64_t n_params = 0;
  for (const ParamInfo& p : engine.all_parameters())
    n_params += shape_numel(p.shape);
  const double flops_per_step = model.flops_per_sample * B;
  out << "ndtrain: " << ops::blas_info() << ", threads " << threads << "\n"
      << "ndtrain: FMA peak " << static_cast<int>(peak) << " GFLOP/s"
      << (ranks > 1 ? " per rank" : "") << " (MFU's denominator), sgemm ";
  if (measure_sgemm) {
    out << static_cast<int>(sgemm) << " GFLOP/s\n";
  } else {
    out << "not measured (its "
        << sgemm_peak_bytes(kSgemmStartN) / double(1 << 20)
        << " MiB would pass train.mem_cap_mb)\n";
  }
  out << "ndtrain: model " << model.kind << ", " << n_params << " parameters, "
      << flops_per_step / 1e9 << " GFLOP per step (batch " << B << ")\n";
  const LrScheduleOptions& lr = engine.lr_schedule();
  out << "ndtrain: optimizer " << to_string(config.optim.name) << ", lr "
      << lr.lr;
  if (config.optim.scale_lr != LrScaling::kNone)
    out << " (optim.lr " << config.optim.lr << " at batch "
        << config.optim.base_batch << ", " << to_string(config.optim.scale_lr)
        << " scaling to batch " << B << ")";
  out << ", " << to_string(config.optim.schedule) << " decay, warmup "
      << lr.warmup << " steps\n";
  if (dp > 1 && pp == 1) {
    out << "ndtrain: data parallel, " << dp << " replicas ("
        << to_string(config.parallel.dp_mode) << "), "
        << config.parallel.microbatches << " micro-batch(es) of "
        << micro_batch_size(config) << " per replica\n";
  }
  if (pp > 1) {
    const ParallelConfig& p = config.parallel;
    out << "ndtrain: pipeline, " << pp << " stages x " << p.pp_chunks
        << " chunk(s), schedule " << to_string(p.schedule) << ", "
        << p.microbatches << " micro-batch(es) of " << micro_batch_size(config)
        << ", recompute " << to_string(p.recompute) << "; blocks per stage";
    for (int n : engine.stage_blocks())
      out << " " << n;
    // What each stage builds and holds (before tensor-parallel splits).
    std::vector<int64_t> held(pp, 0);
    for (const ParamInfo& info : engine.all_parameters())
      held[info.pp_rank] += shape_numel(info.shape);
    out << "; parameters per stage";
    for (int64_t n : held)
      out << " " << n;
    out << (dp > 1 ? "; data parallel x" + std::to_string(dp) : "") << "\n";
  }
  if (pp == 1 && config.parallel.recompute == Recompute::kBlock) {
    out << "ndtrain: recompute block: each block keeps only its input and "
           "runs its forward again in backward (+"
        << model.recompute_flops_per_sample * B / 1e9
        << " GFLOP per step, not in MFU)\n";
  }
  if (config.parallel.tp > 1) {
    const ParallelConfig& p = config.parallel;
    const TensorParallelMode& mode = engine.tensor_parallel_mode();
    out << "ndtrain: tensor parallel, tp=" << p.tp << " ("
        << to_string(p.tp_mode);
    const std::vector<MeshAxis> axes = mode.axes();
    for (size_t i = 0; i < axes.size(); ++i)
      out << (i == 0 ? ": " : " x ") << axes[i].name << " " << axes[i].size;
    out << (p.tp_seq ? ", sequence-split regions" : "") << "), "
        << config.model.heads / mode.head_split() << " of "
        << config.model.heads << " heads per tp rank\n";
  }
  if (config.parallel.sp > 1) {
    const ParallelConfig& p = config.parallel;
    const int64_t T = model_tokens(config.model);
    out << "ndtrain: sequence parallel, sp=" << p.sp << " ("
        << to_string(p.sp_attention) << " attention, "
        << to_string(sequence_split(config)) << " split), " << T / p.sp
        << " of " << T << " tokens per sample per rank\n";
  }
  if (engine.ddp() && engine.ddp()->shards_optimizer()) {
    // What this (the printing) rank updates of what it holds.
    int64_t mine = 0, held = 0, state = 0;
    for (Parameter* q : engine.optimizer().parameters())
      mine += q->value.numel();
    for (Parameter* q : model.parameters())
      held += q->value.numel();
    for (const auto& [name, t] : engine.optimizer().state())
      state += t.numel();
    const DistributedDataParallel& ddp = *engine.ddp();
    auto mib = [](int64_t n) { return static_cast<double>(n) * 4 / (1 << 20); };
    const std::vector<int64_t> owned = ddp.owned_elements();
    out << "ndtrain: ZeRO stage " << ddp.zero_stage() << " over "
        << ddp.group().size() << " ranks (" << ddp.buckets().size()
        << (ddp.buckets().size() == 1 ? " bucket" : " buckets")
        << "; parameter elements per rank";
    for (int64_t n : owned)
      out << ' ' << n;
    out << "): rank 0 updates " << mine << " of its " << held
        << " parameter elements (optimizer state " << mib(state) << " MiB";
    if (ddp.zero_stage() >= 2)
      out << ", gradients " << mib(ddp.grad_elements()) << " of " << mib(held)
          << " MiB";
    if (ddp.zero_stage() == 3)
      out << ", parameters " << mib(ddp.param_elements()) << " of " << mib(held)
          << " MiB";
    out << ")\n";
    // Buckets hold whole parameters, so one larger than a rank's share
    // can leave ranks without any.
    std::string idle;
    int n_idle = 0;
    for (size_t r = 0; r < owned.size(); ++r) {
      if (owned[r] == 0) {
        if (n_idle++ > 0)
          idle += ' ';
        idle += std::to_string(r);
      }
    }
    if (n_idle > 0) {
      int64_t largest = 0;
      for (Parameter* q : model.parameters())
        largest = std::max(largest, q->value.numel());
      out << "ndtrain: ZeRO: " << n_idle << " of the " << owned.size()
          << " ranks (" << idle
          << ") own no bucket and keep no optimizer state: buckets hold "
             "whole parameters, and the largest has "
          << largest << " of the " << held << " elements\n";
    }
  }

  TrainSummary summary;
  summary.run_dir = config.run_dir();
  if (lead)
    prepare_run_dir(config);
  int64_t start = 0;
  if (!config.train.resume.empty()) {
    std::string dir = config.train.resume;
    if (dir == "latest") {
      dir = latest_checkpoint(summary.run_dir + "/checkpoints");
      NDT_CHECK(
          !dir.empty(),
          CheckpointError,
          "train.resume=latest but no checkpoint exists under ",
          summary.run_dir,
          "/checkpoints");
    }
    start = load_run_checkpoint(config, dir, engine);
    NDT_CHECK(
        start <= config.train.steps,
        ConfigError,
        "checkpoint ",
        dir,
        " is at step ",
        start,
        ", beyond train.steps=",
        config.train.steps);
    out << "ndtrain: resumed from " << dir << " at step " << start << "\n";
  }
  std::ofstream metrics;
  if (lead) {
    metrics.open(
        summary.run_dir + "/metrics.jsonl",
        start > 0 ? std::ios::app : std::ios::trunc);
    NDT_CHECK(
        metrics.good(),
        ConfigError,
        "cannot write ",
        summary.run_dir,
        "/metrics.jsonl (run.dir)");
  }
  // One JSON line; a failed write (full disk) ends the run.
  auto write_metrics = [&](const nlohmann::json& j) {
    if (!lead)
      return;
    errno = 0;
    metrics << j.dump() << "\n";
    metrics.flush();
    const int err = errno;
    NDT_CHECK(
        metrics.good(),
        Error,
        "cannot write ",
        summary.run_dir,
        "/metrics.jsonl: ",
        err ? std::strerror(err) : "write failed");
  };

  const bool is_lm = config.model.kind == ModelKind::kGpt;
  align_trace_origin(engine.tracer(), mesh);
  auto t_start = Clock::now();
  // A logging window's training time: from t_window to now, plus what
  // ran before each evaluation or checkpoint inside the window
  // (window_seconds), so that neither the pauses nor the steps before
  // them are lost.
  auto t_window = t_start;
  double window_seconds = 0;
  double train_seconds = 0;
  int64_t window_steps = 0;

  auto run_eval = [&](int64_t step) {
    window_seconds += seconds_since(t_window);
    auto t0 = Clock::now();
    EvalResult r = engine.evaluate(step);
    NDT_CHECK(
        r.samples > 0,
        DataError,
        "evaluation at step ",
        step,
        " saw no samples: the evaluation set is empty");
    NDT_CHECK(
        std::isfinite(r.loss) && (is_lm || std::isfinite(r.accuracy)),
        Error,
        "evaluation at step ",
        step,
        " gives loss ",
        r.loss,
        " (not finite); training stopped before writing a checkpoint");
    summary.eval_loss = r.loss;
    nlohmann::json j = {
        {"step", step}, {"eval_loss", r.loss}, {"eval_samples", r.samples}};
    out << "eval step " << step << " | loss " << r.loss;
    if (!is_lm) {
      summary.eval_accuracy = r.accuracy;
      j["eval_accuracy"] = r.accuracy;
      out << " | accuracy " << 100.0 * r.accuracy << "%";
    }
    out << " | " << r.samples << " samples in " << seconds_since(t0) << " s\n";
    write_metrics(j);
    t_window = Clock::now();  // keep eval out of throughput
  };
  auto checkpoint = [&](int64_t step) {
    window_seconds += seconds_since(t_window);
    check_finite_state(engine, step);
    std::string dir = save_run_checkpoint(config, engine, step);
    if (lead)
      summary.checkpoint = dir;
    mesh.world().barrier();
    t_window = Clock::now();
  };

  for (int64_t step = start; step < config.train.steps; ++step) {
    StepResult res = engine.step(step);
    NDT_CHECK(
        std::isfinite(res.loss),
        Error,
        "loss is ",
        res.loss,
        " at step ",
        step,
        " (diverged: lower optim.lr or set optim.clip_grad_norm)");
    NDT_CHECK(
        std::isfinite(res.grad_norm),
        Error,
        "gradient norm is ",
        res.grad_norm,
        " at step ",
        step,
        " (diverged: lower optim.lr or set optim.clip_grad_norm)");
    summary.losses.push_back(res.loss);
    summary.steps = step + 1;
    ++window_steps;
    if (options.on_step) {
      options.on_step({step, res.loss, res.lr, res.grad_norm});
    }

    const bool last = step + 1 == config.train.steps;
    if ((step + 1) % config.train.log_every == 0 || last) {
      double dt = window_seconds + seconds_since(t_window);
      window_seconds = 0;
      train_seconds += dt;
      double sps = window_steps * B / dt;
      double mfu = window_steps * flops_per_step / dt / (peak * 1e9 * ranks);
      MemoryStats mem = memory_stats();
      double eta = (config.train.steps - step - 1) * dt / window_steps;
      char line[256];
      std::snprintf(
          line,
          sizeof line,
          "step %lld/%lld | loss %.4f | lr %.2e | %.0f %s/s | "
          "MFU %.1f%% | mem %s | ETA %s",
          static_cast<long long>(step + 1),
          static_cast<long long>(config.train.steps),
          res.loss,
          res.lr,
          is_lm ? sps * config.model.seq_len : sps,
          is_lm ? "tokens" : "samples",
          100 * mfu,
          human_bytes(double(mem.total_current_bytes)).c_str(),
          human_duration(eta).c_str());
      out << line << "\n";
      out.flush();
      nlohmann::json j = {
          {"step", step + 1},
          {"loss", res.loss},
          {"lr", res.lr},
          {"grad_norm", res.grad_norm},
          {"samples_per_s", sps},
          {"mfu", mfu},
          {"mem_bytes", mem.total_current_bytes},
          {"mem_peak_bytes", mem.total_peak_bytes},
          {"train_seconds", train_seconds}};
      if (is_lm)
        j["tokens_per_s"] = sps * config.model.seq_len;
      write_metrics(j);
      t_window = Clock::now();
      window_steps = 0;
    }
    if (config.train.eval_every > 0 &&
        (step + 1) % config.train.eval_every == 0 && !last) {
      run_eval(step + 1);
    }
    if (config.train.checkpoint_every > 0 &&
        (step + 1) % config.train.checkpoint_every == 0 && !last) {
      checkpoint(step + 1);
    }
  }
  summary.train_seconds = train_seconds;
  summary.steps = std::max(summary.steps, start);
  run_eval(summary.steps);
  checkpoint(summary.steps);
  if (config.train.trace) {
    const std::string path = summary.run_dir + "/trace.json";
    int64_t n = write_trace(path, engine.tracer(), mesh);
    out << "ndtrain: trace " << path << " (" << n
        << " spans; open in https://ui.perfetto.dev)\n";
  }
  out << "ndtrain: trained " << summary.steps << " steps in "
      << human_duration(seconds_since(t_start)) << " ("
      << human_duration(train_seconds) << " training)\n"
      << "ndtrain: metrics " << summary.run_dir << "/metrics.jsonl\n"
      << "ndtrain: checkpoint " << summary.checkpoint << "\n";
  return summary;
}

}  // namespace ndt
