// Layout search: every layout of a job's ranks that the config accepts,
// with its memory per rank from the plan's formulas and a predicted step
// time, fastest first (`ndtrain plan`).
//
// A layout is dp x pp x tp x sp = ranks with a tensor-parallel mode (1d
// for any tp, with and without its sequence-split regions, 2d for tp =
// q^2, 2.5d for tp = q^2 d with d >= 2, 3d for tp = p^3) and a ZeRO stage
// (0 to 3 when the gradient sync has more than one rank); pipelines run
// 1F1B with the config's micro-batches, or P (and 2 P) of them when it
// has fewer, and the same interleaved over 2 chunks per rank where there
// are 2 P blocks or more. Each candidate is loaded through
// load_config with the user's overrides, so the config's own checks reject
// what cannot run (divisibility of the batch, the heads, the mode's
// limits).
//
// Memory per rank: parameters, gradients and optimizer state
// (rank_memory, the largest over the pipeline ranks and the ZeRO owners),
// plus the activation peak where the plan models it (step_activation_
// modelled: the largest over pipeline stages and sp ranks), else unknown.
//
// Under recompute the activations are modelled too (step_activation_
// bytes), so the candidates come with and without parallel.recompute=block
// (unless the user set it: then all recompute).
//
// Step time, per rank:
//   compute  = flops of the step (with recompute's: the blocks' forward
//              again) / ranks / gflops, divided by the share
//              of the time the pipeline's schedule keeps a rank busy
//              (verify_schedule with backward = 2 forwards, 3 under
//              recompute), plus the
//              optimizer's update: the parameters the rank updates (its
//              local parameters; under ZeRO those of its buckets: the
//              elements rank_memory gives optimizer state) times
//              update_s_per_param. The update does not shrink with a
//              rank's share of the batch, so data parallelism without
//              ZeRO (and sequence parallelism) pays it whole on every
//              rank, while tensor parallelism, pipelines and ZeRO split it;
//              plus, under sequence parallelism's ring core, what its
//              blockwise kernels cost beyond the serial core:
//              ring_extra_forward_s (twice under recompute) plus
//              ring_extra_backward_s, times the rank's attention layers
//              and samples per step, over sp and the mode's head split;
//   comm     = every group's step_comm volume at the link's alpha-beta
//              cost: all-reduce 2 (P-1) alpha + 2 (P-1)/P bytes beta per
//              call; reduce-scatter, all-gather and all-to-all (P-1) alpha
//              + (P-1) bytes beta (bytes: one rank's block); broadcast and
//              reduce (pipelined chains) (P-1) alpha + bytes beta; send
//              alpha + bytes beta (a receive is the sender's cost);
//   step     = compute + comm not hidden. The gradient sync's own volume
//              (StepComm::grad_sync: buckets, ZeRO's reduces and
//              gathers) overlaps backward (two thirds of a micro-batch's
//              compute, three quarters under recompute; the step's last
//              micro-batch's;
//              stage 2 every micro-batch's; stage 3 the whole compute)
//              and counts beyond it, and at least one bucket's reduce (it
//              starts when backward ends); stages 1 and 2 broadcast the
//              updated values after the compute, in full, or with
//              parallel.defer_broadcast beyond the next step's first
//              forward (the rest of a micro-batch's compute). On two
//              ranks ZeRO's reduces and broadcasts count half their
//              bytes: the owners, balanced by size, each use a lane of
//              the group, so the two directions of the link carry half
//              each at once.
//              Every other volume (tensor, sequence and pipeline groups,
//              norms, the loss) counts in full. With comm_on_cores (ranks
//              of one host: shared memory, where every transfer is a copy,
//              and every reduction a sum, by a rank's own core) nothing
//              overlaps the compute and the sync counts in full too.
//              With host_of, a group whose ranks lie on two hosts (the
//              mesh's rank order, each rank's host given) costs at
//              host_link instead (comm_on_cores still holds: on hosts that
//              share their cores, TCP's processing runs on them too).
// The largest over the representative ranks (pipeline stages, ZeRO owners)
// is the layout's step. Not modelled: smaller products running slower
// under tensor parallelism, the work 1D tensor parallelism repeats on
// every rank outside its sequence-split regions (norms, residuals), the
// rsa and Ulysses cores' own overhead, ranks contending for one host's
// memory bandwidth.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "io/config.h"
#include "plan/comm_volume.h"
#include "plan/link_cost.h"

