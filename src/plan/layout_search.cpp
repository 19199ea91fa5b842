#include "plan/layout_search.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "base/check.h"
#include "parallel/pipeline/verify.h"
#include "parallel/tensor_parallel_mode.h"
#include "plan/activation_memory.h"
#include "plan/model_shape.h"
#include "plan/rank_memory.h"
#include "plan/step_comm.h"

namespace ndt {
namespace {

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d) {
    if (n % d == 0)
      out.push_back(d);
  }
  return out;
}

bool is_power(int n, int k, int* root) {
  for (int q = 2; std::pow(q, k) <= n; ++q) {
    if (static_cast<int>(std::lround(std::pow(q, k))) == n) {
      *root = q;
      return true;
    }
  }
  return false;
}

// The tensor-parallel modes of tp ranks, as overrides.
std::vector<std::vector<std::string>> tp_modes(int tp) {
  std::vector<std::vector<std::string>> out;
  const std::string t = "parallel.tp=" + std::to_string(tp);
  if (tp == 1)
    return {{}};
  out.push_back({t, "parallel.tp_mode=1d"});
  out.push_back({t, "parallel.tp_mode=1d", "parallel.tp_seq=true"});
  int q = 0;
  if (is_power(tp, 2, &q))
    out.push_back({t, "parallel.tp_mode=2d"});
  for (int side = 2; side * side * 2 <= tp; ++side) {
    if (tp % (side * side) == 0) {
      out.push_back(
          {t,
           "parallel.tp_mode=2.5d",
           "parallel.tp_depth=" + std::to_string(tp / (side * side))});
    }
  }
  if (is_power(tp, 3, &q))
    out.push_back({t, "parallel.tp_mode=3d"});
  return out;
}

// The mesh of a config (axis sizes in mesh order) and the indices of the
// axes of its group named "a,b,...".
struct GroupAxes {
  std::vector<int> sizes;
  std::vector<int> axes;
};

GroupAxes group_axes(const std::string& name, const Config& config) {
  GroupAxes g;
  std::map<std::string, int> index;
  for (const MeshAxis& a : mesh_axes(config)) {
    index[a.name] = static_cast<int>(g.sizes.size());
    g.sizes.push_back(a.size);
  }
  std::stringstream ss(name);
  std::string axis;
  while (std::getline(ss, axis, ','))
    g.axes.push_back(index.at(axis));
  return g;
}

// Ranks of a mesh group named "a,b,..." (the product of its axes' sizes).
int group_ranks(const std::string& name, const Config& config) {
  const GroupAxes g = group_axes(name, config);
  int n = 1;
  for (int a : g.axes)
    n *= g.sizes[a];
  return n;
}

// Whether some group named "a,b,..." has ranks on two hosts (host_of:
// each rank's host; empty: one host).
bool spans_hosts(
    const std::string& name,
    const Config& config,
    const std::vector<int>& host_of) {
  if (host_of.empty())
    return false;
  const GroupAxes g = group_axes(name, config);
  int world = 1;
  for (int n : g.sizes)
    world *= n;
  NDT_ASSERT(
      static_cast<int>(host_of.size()) == world,
      "hosts of ",
      host_of.size(),
      " ranks for a layout of ",
      world);
  for (int r = 0; r < world; ++r) {
    for (int peer : mesh_group_ranks(r, g.sizes, g.axes)) {
      if (host_of[peer] != host_of[r])
        return true;
    }
  }
  return false;
}

// "dp=2 pp=2 (microbatches=4) tp=2 (1d, seq) sp=2 zero=1": the axes of
// more than one rank; "serial" when none.
std::string describe(const Config& c) {
  const ParallelConfig& p = c.parallel;
  std::string s;
  auto part = [&](const std::string& t) { s += (s.empty() ? "" : " ") + t; };
  if (p.dp > 1)
    part("dp=" + std::to_string(p.dp));
  if (p.pp > 1) {
    part(
        "pp=" + std::to_string(p.pp) +
        " (microbatches=" + std::to_string(p.microbatches) +
        (p.pp_chunks > 1 ? ", " + std::to_string(p.pp_chunks) + " chunks"
                         : std::string()) +
        ")");
  } else if (p.microbatches > 1) {
    part("microbatches=" + std::to_string(p.microbatches));
  }
  if (p.tp > 1) {
    std::string t = "tp=" + std::to_string(p.tp) + " (" + to_string(p.tp_mode);
    if (p.tp_mode == TpMode::k2p5d)
      t += ", depth " + std::to_string(p.tp_depth);
    if (p.tp_seq)
      t += ", seq";
    part(t + ")");
  }
  if (p.sp > 1)
    part("sp=" + std::to_string(p.sp));
  if (p.zero > 0)
    part("zero=" + std::to_string(p.zero));
  if (p.recompute == Recompute::kBlock)
    part("recompute");
  return s.empty() ? "serial" : s;
}

