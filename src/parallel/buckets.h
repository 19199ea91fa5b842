// Gradient buckets for data parallelism: a pure assignment of parameters
// (in the order their gradients become final during backward) to buckets
// of about `bucket_bytes`, so every rank builds identical buckets and
// all-reduces them in the same order; ZeRO's owners of the buckets and
// the shared buffers of stages 2 and 3.
#pragma once

#include <cstdint>
#include <vector>

namespace ndt {

struct Bucket {
  std::vector<int> params;       // indices into the backward-ordered list
  std::vector<int64_t> offsets;  // element offset of each param in the bucket
  int64_t numel = 0;
};

// `numels[i]` is the element count of the i-th parameter in backward order.
// Parameters are packed in order; a bucket closes once it reaches
// `bucket_bytes` (fp32), so a parameter larger than the limit gets a bucket
// of its own, and before each parameter i with `starts[i]` (when given):
// a pipeline rank with several model chunks keeps each chunk's buckets
// apart (split_at_gaps), since the chunks' backwards alternate.
//
// ZeRO (`owners` > 1 ranks own the buckets, assign_bucket_owners): the
// limit is also at most 1 / (kBucketsPerOwner * owners) of all the
// elements, so that the buckets are small enough for every rank to own
// about its share (within the largest bucket, which is below the limit
// plus its last parameter). Deterministic: depends only on its
// arguments.
constexpr int kBucketsPerOwner = 4;

std::vector<Bucket> assign_buckets(
    const std::vector<int64_t>& numels,
    int64_t bucket_bytes,
    const std::vector<bool>& starts = {},
    int owners = 1);

// For the parameters' modules in backward order (`module_of[i]`): true
// where a module between a parameter's and the previous parameter's is
// not held (`held[m]`), i.e. where another pipeline rank's chunk lies
// between them.
std::vector<bool> split_at_gaps(
    const std::vector<int>& module_of, const std::vector<bool>& held);

// ZeRO stage 1: the rank (0 .. ranks-1) that owns each bucket's optimizer
// state and update. Largest bucket first (ties: lower index), each to the
// rank with the fewest elements so far (ties: lower rank), so the update's
// work is balanced. Deterministic: depends only on its arguments.
std::vector<int> assign_bucket_owners(
    const std::vector<Bucket>& buckets, int ranks);

// ZeRO stages 2 and 3: where a rank keeps the gradients (stage 2) or the
// parameter values (stage 3) of the buckets it does not own. Such a bucket
// is only needed around the modules its parameters belong to (gradients:
// from the backward of the module holding its first parameter,
// `span.first`, until its reduce to the owner is done; values: while
// those layers run, fetched one layer ahead; the spans are then in gather
// units, param_gathers.h), so these buckets share a few buffers (slots): a
// bucket takes a slot whose previous bucket ended at least one whole
// module (unit) before its own first one (they run from the highest
// number down in backward), so that the previous reduce had a module's
// backward to finish, and of those the one that ended earliest; a new
// slot only when there is none, or fewer than kMinSlots. The gap holds in
// either direction, so the same slots serve forward (ascending) and
// backward. Owners of -1 (nobody's) give every
// rank the same slots. Pure: every rank of the group computes the same
// for the same owners.
constexpr int kMinSlots = 2;

// The modules of a bucket's parameters, or (ZeRO stage 3's values) their
// gather units (param_gathers.h), numbered in forward order.
struct ModuleSpan {
  int first = 0;  // module of the bucket's first parameter (backward order)
  int last = 0;   // module of its last: first >= last
};

struct Slots {
  std::vector<int> slot_of;       // per bucket: its slot, -1 when owned
  std::vector<int64_t> capacity;  // per slot: its largest bucket's numel
};

// Each bucket's span, from `module_of[i]`: the module of the i-th
// parameter in backward order (the order assign_buckets() packed).
std::vector<ModuleSpan> bucket_spans(
    const std::vector<Bucket>& buckets, const std::vector<int>& module_of);

// Per unit (module or gather unit) of `num_units`, the buckets whose span
// covers it, in bucket order.
std::vector<std::vector<int>> buckets_of_units(
    const std::vector<ModuleSpan>& spans, int num_units);

Slots assign_slots(
    const std::vector<Bucket>& buckets,
    const std::vector<ModuleSpan>& spans,
    const std::vector<int>& owners,
    int rank);

// ZeRO stage 3's slots for the values: those of assign_slots with no
// owners, so every bucket has one and every rank the same (ParamGathers
// needs all ranks to agree on what each slot holds); the capacity of a
// slot is its largest bucket that `rank` does not own (0 when it owns
// them all: its own live in memory of their own).
Slots assign_value_slots(
    const std::vector<Bucket>& buckets,
    const std::vector<ModuleSpan>& spans,
    const std::vector<int>& owners,
    int rank);

}  // namespace ndt
