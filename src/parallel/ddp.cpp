#include "parallel/ddp.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "base/check.h"
#include "base/fault.h"
#include "ops/ops.h"

namespace ndt {
namespace {

double now_s() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Waits for `w` if it is in flight, and drops it.
void settle(std::unique_ptr<Work>& w) {
  if (w) {
    w->wait();
    w.reset();
  }
}

// The modules a built model holds.
std::vector<bool> held_modules(const Model& model) {
  std::vector<bool> out;
  for (int m = 0; m < model.num_modules(); ++m)
    out.push_back(model.has_module(m));
  return out;
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(
    Model& model, ProcessGroup& group, int64_t bucket_bytes, int zero)
    : DistributedDataParallel(
          model.described_modules(),
          held_modules(model),
          group,
          bucket_bytes,
          zero) {
  for (int m = 0; m < model.num_modules(); ++m) {
    if (model.has_module(m))
      adopt(m, model.module_parameters(m));
  }
  attach(model);
}

DistributedDataParallel::DistributedDataParallel(
    const std::vector<std::vector<ParamDesc>>& modules,
    const std::vector<bool>& held,
    ProcessGroup& group,
    int64_t bucket_bytes,
    int zero,
    bool per_layer)
    : group_(group), zero_(zero), shard_(zero >= 1) {
  NDT_ASSERT(zero >= 0 && zero <= 3, "ZeRO stage ", zero);
  NDT_ASSERT(modules.size() == held.size());
  const int n_modules = static_cast<int>(modules.size());
  std::vector<int> layers;  // per module
  for (const std::vector<ParamDesc>& ps : modules) {
    int n = 0;
    for (const ParamDesc& d : ps)
      n = std::max(n, d.layer + 1);
    layers.push_back(n);
  }
  units_ = gather_units(layers, per_layer);
  // Backward order: head, last block, ..., input layer; within a module,
  // its parameters in reverse declaration order.
  std::vector<int64_t> numels;
  module_first_.assign(n_modules, -1);
  for (int m = n_modules - 1; m >= 0; --m) {
    if (!held[m])
      continue;
    module_first_[m] = static_cast<int>(numels.size());
    for (auto it = modules[m].rbegin(); it != modules[m].rend(); ++it) {
      numels.push_back(it->numel);
      module_of_.push_back(m);
      unit_of_.push_back(units_.unit(m, it->layer));
    }
  }
  params_.assign(numels.size(), nullptr);
  initial_sums_.assign(2 * numels.size(), 0.0);
  // A pipeline rank's chunks keep their buckets apart; under ZeRO the
  // buckets are small enough for every rank to own a share.
  buckets_ = assign_buckets(
      numels,
      bucket_bytes,
      split_at_gaps(module_of_, held),
      shard_ ? group_.size() : 1);
  if (shard_)
    owner_ = assign_bucket_owners(buckets_, group_.size());
  // ZeRO stages 2 and 3: the gradients of the other ranks' buckets go to
  // shared slots; stage 3: their values too. Both are needed unit by unit.
  slot_of_.assign(buckets_.size(), -1);
  const bool sliced = zero_ >= 2 && group_.size() > 1;
  const std::vector<ModuleSpan> spans = bucket_spans(buckets_, unit_of_);
  if (sliced) {
    const Slots gs = assign_slots(buckets_, spans, owner_, group_.rank());
    slot_of_ = gs.slot_of;
    for (int64_t n : gs.capacity)
      slots_.push_back(Tensor::zeros({n}, MemTag::kGrads));
    slot_user_.assign(slots_.size(), -1);
    starts_in_.resize(units_.total());
    for (size_t b = 0; b < buckets_.size(); ++b)
      starts_in_[spans[b].first].push_back(static_cast<int>(b));
  }
  if (shard_ && zero_ <= 2) {
    buckets_of_unit_ = buckets_of_units(spans, units_.total());
    broadcast_work_.resize(buckets_.size());
  }
  if (sliced && zero_ == 3) {
    const Slots vs = assign_value_slots(buckets_, spans, owner_, group_.rank());
    value_slot_of_ = vs.slot_of;
    for (int64_t n : vs.capacity)  // 0: the slot holds only my buckets
      value_slots_.push_back(Tensor::zeros({n}, MemTag::kParams));
    value_slot_user_.assign(value_slots_.size(), -1);
    gathers_ =
        std::make_unique<ParamGathers>(spans, value_slot_of_, units_.total());
    gather_work_.resize(buckets_.size());
  }
  // Each bucket's gradients (ZeRO stages 2 and 3: the other ranks' in a
  // slot) and, under sharding, values (stage 3: the other ranks' in a
  // slot, gathered when read), so that one collective per bucket moves
  // them; adopt() makes the parameters views of them.
  bucket_of_.resize(params_.size());
  offset_of_.resize(params_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bk = buckets_[b];
    flat_.push_back(
        slot_of_[b] >= 0 ? slots_[slot_of_[b]].slice(0, {bk.numel})
                         : Tensor::zeros({bk.numel}, MemTag::kGrads));
    for (size_t k = 0; k < bk.params.size(); ++k) {
      bucket_of_[bk.params[k]] = static_cast<int>(b);
      offset_of_[bk.params[k]] = bk.offsets[k];
    }
    if (shard_) {
      const bool slot = gathers_ && owner_[b] != group_.rank();
      values_.push_back(
          slot ? value_slots_[value_slot_of_[b]].slice(0, {bk.numel})
               : Tensor::zeros({bk.numel}, MemTag::kParams));
    }
  }
  pending_.resize(buckets_.size());
  rearm();
  work_.resize(buckets_.size());
}

void DistributedDataParallel::adopt(
    int m, const std::vector<Parameter*>& params) {
  NDT_ASSERT(
      m >= 0 && m < static_cast<int>(module_first_.size()) &&
          module_first_[m] >= 0,
      "module ",
      m,
      " is not held");
  for (size_t j = 0; j < params.size(); ++j) {
    const size_t i = module_first_[m] + (params.size() - 1 - j);
    Parameter* p = params[j];
    NDT_ASSERT(
        i < params_.size() && module_of_[i] == m && params_[i] == nullptr,
        "parameter '",
        p->name,
        "' adopted twice or out of place");
    params_[i] = p;
    double sum = 0, sq = 0;
    const float* v = p->value.data();
    for (int64_t e = 0; e < p->value.numel(); ++e) {
      sum += v[e];
      sq += double(v[e]) * v[e];
    }
    initial_sums_[2 * i] = sum;
    initial_sums_[2 * i + 1] = sq;
    const int b = bucket_of_[i];
    NDT_ASSERT(offset_of_[i] + p->grad.numel() <= buckets_[b].numel);
    Tensor grad = flat_[b].slice(offset_of_[i], p->grad.shape());
    grad.copy_(p->grad);
    p->grad = grad;  // the grad now lives in the bucket
    if (shard_) {
      Tensor value = values_[b].slice(offset_of_[i], p->value.shape());
      if (!gathers_ || owner_[b] == group_.rank())
        value.copy_(p->value);
      p->value = value;
    }
  }
}

void DistributedDataParallel::attach(Model& model) {
  for (Parameter* p : params_)
    NDT_ASSERT(p != nullptr, "a held module's parameters were not adopted");
  model_ = &model;
  if (!starts_in_.empty()) {  // ZeRO stages 2 and 3
    model.on_backward_begin = [this](int m) {
      on_unit_backward(units_.last(m), true);
    };
  }
  if (gathers_) {
    model.on_forward_begin = [this](int m) {
      gather_values(units_.first[m], true);
    };
  } else if (!broadcast_work_.empty()) {
    model.on_forward_begin = [this](int m) { settle_unit(units_.first[m]); };
  }
  if (units_.per_layer) {
    model.on_layer_begin = [this](int m, int layer, bool forward) {
      on_layer_begin(m, layer, forward);
    };
  }
  // The module's first unit (the others were done at the layer hooks).
  model.on_backward_done = [this](int m) { on_unit_done(units_.first[m]); };
  model.on_comm_poll = [this] { progress(); };
}

DistributedDataParallel::~DistributedDataParallel() {
  if (model_ == nullptr)
    return;
  model_->on_backward_begin = nullptr;
  model_->on_forward_begin = nullptr;
  model_->on_layer_begin = nullptr;
  model_->on_backward_done = nullptr;
  model_->on_comm_poll = nullptr;
}

void DistributedDataParallel::check_replicas_identical() {
  // Per parameter: sum and sum of squares in double of the values it had
  // when DDP took it over; max and -min over ranks must agree exactly.
  std::vector<double> lo, hi = initial_sums_;
  for (double x : hi)
    lo.push_back(-x);
  std::vector<double> mine = hi;
  group_.all_reduce(hi.data(), static_cast<int64_t>(hi.size()), ReduceOp::kMax);
  group_.all_reduce(lo.data(), static_cast<int64_t>(lo.size()), ReduceOp::kMax);
  for (size_t i = 0; i < mine.size(); ++i) {
    NDT_CHECK(
        hi[i] == -lo[i],
        ConfigError,
        "rank ",
        group_.rank(),
        ": data-parallel replicas differ in parameter '",
        params_[i / 2]->name,
        "' at start (all ranks must build the same model and seed)");
  }
}

int DistributedDataParallel::owner(const Parameter& p) const {
  if (!shard_)
    return group_.rank();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i] == &p)
      return owner_[bucket_of_[i]];
  }
  NDT_ASSERT(false, "parameter '", p.name, "' is not in the model");
  return -1;
}

