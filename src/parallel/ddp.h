// Distributed data parallel: one replica per rank of a ProcessGroup.
//
// Gradients live in flat fp32 buckets (parameter grads become slices of
// them), assigned by assign_buckets() in backward order. A bucket's
// all-reduce starts as soon as the last of its gradients is final (after
// the backward of the layer holding it: the Model's on_layer_begin and
// on_backward_done hooks; module by module under recompute), so
// communication overlaps the rest of backward; finish() waits for the
// stragglers. A backward that is not the step's last (begin_backward(false),
// gradient accumulation) only accumulates locally, as no_sync does elsewhere.
// Every rank scales its loss by 1 / (global number of loss terms), so the
// all-reduced sum is the global-batch gradient: no division afterwards.
//
// ZeRO stage 1 (shard_optimizer): parameter values also live in flat
// buckets, cut small enough for every rank to own about its share
// (assign_buckets with the group's ranks as owners), and each bucket has
// one owner rank (assign_bucket_owners). A
// bucket's gradients are reduced to its owner instead of all-reduced: only
// the owner holds the global gradient of its parameters (the others keep
// their local sums), keeps optimizer state for them and updates them
// (owned_parameters()); broadcast_parameters() then sends each bucket's
// new values from its owner to every rank. Per rank this moves as much
// data as the all-reduce, and the update's work and state are split. (An
// MPI group runs the reduces and broadcasts of two roots at once, one
// lane each, so at dp=2 the owners' transfers use both directions of the
// link: mpi_process_group.h.)
// With defer_broadcasts(true) those broadcasts run during the next
// forward instead of at the end of the step: they start in forward order
// (the input layer's buckets first), the forward polls them between its
// layers, and a layer waits only for the buckets holding its own
// parameters (the Model's on_forward_begin and on_layer_begin hooks);
// settle_broadcasts() waits for every one, for whoever reads the values
// outside a forward (evaluation, checkpoints, comparisons).
//
// ZeRO stage 2 (zero = 2) also shards the gradients: a rank keeps memory
// only for the buckets it owns; the others' gradients live in a few
// shared slots (assign_slots over the gather units, param_gathers.h)
// while they are computed and reduced. So every backward reduces, also
// one that is not the step's last: the owner's bucket accumulates the
// sums of the micro-batches, a slot is zeroed when its next bucket starts
// (the Model's on_backward_begin and on_layer_begin hooks) after the
// reduce of the bucket before it has finished. A bucket never
// spans two model chunks of a pipeline rank (their backwards alternate
// between micro-batches), so each chunk's backward completes its own.
//
// ZeRO stage 3 (zero = 3) also shards the parameter values: a rank keeps
// the values of its own buckets; the others' live in shared slots
// (assign_slots over the gather units with no owners: the same on every
// rank), filled by a broadcast from the owner before a layer's forward or
// backward reads them and one layer ahead (ParamGathers decides which, the
// Model's on_forward_begin, on_backward_begin and on_layer_begin hooks run
// it; with recompute, module by module). After the update nothing is
// broadcast: the next forward gathers what it reads.
#pragma once

#include <memory>
#include <vector>

#include "comm/process_group.h"
#include "comm/work.h"
#include "nn/model.h"
#include "parallel/buckets.h"
#include "parallel/grad_sync.h"
#include "parallel/param_gathers.h"

namespace ndt {

constexpr int64_t kDefaultBucketBytes = 4 << 20;

class DistributedDataParallel final : public GradSync {
 public:
  // Takes over the parameters of `model`, built with every module it
  // holds.
  DistributedDataParallel(
      Model& model,
      ProcessGroup& group,
      int64_t bucket_bytes = kDefaultBucketBytes,
      int zero = 0);
  // Before the model is built, so that no rank holds every parameter's
  // gradient and (stage 3) value at once: the buckets come from the
  // description of every module (modules[m], Model::described) and the
  // modules this rank holds. adopt() then takes over each held module's
  // parameters as the build makes them, and attach() the built model.
  // per_layer: reduces launch, and ZeRO's slots serve, layer by layer
  // (ParamDesc::layer, GatherUnits); false: module by module (a model
  // whose backward runs a module's forward again, recompute).
  DistributedDataParallel(
      const std::vector<std::vector<ParamDesc>>& modules,
      const std::vector<bool>& held,
      ProcessGroup& group,
      int64_t bucket_bytes,
      int zero,
      bool per_layer = true);
  ~DistributedDataParallel() override;

  // Module m's parameters (declaration order), initialised: their
  // gradients and values move into the buckets (stage 3: another rank's
  // values into a slot, unread), and their initial values are recorded
  // for check_replicas_identical().
  void adopt(int m, const std::vector<Parameter*>& params);
  // The model whose held modules were all adopted: installs its hooks.
  void attach(Model& model);

  // Throws ConfigError when the replicas' parameters differ (compares a
  // checksum of every parameter across ranks).
  void check_replicas_identical();
  // Waits for every bucket launched in this backward.
  void finish() override;
  // Only the step's last backward communicates; the others accumulate
  // (ZeRO stage 2: every backward reduces).
  void begin_backward(bool last) override;

