// The layout search's pick as the CLI runs it (ndtrain plan, and train,
// verify and bench --auto-layout): the machine from the options given and
// what is measured here, the ranked layouts, and the fastest that fits a
// memory limit.
#pragma once

#include <string>
#include <vector>

#include "io/config.h"
#include "plan/layout_search.h"

namespace ndt {

// Options of the plan's machine and the memory limit.
struct MachineArgs {
  double memory_mib = 0;           // 0: no limit
  double gflops = 0;               // 0: measure sgemm here
  double update_ns_per_param = 0;  // 0: measure the config's optimizer here
  // This machine's shared memory (bench/comm.sh's link_fit, 2 ranks).
  double link_alpha_us = 2.0;
  double link_gbps = 7.5;
  bool comm_on_cores = false;
  // Hosts of ranks_per_host ranks each (0: one host; -1, not given: the
  // hosts machine_cost is handed), linked at 10 Gbit/s unless told.
  int ranks_per_host = -1;
  double host_link_alpha_us = 30.0;
  double host_link_gbps = 1.25;
  // Whether an option set the link (alpha or bandwidth) in a host and
  // between hosts; if not, --auto-layout measures it (measure_job_links)
  // and says so.
  bool link_given = false;
  bool host_link_given = false;
  bool link_measured = false;
  bool host_link_measured = false;
};

// The plan's machine: the options given, the rest measured here when
// `measure` (sgemm, the config's optimizer, and the ring core's extra
// where a candidate of `ranks` ranks would run it), else left 0. Without
// --ranks-per-host the ranks are on `hosts` (each rank's host; empty: one
// host).
MachineCost machine_cost(
    const MachineArgs& a,
    const Config& base,
    int ranks,
    bool measure,
    const std::vector<int>& hosts = {});

// Under --auto-layout, collective over `world` (the job's ranks, on
// `hosts`: each rank's host): the links that `a` was given no option for,
// measured (plan/link_measure.h) and written into `a`. In a host: the
// ranks of rank 0's host among themselves (not measured when it runs one
// rank); between hosts (two or more): the first rank of each host. The
// other ranks wait; every rank ends with the same numbers.
void measure_job_links(
    MachineArgs& a, const std::vector<int>& hosts, ProcessGroup& world);

// The layouts of `ranks` ranks that `file` with `overrides` (loaded as
// `base`) accepts, fastest first; throws ConfigError when there is none.
std::vector<LayoutCost> ranked_layouts(
    const std::string& file,
    const std::vector<std::string>& overrides,
    const Config& base,
    int ranks,
    const MachineCost& m,
    int* rejected);

// Under a limit (MiB per rank, 0: none) a layout fits when its state and
// its activations do (the plan models every candidate's: one replica per
// process).
bool fits_memory(const LayoutCost& c, double memory_mib);

// The fastest of `all` (fastest first) that fits `memory_mib`; throws
// ConfigError naming the smallest layout when none does.
const LayoutCost& pick_layout(
    const std::vector<LayoutCost>& all, double memory_mib, int ranks);

// ", 2 hosts of 2 ranks linked at alpha 30.00 us, 1.250 GB/s" for a
// machine of several hosts (" (measured)" after it when measured), else
// empty.
std::string hosts_clause(const MachineCost& m, const MachineArgs& a);

// The layout's overrides joined by commas.
std::string joined_overrides(const LayoutCost& c);

}  // namespace ndt
