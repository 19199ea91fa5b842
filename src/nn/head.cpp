#include "nn/head.h"

#include <cstring>

#include "base/check.h"
#include "nn/builder.h"
#include "ops/ops.h"

namespace ndt {
namespace {

// Adds the loss terms of `logits` [N, V] to stats; returns probs [N, V].
Tensor loss_terms(const Tensor& logits, const Tensor& targets, LossStats& s) {
  int64_t N = logits.dim(0), V = logits.dim(1);
  NDT_ASSERT(
      targets.numel() == N,
      "targets ",
      shape_str(targets.shape()),
      " for logits ",
      shape_str(logits.shape()));
  Tensor losses({N}, MemTag::kActs);
  Tensor probs({N, V}, MemTag::kActs);
  s.loss_sum += ops::cross_entropy_forward(losses, probs, logits, targets);
  s.count += N;
  const float* p = probs.data();
  const int32_t* t = targets.data_i32();
  for (int64_t i = 0; i < N; ++i) {
    const float* row = p + i * V;
    int64_t best = 0;
    for (int64_t v = 1; v < V; ++v) {
      if (row[v] > row[best])
        best = v;
    }
    s.correct += best == t[i];
  }
  return probs;
}

}  // namespace

ClassifierHead::ClassifierHead(
    const ClassifierHeadOptions& options, Builder& builder)
    : options_(options) {
  if (options.layernorm) {
    ln_ = builder.layernorm(options.name + ".ln", options.dim);
  }
  out_ = builder.linear(
      options.name + ".out",
      options.dim,
      options.classes,
      true,
      Act::kNone,
      LinearRole::kReplicated,
      options.init_std);
}

// Order: cls -> select token 0, then LayerNorm (per token, so selecting
// first is exact and cheaper); mean -> LayerNorm, then mean over tokens.
// saved: {probs, targets}; ints: {T} for pooled inputs.
void ClassifierHead::forward(
    const Tensor& x, const Tensor& targets, Context& ctx, LossStats& stats) {
  Tensor h = x;
  ctx.ints.clear();
  switch (options_.pool) {
    case HeadPool::kNone:
      if (ln_)
        h = ln_->forward(h, ctx.child(0));
      break;
    case HeadPool::kCls: {
      int64_t B = x.dim(0), T = x.dim(1), C = x.dim(2);
      Tensor sel({B, C}, MemTag::kActs);
      for (int64_t b = 0; b < B; ++b) {
        std::memcpy(sel.data() + b * C, x.data() + b * T * C, C * 4);
      }
      ctx.ints = {T};
      h = ln_ ? ln_->forward(sel, ctx.child(0)) : sel;
      break;
    }
    case HeadPool::kMean: {
      int64_t B = x.dim(0), T = x.dim(1), C = x.dim(2);
      if (ln_)
        h = ln_->forward(h, ctx.child(0));
      Tensor pooled({B, C}, MemTag::kActs);
      ops::mean_tokens_forward(pooled, h);
      ctx.ints = {T};
      h = pooled;
      break;
    }
  }
  Tensor logits = out_->forward(h, ctx.child(1));
  Tensor probs = loss_terms(logits, targets, stats);
  ctx.saved = {probs, targets};
}

Tensor ClassifierHead::backward(Context& ctx, float scale) {
  Tensor dlogits = ctx.saved.at(0);  // in place over probs
  ops::cross_entropy_backward(dlogits, dlogits, ctx.saved.at(1), scale);
  ctx.saved.clear();
  Tensor dh = out_->backward(dlogits, ctx.child(1));
  switch (options_.pool) {
    case HeadPool::kNone:
      return ln_ ? ln_->backward(dh, ctx.child(0)) : dh;
    case HeadPool::kCls: {
      if (ln_)
        dh = ln_->backward(dh, ctx.child(0));
      int64_t B = dh.dim(0), C = dh.dim(1), T = ctx.ints.at(0);
      Tensor dx = Tensor::zeros({B, T, C}, MemTag::kActs);
      for (int64_t b = 0; b < B; ++b) {
        std::memcpy(dx.data() + b * T * C, dh.data() + b * C, C * 4);
      }
      return dx;
    }
    case HeadPool::kMean: {
      int64_t B = dh.dim(0), C = dh.dim(1), T = ctx.ints.at(0);
      Tensor dx({B, T, C}, MemTag::kActs);
      ops::mean_tokens_backward(dx, dh);
      return ln_ ? ln_->backward(dx, ctx.child(0)) : dx;
    }
  }
  return Tensor();
}

void ClassifierHead::collect_parameters(std::vector<Parameter*>& out) {
  if (ln_)
    ln_->collect_parameters(out);
  out_->collect_parameters(out);
}

LmHead::LmHead(const LmHeadOptions& options, Builder& builder)
    : options_(options) {
  ln_ = builder.layernorm(options.name + ".ln", options.dim);
  out_ = builder.linear(
      options.name + ".out",
      options.dim,
      options.vocab,
      false,
      Act::kNone,
      LinearRole::kReplicated,
      options.init_std);
}

// x [B, T, C], targets [B, T]; saved {probs [B*T, V], targets}.
void LmHead::forward(
    const Tensor& x, const Tensor& targets, Context& ctx, LossStats& stats) {
  Tensor h = ln_->forward(x, ctx.child(0));
  Tensor logits = out_->forward(h, ctx.child(1));
  int64_t V = options_.vocab;
  Tensor flat = logits.view({logits.numel() / V, V});
  Tensor probs = loss_terms(flat, targets.view({flat.dim(0)}), stats);
  ctx.saved = {probs, targets.view({flat.dim(0)})};
  ctx.ints = {x.dim(0), x.dim(1)};
}

Tensor LmHead::backward(Context& ctx, float scale) {
  Tensor dlogits = ctx.saved.at(0);
  ops::cross_entropy_backward(dlogits, dlogits, ctx.saved.at(1), scale);
  ctx.saved.clear();
  Tensor d3 = dlogits.view({ctx.ints.at(0), ctx.ints.at(1), options_.vocab});
  Tensor dh = out_->backward(d3, ctx.child(1));
  return ln_->backward(dh, ctx.child(0));
}

void LmHead::collect_parameters(std::vector<Parameter*>& out) {
  ln_->collect_parameters(out);
  out_->collect_parameters(out);
}

}  // namespace ndt