  const std::vector<Bucket>& buckets() const {
    return buckets_;
  }
  ProcessGroup& group() const {
    return group_;
  }
  bool shards_optimizer() const {
    return shard_;
  }
  // ZeRO stage: 0, 1 (optimizer state), 2 (also gradients) or 3 (also
  // parameters).
  int zero_stage() const {
    return zero_;
  }
  // Elements of gradient memory this rank keeps: every bucket, or under
  // ZeRO stages 2 and 3 its own buckets and the slots.
  int64_t grad_elements() const;
  // Elements of parameter memory this rank keeps: every bucket, or under
  // ZeRO stage 3 its own buckets and the slots.
  int64_t param_elements() const;
  // ZeRO stage 1: the group rank that updates p (a parameter of the model),
  // and this rank's parameters in the model's order. Without sharding,
  // every parameter is this rank's.
  int owner(const Parameter& p) const;
  std::vector<Parameter*> owned_parameters() const;
  // ZeRO: per rank of the group, the parameter elements it updates (the
  // numels of the buckets it owns).
  std::vector<int64_t> owned_elements() const;
  // ZeRO stages 1 and 2: every bucket's parameter values from its owner
  // to all ranks (after the owners' update); collective over the group.
  // Waits for them unless deferred (defer_broadcasts). Stage 3: only
  // records that the slots hold old values (the next forward gathers).
  // Nothing without sharding.
  void broadcast_parameters();
  // ZeRO stages 1 and 2: leave broadcast_parameters()' broadcasts in
  // flight for the next forward to wait for layer by layer (default:
  // waited for at once).
  void defer_broadcasts(bool on) {
    defer_ = on;
  }
  // Waits for every broadcast of updated values still in flight; after it
  // every parameter holds its current value. Collective only in that its
  // broadcasts need the other ranks' progress (any wait of theirs gives
  // it).
  void settle_broadcasts();
  // The parameters were written outside a step (a checkpoint loaded):
  // under stage 3 the slots no longer hold current values. Local.
  void values_written();
  // Seconds spent blocked in finish() (communication not hidden by
  // backward) and from first launch to last completion, summed over steps.
  double exposed_seconds() const {
    return exposed_s_;
  }
  double comm_seconds() const {
    return comm_s_;
  }

 private:
  // Every bucket's count of pending parameters restored; none launched.
  void rearm();
  // Every bucket launched since its count was restored.
  // Waits for bucket b's reduce (all-reduce) if one is in flight.
  void wait_bucket(int b);
  void check_all_launched() const;
  // ZeRO stage 3: the parameters gather unit u reads, before it runs.
  void gather_values(int unit, bool forward);
  // ZeRO stages 1 and 2, deferred broadcasts: waits for those of the
  // buckets holding unit u's parameters.
  void settle_unit(int unit);
  // Model::on_layer_begin.
  void on_layer_begin(int m, int layer, bool forward);
  // Before unit u's backward: stage 3 gathers its values (with `gather`),
  // stages 2 and 3 ready the gradient buffers it is about to write.
  void on_unit_backward(int unit, bool gather);
  // After unit u's backward: its gradients are final.
  void on_unit_done(int unit);
  void progress();

  Model* model_ = nullptr;  // attach()
  ProcessGroup& group_;
  std::vector<Parameter*> params_;  // backward order
  std::vector<int> module_of_;      // per param (backward order)
  std::vector<int> unit_of_;        // per param (backward order)
  std::vector<int> module_first_;   // per module: its first param, or -1
  std::vector<int64_t> offset_of_;  // per param: offset in its bucket
  std::vector<Bucket> buckets_;
  std::vector<Tensor> flat_;    // one per bucket
  int zero_ = 0;                // ZeRO stage
  bool shard_ = false;          // ZeRO stage 1 or 2
  std::vector<Tensor> values_;  // sharding: parameter values, per bucket
  std::vector<int> owner_;      // sharding: owner rank, per bucket
  std::vector<int> pending_;    // params not yet final, per bucket
  std::vector<int> bucket_of_;  // per param
  // ZeRO stage 2: the slots, each bucket's slot (-1: owned), the buckets
  // whose first gradient a unit computes, and each slot's bucket now.
  std::vector<Tensor> slots_;
  std::vector<int> slot_of_;
  std::vector<std::vector<int>> starts_in_;  // per unit
  std::vector<int> slot_user_;
  // ZeRO stage 3: the value slots, each bucket's value slot, what to
  // gather when, the broadcasts in flight and each slot's bucket now.
  std::vector<Tensor> value_slots_;
  std::vector<int> value_slot_of_;
  GatherUnits units_;
  std::unique_ptr<ParamGathers> gathers_;
  std::vector<std::unique_ptr<Work>> gather_work_;
  std::vector<int> value_slot_user_;
  // ZeRO stages 1 and 2: each unit's buckets and the deferred broadcasts
  // still in flight, per bucket.
  std::vector<std::vector<int>> buckets_of_unit_;
  std::vector<std::unique_ptr<Work>> broadcast_work_;
  bool defer_ = false;
  // Per parameter (backward order): sum and sum of squares of its initial
  // values, for check_replicas_identical().
  std::vector<double> initial_sums_;
  std::vector<std::unique_ptr<Work>> work_;
  bool sync_ = true;
  int launched_ = 0;
  double exposed_s_ = 0;
  double comm_s_ = 0;
  double first_launch_ = 0;
};

}  // namespace ndt
