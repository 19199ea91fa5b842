// The links of a running job, measured: all-reduce times of a group at a
// few sizes, fitted to the alpha-beta model of link_cost.h. What
// `--auto-layout` plans with where no link option is given.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/process_group.h"
#include "plan/link_cost.h"

namespace ndt {

// Message sizes measure_link_cost() times: latency-bound to
// bandwidth-bound on shared memory and on a host's TCP link.
inline const std::vector<int64_t> kLinkMeasureBytes = {
    int64_t{4} << 10, int64_t{256} << 10, int64_t{4} << 20};

// Collective over `group` (2 ranks or more): for each size, untimed
// all-reduces, then timed ones each after a barrier, a call's time being
// its slowest rank's; the median per size, fitted (fit_link_cost). Every
// rank returns the same fit. ~20 all-reduces per size.
LinkFit measure_link_cost(ProcessGroup& group);

}  // namespace ndt
