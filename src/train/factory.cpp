#include "train/factory.h"

#include <cmath>
#include <utility>

#include "base/check.h"
#include "io/model_options.h"
#include "optim/adamw.h"
#include "optim/lamb.h"
#include "optim/lars.h"
#include "optim/sgd.h"

namespace ndt {

std::unique_ptr<Model> make_model(
    const ModelConfig& c, Builder& builder, KeepModule keep) {
  switch (c.kind) {
    case ModelKind::kMlp:
      return build_mlp(mlp_options(c), builder, std::move(keep));
    case ModelKind::kVit:
      return build_vit(vit_options(c), builder, std::move(keep));
    case ModelKind::kGpt:
      return build_gpt(gpt_options(c), builder, std::move(keep));
  }
  return nullptr;
}

std::unique_ptr<Optimizer> make_optimizer(
    const OptimConfig& c, std::vector<Parameter*> params, AxisSumFn axis_sum) {
  switch (c.name) {
    case OptimKind::kSgd: {
      SgdOptions o;
      o.momentum = c.momentum;
      o.nesterov = c.nesterov;
      o.weight_decay = c.weight_decay;
      return std::make_unique<Sgd>(std::move(params), o);
    }
    case OptimKind::kAdamw: {
      AdamWOptions o;
      o.beta1 = c.beta1;
      o.beta2 = c.beta2;
      o.eps = c.eps;
      o.weight_decay = c.weight_decay;
      return std::make_unique<AdamW>(std::move(params), o);
    }
    case OptimKind::kLars: {
      LarsOptions o;
      o.mode = c.lars_mode == LarsModeKind::kPaper ? LarsMode::kPaper
                                                   : LarsMode::kColossal;
      o.momentum = c.momentum;
      o.weight_decay = c.weight_decay;
      o.trust_coef = c.trust_coef;
      o.eps = c.eps;
      o.trust_clip = c.trust_clip;
      o.exclude_no_decay = c.exclude_no_decay;
      return std::make_unique<Lars>(std::move(params), o, std::move(axis_sum));
    }
    case OptimKind::kLamb: {
      LambOptions o;
      o.beta1 = c.beta1;
      o.beta2 = c.beta2;
      o.eps = c.eps;
      o.weight_decay = c.weight_decay;
      o.bias_correction = c.lamb_bias_correction;
      o.trust_clip = c.trust_clip;
      o.exclude_no_decay = c.exclude_no_decay;
      return std::make_unique<Lamb>(std::move(params), o, std::move(axis_sum));
    }
  }
  return nullptr;
}

LrScheduleOptions make_lr_schedule(const Config& c, int64_t train_size) {
  const int64_t B = c.train.batch_size;
  LrScheduleOptions o;
  o.lr = scaled_lr(c.optim.lr, c.optim.scale_lr, B, c.optim.base_batch);
  o.decay = c.optim.schedule;
  o.warmup = c.optim.warmup_steps;
  if (c.optim.warmup_epochs > 0) {
    o.warmup = static_cast<int64_t>(
        std::ceil(static_cast<double>(c.optim.warmup_epochs) * train_size / B));
    NDT_CHECK(
        o.warmup < c.train.steps,
        ConfigError,
        "optim.warmup_epochs (",
        c.optim.warmup_epochs,
        ") is ",
        o.warmup,
        " steps of batch ",
        B,
        " over ",
        train_size,
        " training samples; it must be less than train.steps (",
        c.train.steps,
        ")");
  }
  o.total = c.train.steps;
  o.min_ratio = c.optim.min_lr_ratio;
  o.power = c.optim.power;
  return o;
}

}  // namespace ndt
