#include "cli/layout_pick.h"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "base/check.h"
#include "nn/builder.h"
#include "ops/ops.h"
#include "plan/link_measure.h"
#include "train/factory.h"
#include "train/peak.h"
#include "train/ring_core_cost.h"
#include "train/update_rate.h"

namespace ndt {

MachineCost machine_cost(
    const MachineArgs& a,
    const Config& base,
    int ranks,
    bool measure,
    const std::vector<int>& hosts) {
  MachineCost m;
  if (measure) {
    ops::set_num_threads(train_threads(base));
    m.gflops = a.gflops > 0 ? a.gflops : measure_sgemm_peak_gflops(kSgemmPeakN);
    m.update_s_per_param = a.update_ns_per_param > 0
                               ? a.update_ns_per_param * 1e-9
                               : measure_update_seconds_per_param(base.optim);
    if (base.parallel.sp_attention == SpAttention::kRing && ranks > 1 &&
        base.model.kind != ModelKind::kMlp) {
      const RingCoreExtra e = measure_ring_core_extra(base.model);
      m.ring_extra_forward_s = e.forward_s;
      m.ring_extra_backward_s = e.backward_s;
    }
  }
  m.link.alpha_s = a.link_alpha_us * 1e-6;
  m.link.beta_s_per_byte = 1e-9 / a.link_gbps;
  m.comm_on_cores = a.comm_on_cores;
  NDT_CHECK(
      a.ranks_per_host <= 0 || ranks % a.ranks_per_host == 0,
      ConfigError,
      "--ranks-per-host ",
      a.ranks_per_host,
      " must divide the ranks (",
      ranks,
      "): every host runs as many ranks");
  if (a.ranks_per_host > 0)
    m.host_of = hosts_in_blocks(ranks, a.ranks_per_host);
  else if (a.ranks_per_host < 0)
    m.host_of = hosts;
  m.host_link.alpha_s = a.host_link_alpha_us * 1e-6;
  m.host_link.beta_s_per_byte = 1e-9 / a.host_link_gbps;
  return m;
}

namespace {

// Rank 0's fit of `group` (a group of `world` it belongs to when
// `measures`), on every rank of `world`.
LinkCost rank0_fit(ProcessGroup& world, ProcessGroup& group, bool measures) {
  double v[2] = {0, 0};
  if (measures) {
    const LinkFit fit = measure_link_cost(group);
    v[0] = fit.link.alpha_s;
    v[1] = fit.link.beta_s_per_byte;
  }
  world.share_from_rank0(v, 2);
  return {v[0], v[1]};
}

// A fitted link into an option pair (alpha in us, bandwidth in GB/s); a
// fit with no time per byte (faster than the timer sees) keeps the
// bandwidth as it was.
void set_link(const LinkCost& link, double* alpha_us, double* gbps) {
  *alpha_us = link.alpha_s * 1e6;
  if (link.beta_s_per_byte > 0)
    *gbps = 1e-9 / link.beta_s_per_byte;
}

}  // namespace

void measure_job_links(
    MachineArgs& a, const std::vector<int>& hosts, ProcessGroup& world) {
  const int r = world.rank();
  if (hosts.empty() || world.size() < 2)
    return;
  const int host0_ranks =
      static_cast<int>(std::count(hosts.begin(), hosts.end(), hosts[0]));
  if (!a.link_given && host0_ranks >= 2) {
    const std::unique_ptr<ProcessGroup> host =
        world.split(hosts[r] == hosts[0] ? 0 : 1, r, "link in host");
    set_link(
        rank0_fit(world, *host, hosts[r] == hosts[0]),
        &a.link_alpha_us,
        &a.link_gbps);
    a.link_measured = true;
  }
  if (!a.host_link_given && host_count(hosts) >= 2) {
    const bool first =
        std::find(hosts.begin(), hosts.end(), hosts[r]) - hosts.begin() == r;
    const std::unique_ptr<ProcessGroup> firsts =
        world.split(first ? 0 : 1, r, "link between hosts");
    set_link(
        rank0_fit(world, *firsts, first),
        &a.host_link_alpha_us,
        &a.host_link_gbps);
    a.host_link_measured = true;
  }
}

namespace {

// The step's FLOPs per sample, with and without recompute.
ModelFlops model_flops(const Config& base) {
  SerialBuilder builder;  // keeps no module: only the FLOP counts are read
  const std::unique_ptr<Model> model =
      make_model(base.model, builder, keep_no_module);
  return {model->flops_per_sample, model->recompute_flops_per_sample};
}

}  // namespace

std::vector<LayoutCost> ranked_layouts(
    const std::string& file,
    const std::vector<std::string>& overrides,
    const Config& base,
    int ranks,
    const MachineCost& m,
    int* rejected) {
  std::vector<LayoutCost> all =
      search_layouts(file, overrides, ranks, model_flops(base), m, rejected);
  NDT_CHECK(
      !all.empty(),
      ConfigError,
      "no layout of ",
      ranks,
      " ranks passes the config's checks (the batch, heads and widths must "
      "divide over the ranks)");
  return all;
}

bool fits_memory(const LayoutCost& c, double memory_mib) {
  return memory_mib <= 0 || (c.act_bytes >= 0 &&
                             double(c.known_bytes()) <= memory_mib * (1 << 20));
}

const LayoutCost& pick_layout(
    const std::vector<LayoutCost>& all, double memory_mib, int ranks) {
  for (const LayoutCost& c : all) {
    if (fits_memory(c, memory_mib))
      return c;
  }
  const auto least = std::min_element(
      all.begin(), all.end(), [](const LayoutCost& x, const LayoutCost& y) {
        return x.known_bytes() < y.known_bytes();
      });
  throw ConfigError(detail::str_cat(
      "no layout of ",
      ranks,
      " ranks fits --memory-mib ",
      memory_mib,
      ": the smallest, ",
      least->name,
      ", needs ",
      least->known_bytes() / 1048576.0,
      " MiB per rank"));
}

std::string hosts_clause(const MachineCost& m, const MachineArgs& a) {
  if (host_count(m.host_of) == 1)
    return "";
  char link[96];
  std::snprintf(
      link,
      sizeof link,
      " linked at alpha %.2f us, %.3f GB/s%s",
      a.host_link_alpha_us,
      a.host_link_gbps,
      a.host_link_measured ? " (measured)" : "");
  return ", " + describe_hosts(m.host_of) + link;
}

std::string joined_overrides(const LayoutCost& c) {
  std::string out;
  for (const std::string& o : c.overrides)
    out += (out.empty() ? "" : ",") + o;
  return out;
}

}  // namespace ndt
