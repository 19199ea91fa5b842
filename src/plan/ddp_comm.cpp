#include "plan/ddp_comm.h"

#include <algorithm>
#include <utility>

#include "parallel/buckets.h"
#include "parallel/param_gathers.h"

namespace ndt {
namespace {

bool holds(const std::vector<bool>& held, int m) {
  return held.empty() || held.at(m);
}

// The held parameters in backward order (head first; within a module,
// its parameters in reverse), as (module, index in the module).
std::vector<std::pair<int, int>> backward_order(
    const ModelShape& shape, const std::vector<bool>& held) {
  std::vector<std::pair<int, int>> out;
  for (int m = shape.head(); m >= 0; --m) {
    if (!holds(held, m))
      continue;
    const int n = static_cast<int>(shape.modules[m].params.size());
    for (int i = n - 1; i >= 0; --i)
      out.emplace_back(m, i);
  }
  return out;
}

// As DistributedDataParallel cuts them; `owners` ranks own them under ZeRO
// (1: none).
std::vector<Bucket> buckets_of(
    const ModelShape& shape,
    const std::vector<bool>& held,
    int64_t bucket_bytes,
    int owners = 1) {
  std::vector<int64_t> numels;
  std::vector<int> module_of;
  for (const auto& [m, i] : backward_order(shape, held)) {
    numels.push_back(shape.modules[m].params[i].numel_local);
    module_of.push_back(m);
  }
  std::vector<bool> all = held;
  if (all.empty())
    all.assign(shape.num_modules(), true);
  return assign_buckets(
      numels, bucket_bytes, split_at_gaps(module_of, all), owners);
}

// The gather units (ParamGathers) of the shape: ZeRO's slots serve them.
GatherUnits units_of(const ModelShape& shape, bool per_layer) {
  std::vector<int> layers;
  for (const ModuleShape& m : shape.modules) {
    int n = 0;
    for (const ParamShape& p : m.params)
      n = std::max(n, p.layer + 1);
    layers.push_back(n);
  }
  return gather_units(layers, per_layer);
}

// Each bucket's span of gather units (the slots' spans).
std::vector<ModuleSpan> unit_spans_of(
    const ModelShape& shape,
    const std::vector<bool>& held,
    const std::vector<Bucket>& buckets,
    const GatherUnits& units) {
  std::vector<int> unit_of;  // per parameter in backward order
  for (const auto& [m, i] : backward_order(shape, held))
    unit_of.push_back(units.unit(m, shape.modules[m].params[i].layer));
  return bucket_spans(buckets, unit_of);
}

}  // namespace

std::vector<int64_t> ddp_bucket_numels(
    const ModelShape& shape,
    const std::vector<bool>& held,
    int64_t bucket_bytes,
    int owners) {
  std::vector<int64_t> out;
  for (const Bucket& b : buckets_of(shape, held, bucket_bytes, owners))
    out.push_back(b.numel);
  return out;
}

CommVolume ddp_step_comm(
    const ModelShape& shape,
    const std::vector<bool>& held,
    int dp,
    int64_t bucket_bytes,
    int zero,
    int microbatches,
    const std::vector<ModulePass>& passes,
    bool per_layer) {
  CommVolume v;
  if (dp <= 1)
    return v;
  const std::vector<Bucket> buckets =
      buckets_of(shape, held, bucket_bytes, zero > 0 ? dp : 1);
  for (const Bucket& b : buckets) {
    if (zero == 0) {
      v.add(OpType::kAllReduce, 1, b.numel);
      continue;
    }
    v.add(OpType::kReduce, zero >= 2 ? microbatches : 1, b.numel);
    if (zero <= 2)
      v.add(OpType::kBroadcast, 1, b.numel);
  }
  if (zero != 3)
    return v;
  std::vector<ModulePass> order = passes;
  if (order.empty()) {
    for (int k = 0; k < microbatches; ++k) {
      order.push_back({true, 0, shape.head()});
      order.push_back({false, 0, shape.head()});
    }
  }
  const GatherUnits units = units_of(shape, per_layer);
  const std::vector<ModuleSpan> spans =
      unit_spans_of(shape, held, buckets, units);
  // The slots are the same on every rank: any owners, any rank.
  const Slots slots = assign_value_slots(
      buckets, spans, std::vector<int>(buckets.size(), 0), 0);
  ParamGathers gathers(spans, slots.slot_of, units.total());
  for (const ModulePass& pass : order) {
    const int first = units.first.at(pass.first), last = units.last(pass.last);
    for (int k = first; k <= last; ++k) {
      const int u = pass.forward ? k : first + last - k;
      for (int b : gathers.before(u, pass.forward))
        v.add(OpType::kBroadcast, 1, buckets[b].numel);
    }
  }
  return v;
}

std::vector<std::vector<bool>> zero_updated_params(
    const ModelShape& shape,
    const std::vector<bool>& held,
    int64_t bucket_bytes,
    int ranks,
    int rank) {
  std::vector<std::vector<bool>> out;
  for (const ModuleShape& m : shape.modules)
    out.emplace_back(m.params.size(), false);
  const std::vector<std::pair<int, int>> order = backward_order(shape, held);
  const std::vector<Bucket> buckets =
      buckets_of(shape, held, bucket_bytes, ranks);
  const std::vector<int> owners = assign_bucket_owners(buckets, ranks);
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (owners[b] != rank)
      continue;
    for (int k : buckets[b].params)
      out[order[k].first][order[k].second] = true;
  }
  return out;
}

