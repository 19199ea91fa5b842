#include "parallel/tp1d_norm.h"

#include <vector>

#include "base/check.h"
#include "base/fault.h"
#include "ops/ops.h"

namespace ndt {

// ---- TpGradSum
// --------------------------------------------------------------------

TpGradSum::TpGradSum(std::unique_ptr<Module> inner, ProcessGroup& tp)
    : inner_(std::move(inner)), tp_(tp) {
  NDT_ASSERT(inner_ != nullptr, "TpGradSum of a null module");
}

Tensor TpGradSum::forward(const Tensor& x, Context& ctx) {
  return inner_->forward(x, ctx);
}

// The grads may be slices of a data-parallel bucket, so they are updated
// in place: park the accumulated values, let the inner backward accumulate
// into zeroed grads (which then hold exactly this call's contribution),
// sum the contributions over tp in one all-reduce, and add the parked
// values back. Adding the parked values afterwards (rather than
// subtracting them out) keeps grad_before + all_reduce(contribution) exact.
Tensor TpGradSum::backward(const Tensor& dy, Context& ctx) {
  std::vector<Parameter*> params = inner_->parameters();
  int64_t total = 0;
  for (Parameter* p : params)
    total += p->grad.numel();
  Tensor parked({total}, MemTag::kActs);
  int64_t at = 0;
  for (Parameter* p : params) {
    parked.slice(at, p->grad.shape()).copy_(p->grad);
    p->grad.zero_();
    at += p->grad.numel();
  }
  Tensor dx = inner_->backward(dy, ctx);
  // One collective: pack the contributions into `flat`.
  Tensor flat({total}, MemTag::kComm);
  at = 0;
  for (Parameter* p : params) {
    flat.slice(at, p->grad.shape()).copy_(p->grad);
    at += p->grad.numel();
  }
  if (total > 0 && !NDT_FAULT(kTpSeqNormGrad))
    tp_.all_reduce(flat.data(), total);
  at = 0;
  for (Parameter* p : params) {
    p->grad.copy_(flat.slice(at, p->grad.shape()));
    ops::add_(p->grad, parked.slice(at, p->grad.shape()));
    at += p->grad.numel();
  }
  return dx;
}

void TpGradSum::collect_parameters(std::vector<Parameter*>& out) {
  inner_->collect_parameters(out);
}

// ---- TokenSplitDropout
// -------------------------------------------------------------

TokenSplitDropout::TokenSplitDropout(
    const std::string& name,
    float p,
    ProcessGroup& tp,
    int64_t tokens_per_sample)
    : Dropout(name, p), tp_(tp), T_(tokens_per_sample) {
  NDT_CHECK(
      tokens_per_sample > 0,
      ConfigError,
      name,
      ": tokens_per_sample must be > 0");
}

// Global index of my first element: the micro-batch's first sample times
// the elements per sample (T * C), plus the tokens of the ranks before me
// (x holds N/tp tokens, so r * numel(x)).
uint64_t TokenSplitDropout::offset(const Tensor& x, const RunState& run) const {
  const uint64_t C = static_cast<uint64_t>(x.dim(-1));
  return static_cast<uint64_t>(run.sample_offset) * static_cast<uint64_t>(T_) *
             C +
         static_cast<uint64_t>(tp_.rank()) * static_cast<uint64_t>(x.numel());
}

}  // namespace ndt
