// ZeRO stage 3: which parameter buckets a data-parallel rank must gather
// (broadcast from their owners) before each gather unit runs.
//
// A gather unit is one layer of a module that reads parameters (its
// ParamDesc::layer; a module of one layer is one unit), numbered over the
// model in forward order (GatherUnits); with recompute every module is one
// unit, as its forward runs again inside backward and reads them all.
// A bucket's values live in one slot (assign_slots over the units' spans
// with no owners, so the same slots on every rank of the group). Before
// unit u's forward (or backward) every bucket holding a parameter of u must
// be in its slot, and those of the next unit (u + 1 forward, u - 1
// backward) are fetched now too, so that their broadcasts run while u
// computes. A bucket still in its slot from an earlier pass is not fetched
// again until the parameters change (invalidate(): the optimizer's update,
// a checkpoint load): the head's buckets at the turn from forward to
// backward, and whatever the slots kept from one micro-batch (or
// evaluation batch) to the next. The owner of a bucket follows the same
// bookkeeping (its own values are always current; it is the root of the
// broadcasts), so every rank of the group issues the same broadcasts in
// the same order. Pure: no communication; the plan counts with it too.
#pragma once

#include <vector>

#include "parallel/buckets.h"

namespace ndt {

// The gather units of a model: module m's layer k is unit first[m] + k,
// or first[m] for every layer when not per_layer.
struct GatherUnits {
  std::vector<int> first;  // per module: its first unit
  std::vector<int> count;  // per module: its units (at least 1)
  bool per_layer = true;

  int total() const {
    return first.empty() ? 0 : first.back() + count.back();
  }
  int unit(int m, int layer) const {
    return first.at(m) + (per_layer ? layer : 0);
  }
  int last(int m) const {
    return first.at(m) + count.at(m) - 1;
  }
};

// `layers[m]`: the layers of module m that read parameters (its largest
// ParamDesc::layer + 1; 0 without parameters). per_layer false: one unit
// per module (recompute).
GatherUnits gather_units(const std::vector<int>& layers, bool per_layer);

class ParamGathers {
 public:
  // `spans`: each bucket's units (bucket_spans over the parameters' units);
  // `slot_of`: its slot.
  ParamGathers(
      const std::vector<ModuleSpan>& spans,
      const std::vector<int>& slot_of,
      int num_units);

  // The buckets holding parameters of unit u, in bucket order.
  const std::vector<int>& of_unit(int u) const {
    return of_unit_.at(u);
  }
  // Before unit u's forward (`forward`) or backward: the buckets to
  // broadcast now, in order (u's own first, then the next unit's), each
  // recorded as in its slot from here on.
  std::vector<int> before(int u, bool forward);
  // No slot holds current values any more.
  void invalidate();

 private:
  std::vector<ModuleSpan> spans_;
  std::vector<int> slot_of_;
  std::vector<std::vector<int>> of_unit_;
  std::vector<int> holder_;  // per slot: the bucket it holds, -1: none
};

}  // namespace ndt