// ZeRO's reduces and broadcasts on two ranks: the owners are balanced by
// size and each root's operations run on a lane of their own
// (mpi_process_group.h), so half the bytes cross the link each way at
// once: they take the time of half the bytes.
CommVolume both_ways(CommVolume v) {
  for (OpType t : {OpType::kReduce, OpType::kBroadcast})
    v[t].bytes /= 2;
  return v;
}

}  // namespace

std::vector<int> hosts_in_blocks(int ranks, int per_host) {
  NDT_ASSERT(per_host > 0, "hosts of ", per_host, " ranks");
  std::vector<int> out;
  for (int r = 0; r < ranks; ++r)
    out.push_back(r / per_host);
  return out;
}

std::vector<int> host_ids(const std::vector<std::string>& names) {
  std::vector<std::string> seen;
  std::vector<int> out;
  for (const std::string& n : names) {
    const auto it = std::find(seen.begin(), seen.end(), n);
    out.push_back(static_cast<int>(it - seen.begin()));
    if (it == seen.end())
      seen.push_back(n);
  }
  return out;
}

int host_count(const std::vector<int>& host_of) {
  return host_of.empty()
             ? 1
             : *std::max_element(host_of.begin(), host_of.end()) + 1;
}

std::string describe_hosts(const std::vector<int>& host_of) {
  const int hosts = host_count(host_of);
  if (hosts == 1)
    return "one host";
  const int ranks = static_cast<int>(host_of.size());
  std::ostringstream out;
  out << hosts << " hosts";
  if (ranks % hosts == 0 && host_of == hosts_in_blocks(ranks, ranks / hosts)) {
    out << " of " << ranks / hosts << " ranks";
    return out.str();
  }
  out << " (ranks";
  for (int h = 0; h < hosts; ++h) {
    out << (h ? " |" : "");
    for (int r = 0; r < ranks; ++r) {
      if (host_of[r] == h)
        out << " " << r;
    }
  }
  out << ")";
  return out.str();
}

double comm_seconds(const CommVolume& v, int ranks, const LinkCost& link) {
  if (ranks <= 1)
    return 0;
  const double P = ranks, a = link.alpha_s, b = link.beta_s_per_byte;
  auto at = [&](OpType t) { return v[t]; };
  double s = 0;
  const OpVolume& ar = at(OpType::kAllReduce);
  s += ar.calls * 2 * (P - 1) * a + 2 * (P - 1) / P * ar.bytes * b;
  for (OpType t :
       {OpType::kReduceScatter, OpType::kAllGather, OpType::kAllToAll}) {
    const OpVolume& o = at(t);
    s += o.calls * (P - 1) * a + (P - 1) * o.bytes * b;
  }
  for (OpType t : {OpType::kBroadcast, OpType::kReduce}) {
    const OpVolume& o = at(t);
    s += o.calls * (P - 1) * a + o.bytes * b;
  }
  const OpVolume& send = at(OpType::kSend);
  s += send.calls * a + send.bytes * b;
  return s;
}