std::vector<Parameter*> DistributedDataParallel::owned_parameters() const {
  // params_ reversed is the model's order.
  std::vector<Parameter*> out;
  for (auto it = params_.rbegin(); it != params_.rend(); ++it) {
    if (owner(**it) == group_.rank())
      out.push_back(*it);
  }
  return out;
}

std::vector<int64_t> DistributedDataParallel::owned_elements() const {
  NDT_ASSERT(shard_, "owned_elements() without ZeRO");
  std::vector<int64_t> out(group_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b)
    out[owner_[b]] += buckets_[b].numel;
  return out;
}

void DistributedDataParallel::broadcast_parameters() {
  if (!shard_ || group_.size() == 1)
    return;
  if (gathers_) {
    // Stage 3: the next forward gathers the new values.
    if (!NDT_FAULT(kZero3StaleValues))
      gathers_->invalidate();
    return;
  }
  if (NDT_FAULT(kZeroSkipBroadcast))
    return;
  settle_broadcasts();
  // Forward order: the input layer's buckets (the last in backward order)
  // are the first the next forward reads.
  for (int b = static_cast<int>(values_.size()) - 1; b >= 0; --b) {
    broadcast_work_[b] = group_.broadcast_async(
        values_[b].data(), values_[b].numel(), owner_[b]);
  }
  if (!defer_)
    settle_broadcasts();
}

