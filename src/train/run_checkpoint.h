// A run's checkpoints in global form: whatever the layout, a checkpoint
// holds every parameter and optimizer-state tensor whole, under the serial
// model's names ("blocks.0.attn.qkv.weight", "<param>.exp_avg"), so a
// checkpoint saved by any layout loads into any other (serial, data
// parallel, pipeline with any stage count or schedule).
//
// Saving is collective over the job, one parameter at a time: its stage
// makes it whole and sends it with its optimizer states to the job's first
// rank, which appends them to the directory's files (io/checkpoint.h,
// atomic). Loading: every rank reads the tensors one at a time and takes
// its block of those it holds. Neither holds more than one whole parameter
// with its states beyond the rank's own share.
#pragma once

#include <cstdint>
#include <string>

#include "io/config.h"
#include "train/engine.h"

namespace ndt {

// Collective over every rank of engine.mesh(). Returns the checkpoint
// directory on the writing rank, "" on the others.
std::string save_run_checkpoint(
    const Config& config, Engine& engine, int64_t step);

// Loads `dir` into the engine's model and optimizer after checking that it
// holds the configured model and batch size; returns the step to continue
// from. Throws ConfigError / CheckpointError naming the problem.
int64_t load_run_checkpoint(
    const Config& config, const std::string& dir, Engine& engine);

}  // namespace ndt
