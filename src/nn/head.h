// Loss heads: the last layers of a model together with its loss.
//
// ClassifierHead: optional pooling of tokens (class token or mean), optional
// LayerNorm, Linear to classes, softmax cross-entropy; counts correct
// predictions. LmHead: LayerNorm, Linear to the vocabulary (no bias),
// cross-entropy over every token. forward() adds the summed loss, the
// number of loss terms and the correct count to LossStats; backward(scale)
// returns d(scale * summed loss)/dx, so the caller chooses the
// normalisation (1 / global number of loss terms).
#pragma once

#include <memory>
#include <string>

#include "nn/head_pool.h"
#include "nn/module.h"

namespace ndt {

class Builder;

struct LossStats {
  double loss_sum = 0;
  int64_t count = 0;    // loss terms (samples or tokens)
  int64_t correct = 0;  // argmax == target
};

class LossHead {
 public:
  virtual ~LossHead() = default;
  // x: final activations; targets: int32 labels, one per loss term.
  virtual void forward(
      const Tensor& x,
      const Tensor& targets,
      Context& ctx,
      LossStats& stats) = 0;
  virtual Tensor backward(Context& ctx, float scale) = 0;
  virtual void collect_parameters(std::vector<Parameter*>& out) = 0;
};

struct ClassifierHeadOptions {
  std::string name = "head";
  int dim = 0;
  int classes = 0;
  bool layernorm = true;
  HeadPool pool = HeadPool::kNone;  // kNone: x is [B, C] already
  float init_std = 0.02f;
};

struct LmHeadOptions {
  std::string name = "head";
  int dim = 0;
  int vocab = 0;
  float init_std = 0.02f;
};

class ClassifierHead final : public LossHead {
 public:
  ClassifierHead(const ClassifierHeadOptions& options, Builder& builder);
  void forward(
      const Tensor& x,
      const Tensor& targets,
      Context& ctx,
      LossStats& stats) override;
  Tensor backward(Context& ctx, float scale) override;
  void collect_parameters(std::vector<Parameter*>& out) override;

 private:
  ClassifierHeadOptions options_;
  std::unique_ptr<Module> ln_;  // may be null
  std::unique_ptr<Module> out_;
};

class LmHead final : public LossHead {
 public:
  LmHead(const LmHeadOptions& options, Builder& builder);
  void forward(
      const Tensor& x,
      const Tensor& targets,
      Context& ctx,
      LossStats& stats) override;
  Tensor backward(Context& ctx, float scale) override;
  void collect_parameters(std::vector<Parameter*>& out) override;

 private:
  LmHeadOptions options_;
  std::unique_ptr<Module> ln_;
  std::unique_ptr<Module> out_;
};

}  // namespace ndt