void DistributedDataParallel::settle_broadcasts() {
  for (auto& w : broadcast_work_)
    settle(w);
}

void DistributedDataParallel::settle_unit(int unit) {
  if (NDT_FAULT(kZeroDeferNoWait))
    return;
  const double t0 = now_s();
  bool waited = false;
  for (int b : buckets_of_unit_[unit]) {
    if (broadcast_work_[b]) {
      settle(broadcast_work_[b]);
      waited = true;
    }
  }
  if (waited)
    exposed_s_ += now_s() - t0;
}

void DistributedDataParallel::values_written() {
  if (gathers_)
    gathers_->invalidate();
}

void DistributedDataParallel::gather_values(int unit, bool forward) {
  const double t0 = now_s();
  for (int b : gathers_->before(unit, forward)) {
    // The slot's previous bucket: its broadcast must be done writing.
    const int s = value_slot_of_[b];
    if (value_slot_user_[s] >= 0)
      settle(gather_work_[value_slot_user_[s]]);
    value_slot_user_[s] = b;
    gather_work_[b] = group_.broadcast_async(
        values_[b].data(), values_[b].numel(), owner_[b]);
  }
  for (int b : gathers_->of_unit(unit))
    settle(gather_work_[b]);
  exposed_s_ += now_s() - t0;
}

void DistributedDataParallel::rearm() {
  for (size_t b = 0; b < buckets_.size(); ++b)
    pending_[b] = static_cast<int>(buckets_[b].params.size());
  launched_ = 0;
}

void DistributedDataParallel::check_all_launched() const {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    NDT_ASSERT(
        pending_[b] == 0,
        "bucket ",
        b,
        " was not launched: ",
        pending_[b],
        " of its ",
        buckets_[b].params.size(),
        " parameters' gradients are not final");
  }
}

void DistributedDataParallel::wait_bucket(int b) {
  settle(work_[b]);  // null: bucket_skip's, or waited for already
}

int64_t DistributedDataParallel::grad_elements() const {
  int64_t n = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (slot_of_[b] < 0)
      n += buckets_[b].numel;
  }
  for (const Tensor& s : slots_)
    n += s.numel();
  return n;
}

