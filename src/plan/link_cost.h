// The alpha-beta cost of an all-reduce on one kind of link (shared memory,
// a host's TCP link at some rate), fitted to measured times.
//
// ProcessGroup::all_reduce on p ranks runs a ring (comm/mpi_ops.h): a
// reduce-scatter and an all-gather of p - 1 rounds each, every round a
// message of bytes / p to the next rank. With alpha the latency of one
// round and beta the seconds per byte of the link:
//
//   t(bytes) = 2 (p - 1) alpha + 2 (p - 1) / p * bytes * beta
//
// (Thakur, Rabenseifner, Gropp 2005, "Optimization of collective
// communication operations in MPICH", section 4). 1 / beta is the bus
// bandwidth a large all-reduce reaches.
#pragma once

#include <cstdint>
#include <vector>

namespace ndt {

struct LinkCost {
  double alpha_s = 0;          // seconds per round
  double beta_s_per_byte = 0;  // seconds per byte
};

// The model's time of one all-reduce of `bytes` on `ranks` ranks.
double all_reduce_seconds(const LinkCost& link, int ranks, int64_t bytes);

struct LinkFit {
  LinkCost link;
  double max_rel_error = 0;  // max |model - measured| / measured
};

// alpha and beta that minimise the squared relative error of the model
// against all-reduce times measured at each size (seconds[i] for
// bytes[i]) on `ranks` >= 2 ranks; both kept >= 0. Needs two distinct
// sizes or more (ConfigError otherwise).
LinkFit fit_link_cost(
    int ranks,
    const std::vector<int64_t>& bytes,
    const std::vector<double>& seconds);

}  // namespace ndt
