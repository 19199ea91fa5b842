#include "train/trainer.h"

#include <omp.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "base/check.h"
#include "io/checkpoint.h"
#include "nn/builder.h"
#include "ops/ops.h"
#include "optim/grad_norm.h"
#include "tensor/memory.h"
#include "train/data_source.h"
#include "train/engine.h"
#include "train/factory.h"
#include "train/peak.h"

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

std::vector<NamedTensor> to_named(const NamedState& state) {
  std::vector<NamedTensor> out;
  for (const auto& [name, t] : state)
    out.push_back({name, t});
  return out;
}

std::string save(
    const Config& config, Model& model, Optimizer& opt, int64_t step) {
  Checkpoint ck;
  for (Parameter* p : model.parameters())
    ck.model.push_back({p->name, p->value});
  ck.optimizer = to_named(opt.state());
  ck.manifest["config"] = config_to_json(config);
  ck.manifest["model"] = {
      {"kind", model.kind}, {"parameters", model.num_parameters()}};
  ck.manifest["optimizer"] = {
      {"name", to_string(config.optim.name)}, {"step", opt.step_count()}};
  ck.manifest["data"] = {
      {"samples_seen", step * config.train.batch_size},
      {"seed", config.train.seed}};
  return save_checkpoint(config.run_dir() + "/checkpoints", step, ck);
}

// Loads `dir` into model and optimizer; returns the step to continue from.
int64_t resume(
    const Config& config,
    const std::string& dir,
    Model& model,
    Optimizer& opt) {
  Checkpoint ck = load_checkpoint(dir);
  const nlohmann::json& m = ck.manifest;
  NDT_CHECK(
      m.contains("config") && m.contains("optimizer"),
      CheckpointError,
      "checkpoint ",
      dir,
      ": manifest.json lacks config or optimizer");
  Config saved = config_from_json(m["config"]);
  nlohmann::json want = config_to_json(config);
  nlohmann::json have = config_to_json(saved);
  NDT_CHECK(
      want["model"] == have["model"],
      ConfigError,
      "checkpoint ",
      dir,
      " holds model ",
      have["model"].dump(),
      " but the config asks for ",
      want["model"].dump());
  NDT_CHECK(
      saved.train.batch_size == config.train.batch_size,
      ConfigError,
      "checkpoint ",
      dir,
      " was trained with train.batch_size=",
      saved.train.batch_size,
      "; resuming needs the same value, got ",
      config.train.batch_size);
  std::map<std::string, const Tensor*> tensors;
  for (const NamedTensor& t : ck.model)
    tensors[t.name] = &t.tensor;
  auto params = model.parameters();
  NDT_CHECK(
      tensors.size() == params.size(),
      CheckpointError,
      "checkpoint ",
      dir,
      " has ",
      tensors.size(),
      " model tensors, the model has ",
      params.size());
  for (Parameter* p : params) {
    auto it = tensors.find(p->name);
    NDT_CHECK(
        it != tensors.end(),
        CheckpointError,
        "checkpoint ",
        dir,
        " lacks tensor '",
        p->name,
        "'");
    NDT_CHECK(
        it->second->shape() == p->value.shape(),
        CheckpointError,
        "checkpoint ",
        dir,
        " tensor '",
        p->name,
        "' has shape ",
        shape_str(it->second->shape()),
        ", expected ",
        shape_str(p->value.shape()));
    p->value.copy_(*it->second);
  }
  NamedState state;
  for (const NamedTensor& t : ck.optimizer)
    state.emplace_back(t.name, t.tensor);
  int64_t step = m.at("step").get<int64_t>();
  opt.load_state(state, m.at("optimizer").at("step").get<int64_t>());
  return step;
}

}  // namespace

TrainSummary run_training(const Config& config, const TrainOptions& options) {
  const bool lead =
      options.dp_group == nullptr || options.dp_group->rank() == 0;
  std::ostringstream quiet;
  std::ostream& out = !lead ? quiet : options.out ? *options.out : std::cout;
  const int threads =
      config.train.threads > 0 ? config.train.threads : omp_get_num_procs();
  ops::set_num_threads(threads);

  // Data first: a bad path fails before the model is allocated.
  DataSource data(config);
  Engine engine(config, data, options.dp_group);
  Model& model = engine.model();
  Optimizer& opt = engine.optimizer();

  const int64_t B = config.train.batch_size;
  const int dp = config.parallel.dp;
  const double flops_per_step = model.flops_per_sample * B;
  const double peak = measure_sgemm_peak_gflops();
  out << "ndtrain: " << ops::blas_info() << ", threads " << threads << "\n"
      << "ndtrain: sgemm peak " << static_cast<int>(peak) << " GFLOP/s"
      << (dp > 1 ? " per replica" : "") << "\n"
      << "ndtrain: model " << model.kind << ", " << model.num_parameters()
      << " parameters, " << flops_per_step / 1e9 << " GFLOP per step (batch "
      << B << ")\n";
  if (dp > 1) {
    out << "ndtrain: data parallel, " << dp << " replicas ("
        << to_string(config.parallel.dp_mode) << "), "
        << config.parallel.grad_accum << " micro-batch(es) of "
        << B / dp / config.parallel.grad_accum << " per replica\n";
  }

  TrainSummary summary;
  summary.run_dir = config.run_dir();
  if (lead)
    fs::create_directories(summary.run_dir);
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
    start = resume(config, dir, model, opt);
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

  const bool is_lm = config.model.kind == ModelKind::kGpt;
  auto t_start = Clock::now();
  auto t_window = t_start;
  double train_seconds = 0;
  int64_t window_steps = 0;

  auto run_eval = [&](int64_t step) {
    auto t0 = Clock::now();
    EvalResult r = engine.evaluate(step);
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
    if (lead) {
      metrics << j.dump() << "\n";
      metrics.flush();
    }
    t_window = Clock::now();  // keep eval out of throughput
  };
  auto checkpoint = [&](int64_t step) {
    if (lead)
      summary.checkpoint = save(config, model, opt, step);
    if (options.dp_group)
      options.dp_group->barrier();
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
    summary.losses.push_back(res.loss);
    summary.steps = step + 1;
    ++window_steps;
    if (options.on_step) {
      options.on_step({step, res.loss, res.lr, res.grad_norm});
    }

    const bool last = step + 1 == config.train.steps;
    if ((step + 1) % config.train.log_every == 0 || last) {
      double dt = seconds_since(t_window);
      train_seconds += dt;
      double sps = window_steps * B / dt;
      double mfu = window_steps * flops_per_step / dt / (peak * 1e9 * dp);
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
      if (lead) {
        metrics << j.dump() << "\n";
        metrics.flush();
      }
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
  out << "ndtrain: trained " << summary.steps << " steps in "
      << human_duration(seconds_since(t_start)) << " ("
      << human_duration(train_seconds) << " training)\n"
      << "ndtrain: metrics " << summary.run_dir << "/metrics.jsonl\n"
      << "ndtrain: checkpoint " << summary.checkpoint << "\n";
  return summary;
}

}  // namespace ndt
