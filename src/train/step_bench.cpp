#include "train/step_bench.h"

#include <algorithm>
#include <chrono>

#include "base/median.h"
#include "tensor/memory.h"
#include "train/data_source.h"
#include "train/engine.h"
#include "train/peak.h"
#include "train/trace_file.h"

namespace ndt {

StepBenchResult run_step_bench(
    const Config& config, Mesh& mesh, int iters, int warmup) {
  DataSource data(config);
  Engine engine(config, data, mesh);
  ProcessGroup& pp = mesh.group("pp");
  ProcessGroup& world = mesh.world();
  const ParallelConfig& p = config.parallel;
  StepBenchResult r;
  r.has_pipeline = p.pp > 1;
  std::vector<double> ms, update_ms;
  double exposed0 = 0, comm0 = 0;
  // Pipeline: compute time and makespan summed over the timed steps.
  double pipe_busy = 0, pipe_span = 0;
  align_trace_origin(engine.tracer(), mesh);
  // Every rank measures its own threads at the same time.
  auto job_fma_peak = [&world] {
    world.barrier();
    double g = measure_fma_peak_gflops();
    world.all_reduce(&g, 1);
    return g;
  };
  double peak_before = 0;
  for (int i = 0; i < warmup + iters; ++i) {
    if (i == warmup) {
      peak_before = job_fma_peak();
      if (engine.ddp()) {
        exposed0 = engine.ddp()->exposed_seconds();
        comm0 = engine.ddp()->comm_seconds();
      }
      memory_reset_peaks();
    }
    world.barrier();
    auto t0 = std::chrono::steady_clock::now();
    const StepResult step = engine.step(i);
    double dt = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - t0)
                    .count();
    if (i < warmup)
      continue;
    ms.push_back(dt);
    update_ms.push_back(1e3 * step.update_s);
    if (r.has_pipeline) {
      // The step's makespan runs from the earliest entry to the latest
      // end of compute over the pipeline's ranks.
      const PipelineTiming& t = engine.executor().timing();
      double span[2] = {-t.start, t.end};
      double busy = t.busy;
      pp.all_reduce(span, 2, ReduceOp::kMax);
      pp.all_reduce(&busy, 1);
      pipe_busy += busy;
      pipe_span += span[0] + span[1];
    }
  }
  r.fma_peak_gflops = std::max(peak_before, job_fma_peak());
  // Peak activation bytes of each rank, gathered by sum into slots.
  r.act_peak_mib.assign(world.size(), 0.0);
  r.act_peak_mib[world.rank()] =
      static_cast<double>(
          memory_stats().peak_bytes[static_cast<int>(MemTag::kActs)]) /
      (1 << 20);
  world.all_reduce(r.act_peak_mib.data(), world.size());
  r.mem_peak_mib.assign(world.size(), 0.0);
  r.mem_peak_mib[world.rank()] =
      static_cast<double>(memory_stats().total_peak_bytes) / (1 << 20);
  world.all_reduce(r.mem_peak_mib.data(), world.size());
  r.median_ms = median(ms);
  r.update_ms = median(update_ms);
  world.all_reduce(&r.update_ms, 1, ReduceOp::kMax);
  Model& model = engine.model();
  r.parameters = model.num_parameters();
  r.flops_per_step = model.flops_per_sample * config.train.batch_size;
  r.mfu = r.flops_per_step / (r.median_ms * 1e-3) / (r.fma_peak_gflops * 1e9);
  if (engine.ddp()) {
    r.has_ddp = true;
    r.allreduce_ms = 1e3 * (engine.ddp()->comm_seconds() - comm0) / iters;
    r.exposed_ms = 1e3 * (engine.ddp()->exposed_seconds() - exposed0) / iters;
  }
  if (r.has_pipeline) {
    r.bubble = 1.0 - pipe_busy / (p.pp * pipe_span);
    r.bubble_theory =
        double(p.pp - 1) / (p.pp_chunks * p.microbatches + p.pp - 1);
  }
  return r;
}

}  // namespace ndt
