#include "cli/layout_pick.h"

#include <algorithm>
#include <memory>

#include "base/check.h"
#include "nn/builder.h"
#include "ops/ops.h"
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
  return detail::str_cat(
      ", ",
      describe_hosts(m.host_of),
      " linked at alpha ",
      a.host_link_alpha_us,
      " us, ",
      a.host_link_gbps,
      " GB/s");
}

std::string joined_overrides(const LayoutCost& c) {
  std::string out;
  for (const std::string& o : c.overrides)
    out += (out.empty() ? "" : ",") + o;
  return out;
}

}  // namespace ndt