namespace {

// Elements of the buckets `rank` owns plus the capacity of its slots.
int64_t owned_and_slots(
    const std::vector<Bucket>& buckets,
    const std::vector<int>& owners,
    int rank,
    const Slots& slots) {
  int64_t n = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (owners[b] == rank)
      n += buckets[b].numel;
  }
  for (int64_t c : slots.capacity)
    n += c;
  return n;
}

}  // namespace

int64_t zero2_grad_elements(
    const ModelShape& shape,
    const std::vector<bool>& held,
    int64_t bucket_bytes,
    int ranks,
    int rank,
    bool per_layer) {
  const std::vector<Bucket> buckets =
      buckets_of(shape, held, bucket_bytes, ranks);
  const std::vector<int> owners = assign_bucket_owners(buckets, ranks);
  const GatherUnits units = units_of(shape, per_layer);
  return owned_and_slots(
      buckets,
      owners,
      rank,
      assign_slots(
          buckets, unit_spans_of(shape, held, buckets, units), owners, rank));
}

int64_t zero3_param_elements(
    const ModelShape& shape,
    const std::vector<bool>& held,
    int64_t bucket_bytes,
    int ranks,
    int rank,
    bool per_layer) {
  const std::vector<Bucket> buckets =
      buckets_of(shape, held, bucket_bytes, ranks);
  const std::vector<int> owners = assign_bucket_owners(buckets, ranks);
  const GatherUnits units = units_of(shape, per_layer);
  return owned_and_slots(
      buckets,
      owners,
      rank,
      assign_value_slots(
          buckets, unit_spans_of(shape, held, buckets, units), owners, rank));
}

CommVolume ddp_startup_comm(
    const ModelShape& shape, const std::vector<bool>& held, int dp) {
  CommVolume v;
  if (dp <= 1)
    return v;
  int64_t params = 0;
  for (int m = 0; m < shape.num_modules(); ++m) {
    if (holds(held, m))
      params += static_cast<int64_t>(shape.modules[m].params.size());
  }
  v.add(OpType::kAllReduce, 2, 2 * params, kFp64Bytes);
  return v;
}

CommVolume threads_dp_step_comm(const ModelShape& shape, int dp) {
  CommVolume v;
  if (dp <= 1)
    return v;
  for (const ModuleShape& m : shape.modules) {
    for (const ParamShape& p : m.params) {
      v.add(OpType::kBroadcast, 1, p.numel_local);
      v.add(OpType::kReduce, 1, p.numel_local);
    }
  }
  return v;
}

}  // namespace ndt