std::vector<std::vector<std::string>> layout_candidates(
    const Config& base, int ranks) {
  NDT_CHECK(ranks >= 1, ConfigError, "ranks must be >= 1, got ", ranks);
  std::vector<std::vector<std::string>> out;
  const int M = base.parallel.microbatches;
  // Recompute with what it saves (step_activation_bytes), unless the user
  // chose it for every layout.
  const bool try_recompute = base.parallel.recompute == Recompute::kNone;
  const int blocks = model_shape(base.model, 1).num_modules() - 2;
  for (int dp : divisors(ranks)) {
    for (int pp : divisors(ranks / dp)) {
      for (int tp : divisors(ranks / dp / pp)) {
        const int sp = ranks / dp / pp / tp;
        std::vector<int> mbs = {M};
        if (pp > 1) {
          mbs = {std::max(M, pp)};
          if (std::max(M, 2 * pp) != mbs[0])
            mbs.push_back(std::max(M, 2 * pp));
        }
        const bool sync = dp * sp > 1;  // 2.5d's depth adds below
        for (const auto& mode : tp_modes(tp)) {
          const bool depth =
              std::find(mode.begin(), mode.end(), "parallel.tp_mode=2.5d") !=
              mode.end();
          for (int zero = 0; zero <= (sync || depth ? 3 : 0); ++zero) {
            for (int mb : mbs) {
              // Pipelines: 1F1B, and interleaved over 2 chunks per rank
              // where the blocks allow.
              for (int chunks : {1, 2}) {
                if (chunks == 2 && (pp == 1 || blocks < 2 * pp))
                  continue;
                std::vector<std::string> l = {
                    "parallel.dp=" + std::to_string(dp),
                    "parallel.dp_mode=mpi",
                    "parallel.pp=" + std::to_string(pp),
                    "parallel.pp_chunks=" + std::to_string(chunks),
                    "parallel.sp=" + std::to_string(sp),
                    "parallel.zero=" + std::to_string(zero),
                    "parallel.microbatches=" + std::to_string(mb)};
                if (pp > 1)
                  l.push_back(
                      chunks == 1 ? "parallel.schedule=1f1b"
                                  : "parallel.schedule=interleaved");
                if (tp == 1)
                  l.push_back("parallel.tp=1");
                l.insert(l.end(), mode.begin(), mode.end());
                out.push_back(l);
                if (try_recompute) {
                  l.push_back("parallel.recompute=block");
                  out.push_back(l);
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

LayoutCost layout_cost(
    const Config& config, const ModelFlops& model, const MachineCost& m) {
  NDT_CHECK(m.gflops > 0, ConfigError, "the machine's GFLOP/s must be > 0");
  const ParallelConfig& p = config.parallel;
  const int ranks = p.dp * p.pp * p.tp * p.sp;
  LayoutCost c;
  c.name = describe(config);
  const bool recompute = p.recompute == Recompute::kBlock;
  const double flops = (model.train + (recompute ? model.recompute : 0)) *
                       static_cast<double>(config.train.batch_size);
  double busy = 1;
  if (p.pp > 1) {
    // A backward of 2 forwards, 3 under recompute.
    const ScheduleReport r = verify_schedule(
        make_schedule(p.schedule, p.pp, p.microbatches, p.pp_chunks),
        1,
        recompute ? 3 : 2);
    c.bubble = r.bubble;
    busy = 1 - r.bubble;
  }
  double products_s = flops / ranks / (m.gflops * 1e9) / busy;
  if (p.sp > 1 && p.sp_attention == SpAttention::kRing) {
    // Each rank's share of the ring core's work: its stage's layers, its
    // samples (the mode's block of the replica's), its heads, 1/sp of the
    // sequence.
    const auto mode = make_tensor_parallel_mode(config);
    const double samples = static_cast<double>(config.train.batch_size) / p.dp /
                           mode->sample_blocks();
    const double extra =
        m.ring_extra_forward_s * (recompute ? 2 : 1) + m.ring_extra_backward_s;
    products_s += extra * config.model.depth / p.pp * samples /
                  (p.sp * mode->head_split()) / busy;
  }
  // The gradient sync overlaps backward (two thirds of the compute, three
  // quarters with the forward it runs again under recompute): the
  // step's last micro-batch's only, but under stages 2 and 3 every
  // micro-batch's (each reduces), and under stage 3 also the forwards
  // (the gathers).
  const double busy_s = products_s * busy;
  const double forward_share = recompute ? 1.0 / 4 : 1.0 / 3;
  // A group with ranks on two hosts moves at the hosts' link.
  auto link_of = [&](const std::string& group) -> const LinkCost& {
    return spans_hosts(group, config, m.host_of) ? m.host_link : m.link;
  };
  const LinkCost& sync_link = link_of(grad_sync_group(config));
  const double window = m.comm_on_cores ? 0
                        : p.zero == 3   ? busy_s
                        : p.zero == 2   ? (1 - forward_share) * busy_s
                                        : (1 - forward_share) * busy_s /
                                            std::max(p.microbatches, 1);
  const int sync_ranks = grad_sync_ranks(config);
  c.step_s = -1;
  for (int pr = 0; pr < p.pp; ++pr) {
    for (int sr = 0; sr < std::max(sync_ranks, 1); ++sr) {
      const RankMemory mem = rank_memory(config, pr, sr);
      c.state_bytes = std::max(c.state_bytes, mem.bytes());
      const double update_s = double(mem.optimizer) /
                              optimizer_states_per_param(config.optim.name) *
                              m.update_s_per_param;
      const StepComm s = step_comm(config, pr, sr);
      double all_s = 0;
      for (const auto& [group, v] : s.groups)
        all_s += comm_seconds(v, group_ranks(group, config), link_of(group));
      const double other_s =
          all_s - comm_seconds(s.grad_sync, sync_ranks, sync_link);
      const CommVolume sync =
          sync_ranks == 2 && p.zero > 0 ? both_ways(s.grad_sync) : s.grad_sync;
      // The sync: stages 1 and 2 broadcast the updated values after the
      // step's compute, into the next step's first forward when deferred
      // (parallel.defer_broadcast); the rest overlaps the window but for
      // the last bucket's reduce, which starts when backward ends (one
      // way only: it has one owner).
      CommVolume overlapped = sync, after;
      if (p.zero == 1 || p.zero == 2) {
        after[OpType::kBroadcast] = overlapped[OpType::kBroadcast];
        overlapped[OpType::kBroadcast] = OpVolume();
      }
      const double sync_s = comm_seconds(sync, sync_ranks, sync_link);
      CommVolume tail;
      tail.add(
          p.zero == 0 ? OpType::kAllReduce : OpType::kReduce, 1, s.last_bucket);
      const double forward_window =
          m.comm_on_cores || !p.defer_broadcast
              ? 0
              : forward_share * busy_s / std::max(p.microbatches, 1);
      const double exposed =
          std::max(
              comm_seconds(tail, sync_ranks, sync_link),
              comm_seconds(overlapped, sync_ranks, sync_link) - window) +
          std::max(
              0.0, comm_seconds(after, sync_ranks, sync_link) - forward_window);
      const double step = products_s + update_s + other_s + exposed;
      if (step > c.step_s) {
        c.step_s = step;
        c.compute_s = products_s + update_s;
        c.update_s = update_s;
        c.sync_comm_s = sync_s;
        c.other_comm_s = other_s;
      }
    }
  }
  const ModelShape shape = model_shape(config.model, p);
  if (step_activation_modelled(p)) {
    const int64_t samples =
        config.train.batch_size / p.dp / std::max(p.microbatches, 1);
    // The largest rank's: each pipeline stage's; sp rank 0 runs the ViT's
    // head, the others receive its dx.
    for (int pp_rank = 0; pp_rank < p.pp; ++pp_rank) {
      for (int sp_rank = 0; sp_rank < std::min(p.sp, 2); ++sp_rank) {
        c.act_bytes = std::max(
            c.act_bytes,
            step_activation_bytes(
                shape,
                p,
                config.model.heads,
                samples,
                config.model.dropout,
                train_threads(config),
                sp_rank,
                pp_rank));
      }
    }
  }
  return c;
}

std::vector<LayoutCost> search_layouts(
    const std::string& yaml_path,
    const std::vector<std::string>& overrides,
    int ranks,
    const ModelFlops& flops,
    const MachineCost& m,
    int* rejected) {
  NDT_CHECK(
      m.host_of.empty() || static_cast<int>(m.host_of.size()) == ranks,
      ConfigError,
      "the hosts place ",
      m.host_of.size(),
      " ranks, the layouts have ",
      ranks);
  const Config base = load_config(yaml_path, overrides);
  std::vector<LayoutCost> out;
  int bad = 0;
  for (const std::vector<std::string>& l : layout_candidates(base, ranks)) {
    std::vector<std::string> all = overrides;
    all.insert(all.end(), l.begin(), l.end());
    // The config's checks, then the plan formulas' own (the heads and
    // widths over the mode's ranks).
    try {
      LayoutCost cost = layout_cost(load_config(yaml_path, all), flops, m);
      cost.overrides = l;
      out.push_back(std::move(cost));
    } catch (const ConfigError&) {
      ++bad;
    }
  }
  std::stable_sort(
      out.begin(), out.end(), [](const LayoutCost& a, const LayoutCost& b) {
        if (a.step_s != b.step_s)
          return a.step_s < b.step_s;
        return a.known_bytes() < b.known_bytes();
      });
  if (rejected != nullptr)
    *rejected = bad;
  return out;
}

}  // namespace ndt
