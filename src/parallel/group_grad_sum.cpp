#include "parallel/group_grad_sum.h"

#include "base/check.h"
#include "ops/ops.h"

namespace ndt {

GroupGradSum::GroupGradSum(
    std::unique_ptr<Module> inner, ProcessGroup& group, Fault skip_fault)
    : inner_(std::move(inner)), group_(group), skip_fault_(skip_fault) {
  NDT_ASSERT(inner_ != nullptr, "GroupGradSum of a null module");
}

Tensor GroupGradSum::forward(const Tensor& x, Context& ctx) {
  return inner_->forward(x, ctx);
}

// The grads may be slices of a data-parallel bucket, so they are updated
// in place: park the accumulated values, let the inner backward accumulate
// into zeroed grads (which then hold exactly this call's contribution),
// sum the contributions over the group in one all-reduce, and add the
// parked values back. Adding the parked values afterwards (rather than
// subtracting them out) keeps grad_before + all_reduce(contribution) exact.
Tensor GroupGradSum::backward(const Tensor& dy, Context& ctx) {
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
  if (total > 0 && !NDT_FAULT_IS(skip_fault_))
    group_.all_reduce(flat.data(), total);
  at = 0;
  for (Parameter* p : params) {
    p->grad.copy_(flat.slice(at, p->grad.shape()));
    ops::add_(p->grad, parked.slice(at, p->grad.shape()));
    at += p->grad.numel();
  }
  return dx;
}

void GroupGradSum::collect_parameters(std::vector<Parameter*>& out) {
  inner_->collect_parameters(out);
}

}  // namespace ndt
