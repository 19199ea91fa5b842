// Turns a validated Config into the objects a run needs: the model (through
// a Builder), the optimizer and the learning-rate schedule.
#pragma once

#include <memory>

#include "io/config.h"
#include "nn/builder.h"
#include "nn/model.h"
#include "optim/layer_norms.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"

namespace ndt {

// keep: the modules this rank holds (null: all; see Model).
std::unique_ptr<Model> make_model(
    const ModelConfig& config, Builder& builder, KeepModule keep = nullptr);
// axis_sum: sums over mesh axes for the per-tensor norms of LARS and LAMB
// when parameters are sharded (null: serial layouts).
std::unique_ptr<Optimizer> make_optimizer(
    const OptimConfig& config,
    std::vector<Parameter*> params,
    AxisSumFn axis_sum = nullptr);
// The schedule with the peak rate scaled by optim.scale_lr and the warmup
// in steps (optim.warmup_epochs over `train_size` samples, or
// optim.warmup_steps). Throws ConfigError when the warmup is not shorter
// than train.steps.
LrScheduleOptions make_lr_schedule(const Config& config, int64_t train_size);

}  // namespace ndt