int64_t DistributedDataParallel::param_elements() const {
  int64_t n = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (!gathers_ || owner_[b] == group_.rank())
      n += buckets_[b].numel;
  }
  for (const Tensor& s : value_slots_)
    n += s.numel();
  return n;
}

void DistributedDataParallel::begin_backward(bool last) {
  sync_ = last || zero_ >= 2;
}

void DistributedDataParallel::on_layer_begin(int m, int layer, bool forward) {
  const int u = units_.unit(m, layer);
  const bool gather = gathers_ && !NDT_FAULT(kZero3SkipLayerGather);
  if (forward) {
    // The module's first unit: on_forward_begin gathered (or settled) it.
    if (u == units_.first[m])
      return;
    if (gather)
      gather_values(u, true);
    else if (!broadcast_work_.empty())
      settle_unit(u);
    return;
  }
  // The module's last unit: on_backward_begin readied it.
  if (u == units_.last(m))
    return;
  on_unit_done(u + 1);  // the layer after it, whose backward just ran
  on_unit_backward(u, gather);
}

void DistributedDataParallel::on_unit_backward(int unit, bool gather) {
  if (gathers_ && gather)
    gather_values(unit, false);
  if (starts_in_.empty())
    return;
  // ZeRO stages 2 and 3: the buckets whose first gradients `unit`
  // computes. The reduce of the bucket's previous micro-batch (it writes
  // the owner's sum) and of the slot's previous bucket (it reads the slot)
  // must be done before they are written; then the bucket counts its
  // parameters afresh (each backward reduces it).
  const double t0 = now_s();
  for (int b : starts_in_[unit]) {
    wait_bucket(b);
    pending_[b] = static_cast<int>(buckets_[b].params.size());
    const int s = slot_of_[b];
    if (s < 0)
      continue;
    if (slot_user_[s] >= 0)
      wait_bucket(slot_user_[s]);
    slot_user_[s] = b;
    if (!NDT_FAULT(kZero2StaleSlot))
      ops::zero_(flat_[b]);
  }
  exposed_s_ += now_s() - t0;
}

void DistributedDataParallel::on_unit_done(int unit) {
  if (!sync_ || group_.size() == 1)
    return;
  // Parameters of `unit` are final: count them off their buckets and
  // launch every bucket that became complete, in bucket order.
  for (size_t i = 0; i < params_.size(); ++i) {
    if (unit_of_[i] != unit)
      continue;
    int b = bucket_of_[i];
    if (--pending_[b] == 0) {
      if (launched_ == 0)
        first_launch_ = now_s();
      if (NDT_FAULT(kDpGradScale) && group_.rank() == 1)
        ops::scale_(flat_[b], 1.5f);
      ++launched_;
      if (NDT_FAULT(kBucketSkip) && b == 0)
        continue;
      NDT_ASSERT(!work_[b], "bucket ", b, "'s previous reduce is in flight");
      if (shard_) {
        // ZeRO: only the bucket's owner needs the sum.
        const bool mine = owner_[b] == group_.rank();
        work_[b] = group_.reduce_async(
            flat_[b].data(),
            mine ? flat_[b].data() : nullptr,
            flat_[b].numel(),
            owner_[b]);
      } else {
        work_[b] = group_.all_reduce_async(flat_[b].data(), flat_[b].numel());
      }
    }
  }
  progress();
}

void DistributedDataParallel::progress() {
  // One test of the first unfinished operation advances every one.
  for (auto& w : work_) {
    if (w && !w->test())
      return;
  }
  for (auto& w : broadcast_work_) {
    if (w && !w->test())
      return;
  }
}

void DistributedDataParallel::finish() {
  // A deferred broadcast the forward did not wait for (a module that read
  // none of its parameters) ends before the update rewrites its values.
  settle_broadcasts();
  if (group_.size() > 1 && sync_) {
    check_all_launched();
    double t0 = now_s();
    for (size_t b = 0; b < work_.size(); ++b)
      wait_bucket(static_cast<int>(b));
    if (NDT_FAULT(kDpMeanNotSum)) {
      for (Tensor& f : flat_)
        ops::scale_(f, 1.0f / float(group_.size()));
    }
    double t1 = now_s();
    exposed_s_ += t1 - t0;
    comm_s_ += t1 - first_launch_;
  }
  rearm();  // for the next backward
}

}  // namespace ndt
