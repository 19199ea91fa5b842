#include "parallel/threads_grad_sync.h"

#include "base/fault.h"
#include "ops/ops.h"

namespace ndt {

void ThreadsGradSync::finish() {
  const int r = group_.rank();
  for (Parameter* p : params_) {
    if (NDT_FAULT(kDpGradScale) && r == 1)
      ops::scale_(p->grad, 1.5f);
    group_.reduce(
        p->grad.data(), r == 0 ? p->grad.data() : nullptr, p->grad.numel(), 0);
    if (NDT_FAULT(kDpMeanNotSum) && r == 0)
      ops::scale_(p->grad, 1.0f / float(group_.size()));
  }
}

}  // namespace ndt