namespace ndt {

struct MachineCost {
  double gflops = 0;  // one rank's rate on the model's products
  // One rank's optimizer step per parameter it updates (the config's
  // optimizer); 0: not counted.
  double update_s_per_param = 0;
  // Sequence parallelism's ring core beyond the serial attention core, per
  // sample and attention layer over the whole sequence, its forward and
  // its backward (train/ring_core_cost.h); 0: not counted.
  double ring_extra_forward_s = 0, ring_extra_backward_s = 0;
  LinkCost link;  // between any two ranks (of one host, with hosts)
  // The link's transfers run on the ranks' own cores (one host, shared
  // memory): communication hides no compute.
  bool comm_on_cores = false;
  // The host of each of the job's ranks (any ids; empty: one host): a
  // group with ranks on two hosts communicates at host_link.
  std::vector<int> host_of;
  LinkCost host_link;
};

// Ranks filling hosts of `per_host` in rank order (mpirun's default
// mapping): rank r on host r / per_host.
std::vector<int> hosts_in_blocks(int ranks, int per_host);
// Host ids of ranks from their host names: each distinct name a host,
// numbered in order of first appearance.
std::vector<int> host_ids(const std::vector<std::string>& names);
// Hosts in host_of (empty: one host).
int host_count(const std::vector<int>& host_of);
// "one host", "2 hosts of 2 ranks" (blocks in rank order), or "2 hosts
// (ranks 0 2 | 1 3)".
std::string describe_hosts(const std::vector<int>& host_of);

// The model's training FLOPs per sample (Model::flops_per_sample) and
// what parallel.recompute=block adds (recompute_flops_per_sample).
struct ModelFlops {
  double train = 0;
  double recompute = 0;
};

struct LayoutCost {
  std::vector<std::string> overrides;  // "parallel.dp=2", ...
  std::string name;                    // "dp=2 tp=2 (1d) zero=1"
  int64_t state_bytes = 0;             // parameters, gradients, optimizer state
  int64_t act_bytes = -1;              // activation peak; -1: not modelled
  double bubble = 0;                   // the pipeline's idle fraction
  double compute_s = 0;                // with the bubble and the update
  double update_s = 0;                 // the optimizer's update
  double sync_comm_s = 0;              // the gradient sync's group
  double other_comm_s = 0;  // tensor, sequence, pipeline groups, loss
  double step_s = 0;

  // Memory per rank as far as the plan knows it: the state and, where
  // modelled, the activations.
  int64_t known_bytes() const {
    return state_bytes + std::max<int64_t>(act_bytes, 0);
  }
};

// Seconds of one group's step volume `v` on `ranks` ranks at the link's
// alpha-beta cost (the formulas above).
double comm_seconds(const CommVolume& v, int ranks, const LinkCost& link);

// The layout overrides to try for `ranks` ranks of `base` (not yet
// checked): dp, pp (and micro-batches), tp, tp_mode, tp_depth, tp_seq,
// sp, zero, recompute.
std::vector<std::vector<std::string>> layout_candidates(
    const Config& base, int ranks);

// The cost of one accepted config.
LayoutCost layout_cost(
    const Config& config, const ModelFlops& flops, const MachineCost& m);

// Every candidate load_config(yaml_path, overrides + candidate) accepts,
// costed, fastest step first (ties: less memory). `rejected` (if given)
// counts the others.
std::vector<LayoutCost> search_layouts(
    const std::string& yaml_path,
    const std::vector<std::string>& overrides,
    int ranks,
    const ModelFlops& flops,
    const MachineCost& m,
    int* rejected = nullptr);

}  // namespace ndt
