// Replicated layers inside a token split (parallel/regions.h): wrappers
// that let a layer which needs every token of a sample run where the
// activations are my tokens [N / tp, C]. Used by 1D tensor parallelism
// with sequence-split regions, alone (tp1d_builder.h) and inside sequence
// parallelism (sp_builder.h), where N counts the sequence-parallel rank's
// tokens.
//
//   SplitOutput   a replicated input layer making every token [B, T, C]:
//                 forward runs it and keeps my tokens; backward
//                 all-gathers dy, so the inner layer's parameter gradients
//                 are whole (the same on every tp rank)
//   GatheredHead  a replicated loss head fed every token: forward
//                 all-gathers my tokens into [N / T, T, C]; backward keeps
//                 my tokens of its input gradient (the same on every tp
//                 rank)
#pragma once

#include <cstdint>
#include <memory>

#include "comm/process_group.h"
#include "nn/head.h"
#include "nn/module.h"
#include "parallel/regions.h"

namespace ndt {

class SplitOutput final : public Module {
 public:
  SplitOutput(std::unique_ptr<Module> inner, ProcessGroup& tp)
      : inner_(std::move(inner)), split_(tp) {}
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override {
    inner_->collect_parameters(out);
  }

 private:
  std::unique_ptr<Module> inner_;
  SplitTokens split_;
};

class GatheredHead final : public LossHead {
 public:
  // tokens_per_sample: T of the gathered [N / T, T, C].
  GatheredHead(
      std::unique_ptr<LossHead> inner,
      ProcessGroup& tp,
      int64_t tokens_per_sample)
      : inner_(std::move(inner)), gather_(tp, tokens_per_sample, false) {}
  void forward(
      const Tensor& x,
      const Tensor& targets,
      Context& ctx,
      LossStats& stats) override;
  Tensor backward(Context& ctx, float scale) override;
  void collect_parameters(std::vector<Parameter*>& out) override {
    inner_->collect_parameters(out);
  }

 private:
  std::unique_ptr<LossHead> inner_;
  GatherTokens gather_;
};

}  // namespace ndt
