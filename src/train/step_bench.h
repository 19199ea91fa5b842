// Step benchmark (`ndtrain bench`): times full training steps (data,
// forward, backward, gradient reduction, optimizer) of the configured
// layout, after warm-up steps. Under mpirun with parallel.dp=N it also
// reports how much of the DDP all-reduce time backward hid; with a
// pipeline, the measured bubble against the schedule's theory. Collective
// over the mesh; every rank gets the same result.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/mesh.h"
#include "io/config.h"

namespace ndt {

struct StepBenchResult {
  double median_ms = 0;       // per step, this rank's clock
  int64_t parameters = 0;     // held by this rank
  double flops_per_step = 0;  // the whole model, global batch
  // The optimizer step (StepResult::update_s), median over the timed
  // steps, the largest over the ranks.
  double update_ms = 0;
  // DDP (has_ddp): all-reduce span and the part not hidden by backward,
  // per step.
  bool has_ddp = false;
  double allreduce_ms = 0;
  double exposed_ms = 0;
  // Pipeline (has_pipeline): idle fraction of the pipeline's ranks and the
  // schedule's analytic bubble (P - 1) / (V M + P - 1).
  bool has_pipeline = false;
  double bubble = 0;
  double bubble_theory = 0;
  // The FMA limit of the whole job (GFLOP/s, every rank's threads),
  // measured in this run right before and right after the timed steps;
  // the larger of the two, so the MFU below errs low when the machine's
  // speed drifts. mfu = flops_per_step / step time / that peak.
  double fma_peak_gflops = 0;
  double mfu = 0;
  std::vector<double> act_peak_mib;  // per world rank
  // Every tag's live peak (what train.mem_cap_mb bounds), per world rank.
  std::vector<double> mem_peak_mib;
};

// iters >= 1 timed steps after `warmup` untimed ones.
StepBenchResult run_step_bench(
    const Config& config, Mesh& mesh, int iters, int warmup);

}  // namespace ndt
