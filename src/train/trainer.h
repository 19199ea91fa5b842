// The single-process training loop: data, model, optimizer, schedule,
// progress lines, metrics.jsonl, evaluation and checkpoints.
//
// Step s trains on global samples [s*B, (s+1)*B) with learning rate
// lr_at(s); dropout masks are keyed by step. Everything a step depends on is
// therefore a function of (config, step, checkpointed state), which is why a
// resumed run reproduces an uninterrupted one bit for bit.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "comm/mesh.h"
#include "io/config.h"

namespace ndt {

struct StepInfo {
  int64_t step = 0;  // 0-based index of the step just taken
  double loss = 0;
  float lr = 0;
  double grad_norm = 0;
};

struct TrainOptions {
  std::function<void(const StepInfo&)> on_step;  // after each step
  std::ostream* out = nullptr;                   // progress; null: stdout
};

struct TrainSummary {
  int64_t steps = 0;           // steps completed in total
  std::vector<double> losses;  // training loss of each step run here
  double eval_loss = NAN;
  double eval_accuracy = NAN;  // classifiers only
  double train_seconds = 0;
  std::string run_dir;
  std::string checkpoint;  // last checkpoint written
};

// Trains on the job's mesh (axes of mesh_axes(config)); only world rank 0
// prints and writes files.
TrainSummary run_training(
    const Config& config, const TrainOptions& options, Mesh& mesh);
// One process: a mesh of one rank.
TrainSummary run_training(const Config& config, const TrainOptions& options);

}  // namespace ndt
