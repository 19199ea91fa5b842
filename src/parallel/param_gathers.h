// ZeRO stage 3: which parameter buckets a data-parallel rank must gather
// (broadcast from their owners) before each module runs.
//
// A bucket's values live in one slot (assign_slots with no owners, so the
// same slots on every rank of the group). Before module m's forward (or
// backward) every bucket holding a parameter of m must be in its slot,
// and those of the next module (m + 1 forward, m - 1 backward) are
// fetched now too, so that their broadcasts run while m computes. A
// bucket still in its slot from an earlier pass is not fetched again
// until the parameters change (invalidate(): the optimizer's update, a
// checkpoint load): the head's buckets at the turn from forward to
// backward, and whatever the slots kept from one micro-batch (or
// evaluation batch) to the next. The owner of a bucket follows the same
// bookkeeping (its own values are always current; it is the root of the
// broadcasts), so every rank of the group issues the same broadcasts in
// the same order. Pure: no communication; the plan counts with it too.
#pragma once

#include <vector>

#include "parallel/buckets.h"

namespace ndt {

class ParamGathers {
 public:
  // `spans`: each bucket's modules (bucket_spans); `slot_of`: its slot.
  ParamGathers(
      const std::vector<ModuleSpan>& spans,
      const std::vector<int>& slot_of,
      int num_modules);

  // The buckets holding parameters of module m, in bucket order.
  const std::vector<int>& of_module(int m) const {
    return of_module_.at(m);
  }
  // Before module m's forward (`forward`) or backward: the buckets to
  // broadcast now, in order (m's own first, then the next module's), each
  // recorded as in its slot from here on.
  std::vector<int> before(int m, bool forward);
  // No slot holds current values any more.
  void invalidate();

 private:
  std::vector<ModuleSpan> spans_;
  std::vector<int> slot_of_;
  std::vector<std::vector<int>> of_module_;
  std::vector<int> holder_;  // per slot: the bucket it holds, -1: none
};

}  // namespace ndt
