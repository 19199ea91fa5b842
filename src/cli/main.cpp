// ndtrain command-line entry point.
//
//   [mpirun -np N] ndtrain train -c CONFIG.yaml [key=value ...]
//                                [--auto-layout [MACHINE]]
//   [mpirun -np N] ndtrain verify -c CONFIG.yaml [key=value ...]
//                                [--auto-layout [MACHINE]]
//   [mpirun -np N] ndtrain bench -c CONFIG.yaml [key=value ...] [--iters N]
//                                [--warmup N] [--auto-layout [MACHINE]]
//   ndtrain peak [--threads N]
//   ndtrain schedule --pp P --microbatches M --kind K [--chunks V]
//                    [--instructions]
//   ndtrain plan -c CONFIG.yaml [key=value ...] --ranks N [--top K]
//                [MACHINE]
// MACHINE: [--memory-mib M] [--gflops G] [--update-ns-per-param U]
//          [--link-alpha-us A] [--link-gbps B] [--comm-on-cores]
//          [--ranks-per-host H [--host-link-alpha-us A] [--host-link-gbps B]]
// --auto-layout runs in the layout plan picks for the job's ranks.
//
// The only place that catches ndt::Error: it prints "[rank r] error:
// <message>" and, in a multi-rank job, aborts every rank (MPI_Abort) so no
// peer hangs.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/activity.h"
#include "base/check.h"
#include "cli/layout_pick.h"
#include "comm/mesh.h"
#include "comm/mpi_process_group.h"
#include "comm/self_process_group.h"
#include "io/config.h"
#include "io/untrusted.h"
#include "ops/ops.h"
#include "parallel/pipeline/schedules.h"
#include "parallel/pipeline/verify.h"
#include "parallel/tensor_parallel_mode.h"
#include "plan/layout_search.h"
#include "tensor/memory.h"
#include "train/peak.h"
#include "train/step_bench.h"
#include "train/trainer.h"
#include "train/verify.h"

namespace ndt {
namespace {

// Each subcommand has its own options (CLI11): a flag of another
// subcommand is an error, as is an out-of-range integer.
constexpr const char* kUsage =
    "usage:\n"
    "  [mpirun -np N] ndtrain train -c CONFIG.yaml [key=value ...] "
    "[--auto-layout [MACHINE]]\n"
    "  [mpirun -np N] ndtrain verify -c CONFIG.yaml [key=value ...] "
    "[--auto-layout [MACHINE] | --layout \"KEY=VALUE ...\" ...]\n"
    "  [mpirun -np N] ndtrain bench -c CONFIG.yaml [key=value ...] "
    "[--iters N] [--warmup N] [--auto-layout [MACHINE]]\n"
    "  ndtrain peak [--threads N]\n"
    "  ndtrain plan -c CONFIG.yaml [key=value ...] --ranks N [--top K] "
    "[MACHINE]\n"
    "  ndtrain schedule --pp P --microbatches M --kind "
    "naive|gpipe|1f1b|interleaved [--chunks V] [--instructions]\n"
    "  ndtrain SUBCOMMAND --help   the options of one subcommand\n"
    "MACHINE (plan's model of the machine; --auto-layout: the layout plan "
    "picks for the job's ranks):\n"
    "  [--memory-mib M] [--gflops G] [--update-ns-per-param U] "
    "[--link-alpha-us A] [--link-gbps B] [--comm-on-cores] "
    "[--ranks-per-host H [--host-link-alpha-us A] [--host-link-gbps B]]\n";

// An integer option in [lo, 2^31 - 1], with the message naming the flag.
CLI::Option* int_option(
    CLI::App& app,
    const std::string& flag,
    int& value,
    int lo,
    const std::string& help) {
  const std::string name = flag.substr(flag.find_last_of('-') + 1);
  return app.add_option(flag, value, help)
      ->check(CLI::Validator(
          [lo](std::string& text) -> std::string {
            char* end = nullptr;
            errno = 0;
            const long long v = std::strtoll(text.c_str(), &end, 10);
            if (text.empty() || *end != '\0')
              return "must be an integer, got '" + printable(text) + "'";
            if (errno == ERANGE || v > std::numeric_limits<int>::max())
              return "must be at most " +
                     std::to_string(std::numeric_limits<int>::max()) +
                     ", got " + printable(text);
            if (v < lo)
              return "must be at least " + std::to_string(lo) + ", got " +
                     printable(text);
            return "";
          },
          "INT",
          name));
}

// -c CONFIG.yaml and the key=value overrides of train, verify and bench.
struct ConfigArgs {
  std::string file;
  std::vector<std::string> overrides;
};

void add_config_args(CLI::App& app, ConfigArgs& a) {
  // Required, but checked after parsing (load_config_args) so that an option
  // of another subcommand is what a wrong line reports first.
  app.add_option("-c,--config", a.file, "the run's YAML config (required)")
      ->type_name("CONFIG.yaml");
  app.add_option("overrides", a.overrides, "dotted key=value config overrides")
      ->type_name("KEY=VALUE");
}

int g_world_rank = -1;  // for error messages; -1 before MPI starts
int g_world_size = 1;

// The job's layout: a mesh over the world with the axes of mesh_axes()
// (parallel.order, the tensor-parallel entry expanded into its mode's
// axes; the last axis has consecutive ranks). One process: a world group
// of one rank.
struct Job {
  std::unique_ptr<MpiRuntime> mpi;
  std::unique_ptr<ProcessGroup> world;
  std::unique_ptr<Mesh> mesh;
};

// Rank of this process in an MPI launch (mpirun/mpiexec, or a PMI-based
// launcher), from the launcher's environment, also before MPI starts; -1
// when no launcher started it.
int launcher_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    if (const char* r = std::getenv(v))
      return std::atoi(r);
  }
  return -1;
}

// A plain `ndtrain train` does not initialise MPI at all: a singleton
// MPI_Init would start a daemon and may bind the process to one core.
bool launched_by_mpi() {
  return launcher_rank() >= 0;
}

// The job outlives the command functions: an error unwinds to main(), which
// aborts every rank while MPI is still up (finalising first would wait for
// a stuck peer forever). main() finalises on success.
std::optional<Job> g_job;

// Starts MPI when a launcher started this process and makes the world
// group (once), timed out per config.comm.timeout_s.
Job& start_world(const Config& config, int* argc, char*** argv) {
  Job& job = g_job ? *g_job : g_job.emplace();
  if (!job.world) {
    if (launched_by_mpi()) {
      job.mpi = std::make_unique<MpiRuntime>(argc, argv);
      g_world_rank = job.mpi->world_rank();
      g_world_size = job.mpi->world_size();
      if (g_world_size > 1)
        install_termination_report(g_world_rank);
    }
    if (g_world_size > 1) {
      job.world = job.mpi->world();
    } else {
      job.world = make_self_group("world");
    }
  }
  job.world->set_timeout_s(config.comm.timeout_s);
  return job;
}

// The ranks the config's layout needs (the product of its mesh axes), and
// the axes as text ("dp 2 x tp 2"). The axes' checks (a mode's splits,
// sequence parallelism's) throw here.
int layout_ranks(const Config& config, std::string* text) {
  int want = 1;
  for (const MeshAxis& a : mesh_axes(config)) {
    want *= a.size;
    *text +=
        (text->empty() ? "" : " x ") + a.name + " " + std::to_string(a.size);
  }
  return want;
}

Job& start_job(const Config& config, int* argc, char*** argv) {
  // The axes first: their checks fail before MPI starts, so that rank 0
  // alone reports them.
  std::vector<std::string> names;
  std::vector<int> sizes;
  for (const MeshAxis& a : mesh_axes(config)) {
    names.push_back(a.name);
    sizes.push_back(a.size);
  }
  std::string layout;
  const int want = layout_ranks(config, &layout);
  Job& job = start_world(config, argc, argv);
  NDT_CHECK(
      g_world_size == want,
      ConfigError,
      "the layout (",
      layout,
      ", parallel.dp_mode ",
      to_string(config.parallel.dp_mode),
      ") needs ",
      want,
      " MPI ranks, the job has ",
      g_world_size,
      "; run mpirun -np ",
      want,
      " ndtrain ... or change the layout");
  memory_set_cap(
      static_cast<int64_t>(double(config.train.mem_cap_mb) * (1 << 20)));
  job.mesh = std::make_unique<Mesh>(*job.world, sizes, names);
  return job;
}

Config load_config_args(const ConfigArgs& a, const char* subcommand) {
  NDT_CHECK(
      !a.file.empty(),
      ConfigError,
      "ndtrain ",
      subcommand,
      " needs -c CONFIG.yaml\n",
      kUsage);
  return load_config(a.file, a.overrides);
}

int cmd_peak(int threads) {
  if (threads <= 0)
    threads = omp_get_num_procs();
  ops::set_num_threads(threads);
  std::printf("ndtrain: %s, threads %d\n", ops::blas_info().c_str(), threads);
  // peak_gflops: the FMA limit, MFU's denominator (bench/*.sh read it).
  const double fma = measure_fma_peak_gflops();
  std::printf(
      "peak_gflops=%.1f sgemm_gflops=%.1f\n",
      fma,
      measure_sgemm_peak_gflops(kSgemmPeakN));
  return 0;
}

struct PlanArgs {
  ConfigArgs config;
  int ranks = 0;
  int top = 10;
  MachineArgs machine;
};

// The layouts of `ranks` ranks the config accepts, fastest predicted step
// first (plan/layout_search.h), and the pick: the fastest whose memory
// (state and, where modelled, activations) fits --memory-mib.
int cmd_plan(const PlanArgs& a) {
  const Config base = load_config_args(a.config, "plan");
  const MachineArgs& ma = a.machine;
  const MachineCost m = machine_cost(ma, base, a.ranks, true);
  int rejected = 0;
  const std::vector<LayoutCost> all = ranked_layouts(
      a.config.file, a.config.overrides, base, a.ranks, m, &rejected);
  std::printf(
      "ndtrain plan: %s, %d ranks, %.1f GFLOP/s per rank (%s), %s update "
      "%.3f ns per parameter (%s), ring attention core +%.3f ms forward, "
      "+%.3f ms backward per sample and layer (measured here), link alpha %.2f "
      "us, %.3f GB/s%s%s; "
      "%zu layouts accepted, %d rejected by the config's checks\n",
      to_string(base.model.kind),
      a.ranks,
      m.gflops,
      ma.gflops > 0 ? "--gflops" : "sgemm measured here",
      to_string(base.optim.name),
      m.update_s_per_param * 1e9,
      ma.update_ns_per_param > 0 ? "--update-ns-per-param" : "measured here",
      m.ring_extra_forward_s * 1e3,
      m.ring_extra_backward_s * 1e3,
      ma.link_alpha_us,
      ma.link_gbps,
      ma.comm_on_cores ? " on the ranks' cores" : "",
      hosts_clause(m, ma).c_str(),
      all.size(),
      rejected);
  std::printf(
      "%-48s %9s %9s %9s %8s %10s %10s %9s %9s\n",
      "layout",
      "step_ms",
      "comp_ms",
      "update_ms",
      "bubble",
      "sync_ms",
      "other_ms",
      "state_mib",
      "acts_mib");
  for (int i = 0; i < std::min<int>(a.top, static_cast<int>(all.size())); ++i) {
    const LayoutCost& c = all[i];
    char acts[32] = "-";
    if (c.act_bytes >= 0)
      std::snprintf(acts, sizeof acts, "%.1f", c.act_bytes / 1048576.0);
    std::printf(
        "%-48s %9.2f %9.2f %9.2f %8.3f %10.2f %10.2f %9.1f %9s%s\n",
        c.name.c_str(),
        c.step_s * 1e3,
        c.compute_s * 1e3,
        c.update_s * 1e3,
        c.bubble,
        c.sync_comm_s * 1e3,
        c.other_comm_s * 1e3,
        c.state_bytes / 1048576.0,
        acts,
        fits_memory(c, ma.memory_mib) ? "" : "  (over --memory-mib)");
  }
  const LayoutCost& pick = pick_layout(all, ma.memory_mib, a.ranks);
  // The shown layouts' overrides, one line each (bench/plan.sh runs them).
  // acts_mib: the activation peak per rank, -1 where not modelled.
  for (int i = 0; i < std::min<int>(a.top, static_cast<int>(all.size())); ++i)
    std::printf(
        "plan_layout step_ms=%.3f acts_mib=%.2f overrides=%s\n",
        all[i].step_s * 1e3,
        all[i].act_bytes < 0 ? -1.0 : all[i].act_bytes / double(1 << 20),
        joined_overrides(all[i]).c_str());
  std::printf(
      "pick: %s (predicted %.2f ms per step)\npick_overrides=%s\n",
      pick.name.c_str(),
      pick.step_s * 1e3,
      joined_overrides(pick).c_str());
  return 0;
}

// The key of each "key=value".
std::set<std::string> override_keys(const std::vector<std::string>& overrides) {
  std::set<std::string> out;
  for (const std::string& o : overrides)
    out.insert(o.substr(0, o.find('=')));
  return out;
}

// --auto-layout of train, verify and bench (`on`), with plan's options.
struct AutoLayout {
  bool on = false;
  MachineArgs machine;
};

// The plan's machine for a job of `world`'s ranks on `hosts`: rank 0
// measures what the options leave out while the other ranks wait, and
// every rank takes its numbers. Where rank 0's host runs more ranks'
// threads than it has cores, the measured rates are cut to each rank's
// share; `shared_cores` (rank 0) then says so.
MachineCost agreed_machine(
    const MachineArgs& machine,
    const Config& base,
    const std::vector<int>& hosts,
    ProcessGroup& world,
    std::string* shared_cores) {
  const int ranks = world.size();
  MachineCost m = machine_cost(machine, base, ranks, world.rank() == 0, hosts);
  const int on_host0 =
      hosts.empty()
          ? 1
          : static_cast<int>(std::count(hosts.begin(), hosts.end(), 0));
  const int threads = train_threads(base) * on_host0;
  const int cores =
      std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  double share = 0;
  if (world.rank() == 0) {
    share = std::min(1.0, double(cores) / threads);
    if (machine.gflops <= 0)
      m.gflops *= share;
    if (machine.update_ns_per_param <= 0)
      m.update_s_per_param /= share;
    m.ring_extra_forward_s /= share;
    m.ring_extra_backward_s /= share;
    if (share < 1 && machine.gflops <= 0) {
      *shared_cores = detail::str_cat(
          " (measured: ",
          threads,
          " threads of ",
          on_host0,
          " ranks share ",
          cores,
          " cores)");
    }
  }
  double measured[4] = {
      m.gflops,
      m.update_s_per_param,
      m.ring_extra_forward_s,
      m.ring_extra_backward_s};
  world.share_from_rank0(measured, 4);
  m.gflops = measured[0];
  m.update_s_per_param = measured[1];
  m.ring_extra_forward_s = measured[2];
  m.ring_extra_backward_s = measured[3];
  return m;
}

// The config of a train, verify or bench job (`subcommand`); under
// --auto-layout with the plan's pick for the job's ranks (cmd_plan's
// search and pick), for which rank 0 measures the machine and every rank
// takes its numbers, so that all search alike and pick the same layout.
Config job_config(
    const ConfigArgs& a,
    const AutoLayout& layout,
    const char* subcommand,
    int* argc,
    char*** argv) {
  const Config base = load_config_args(a, subcommand);
  if (!layout.on)
    return base;
  Job& job = start_world(base, argc, argv);
  const int ranks = g_world_size;
  // The job's hosts, and on one host transfers run on the ranks' cores
  // (shared memory), unless the options say otherwise.
  const std::vector<int> hosts =
      job.mpi ? host_ids(job.mpi->hosts()) : std::vector<int>();
  MachineArgs machine = layout.machine;
  if (machine.ranks_per_host < 0 && host_count(hosts) == 1)
    machine.comm_on_cores = true;
  // What the plan chooses, the overrides must leave to it.
  std::set<std::string> chosen;
  for (const std::vector<std::string>& l : layout_candidates(base, ranks)) {
    const std::set<std::string> keys = override_keys(l);
    chosen.insert(keys.begin(), keys.end());
  }
  for (const std::string& k : override_keys(a.overrides)) {
    NDT_CHECK(
        !chosen.count(k),
        ConfigError,
        "ndtrain ",
        subcommand,
        " --auto-layout: the override ",
        k,
        " sets what the plan chooses; drop it, or drop --auto-layout and "
        "give the whole layout");
  }
  measure_job_links(machine, hosts, *job.world);
  std::string shared_cores;
  const MachineCost m =
      agreed_machine(machine, base, hosts, *job.world, &shared_cores);
  int rejected = 0;
  const std::vector<LayoutCost> all =
      ranked_layouts(a.file, a.overrides, base, ranks, m, &rejected);
  const LayoutCost& pick = pick_layout(all, machine.memory_mib, ranks);
  if (g_world_rank <= 0) {
    std::printf(
        "ndtrain: layout from the plan: %s, predicted %.2f ms per step, the "
        "fastest of %zu layouts of %d ranks%s (%.1f GFLOP/s per rank%s, "
        "update %.3f ns per parameter, link alpha %.2f us, %.3f GB/s%s%s%s); "
        "overrides %s\n",
        pick.name.c_str(),
        pick.step_s * 1e3,
        all.size(),
        ranks,
        machine.memory_mib > 0
            ? detail::str_cat(" within ", machine.memory_mib, " MiB per rank")
                  .c_str()
            : "",
        m.gflops,
        shared_cores.c_str(),
        m.update_s_per_param * 1e9,
        machine.link_alpha_us,
        machine.link_gbps,
        machine.link_measured ? " (measured)" : "",
        machine.comm_on_cores ? " on the ranks' cores" : "",
        hosts_clause(m, machine).c_str(),
        joined_overrides(pick).c_str());
    std::fflush(stdout);
  }
  std::vector<std::string> overrides = a.overrides;
  overrides.insert(
      overrides.end(), pick.overrides.begin(), pick.overrides.end());
  return load_config(a.file, overrides);
}

int cmd_train(
    const ConfigArgs& a, const AutoLayout& layout, int* argc, char*** argv) {
  const Config config = job_config(a, layout, "train", argc, argv);
  Job& job = start_job(config, argc, argv);
  run_training(config, TrainOptions(), *job.mesh);
  return 0;
}

int cmd_verify(
    const ConfigArgs& a, const AutoLayout& layout, int* argc, char*** argv) {
  const Config config = job_config(a, layout, "verify", argc, argv);
  Job& job = start_job(config, argc, argv);
  std::ostringstream quiet;
  std::ostream& out = g_world_rank <= 0 ? std::cout : quiet;
  VerifyReport rep = run_verify(config, *job.mesh, out);
  return rep.pass ? 0 : 1;
}

// `ndtrain verify --layout "KEY=VALUE ..." ...`: each layout (its
// overrides after the shared ones) against its serial run, in turn in the
// one job; every layout needs the job's ranks. All configs are checked
// before the first runs. Ends with "verify: all N layouts PASS", or
// "verify: FAIL: layouts I, J of N" naming each failed layout.
int cmd_verify_layouts(
    const ConfigArgs& a,
    const AutoLayout& layout,
    const std::vector<std::string>& layouts,
    int* argc,
    char*** argv) {
  NDT_CHECK(
      !layout.on,
      ConfigError,
      "ndtrain verify: --layout gives the layouts to compare and "
      "--auto-layout picks one; use one of them");
  load_config_args(a, "verify");  // the shared overrides alone are valid
  std::vector<Config> configs;
  int first = 0;  // the ranks of layout 1
  for (size_t i = 0; i < layouts.size(); ++i) {
    std::vector<std::string> overrides = a.overrides;
    std::istringstream words(layouts[i]);
    for (std::string w; words >> w;)
      overrides.push_back(w);
    NDT_CHECK(
        overrides.size() > a.overrides.size(),
        ConfigError,
        "ndtrain verify: --layout needs key=value overrides separated by "
        "spaces, got '",
        printable(layouts[i]),
        "'");
    configs.push_back(load_config(a.file, overrides));
    std::string axes;
    const int ranks = layout_ranks(configs[i], &axes);
    first = i == 0 ? ranks : first;
    NDT_CHECK(
        ranks == first,
        ConfigError,
        "ndtrain verify: every --layout must need the same number of ranks; "
        "layout 1 (",
        printable(layouts[0]),
        ") needs ",
        first,
        ", layout ",
        i + 1,
        " (",
        printable(layouts[i]),
        ") needs ",
        ranks,
        " (",
        axes,
        ")");
  }
  std::ostringstream quiet;
  std::vector<size_t> failed;
  for (size_t i = 0; i < configs.size(); ++i) {
    Job& job = start_job(configs[i], argc, argv);
    std::ostream& out = g_world_rank <= 0 ? std::cout : quiet;
    out << "verify: layout " << i + 1 << " of " << configs.size() << ": "
        << printable(layouts[i]) << "\n";
    if (!run_verify(configs[i], *job.mesh, out).pass)
      failed.push_back(i);
  }
  std::ostream& out = g_world_rank <= 0 ? std::cout : quiet;
  if (failed.empty()) {
    out << "verify: all " << configs.size()
        << (configs.size() > 1 ? " layouts" : " layout") << " PASS\n";
    return 0;
  }
  out << "verify: FAIL: layout" << (failed.size() > 1 ? "s " : " ");
  for (size_t k = 0; k < failed.size(); ++k)
    out << (k > 0 ? ", " : "") << failed[k] + 1;
  out << " of " << configs.size() << " (";
  for (size_t k = 0; k < failed.size(); ++k)
    out << (k > 0 ? "; " : "") << printable(layouts[failed[k]]);
  out << ")\n";
  return 1;
}

// Prints one line of StepBenchResult (bench/*.sh read it).
int cmd_bench(
    const ConfigArgs& a,
    const AutoLayout& layout,
    int iters,
    int warmup,
    int* argc,
    char*** argv) {
  const Config config = job_config(a, layout, "bench", argc, argv);
  Job& job = start_job(config, argc, argv);
  const int threads = train_threads(config);
  ops::set_num_threads(threads);
  StepBenchResult r = run_step_bench(config, *job.mesh, iters, warmup);
  if (g_world_rank > 0)
    return 0;
  const ParallelConfig& p = config.parallel;
  std::printf(
      "ndtrain: %s, threads %d, %lld parameters\n",
      ops::blas_info().c_str(),
      threads,
      static_cast<long long>(r.parameters));  // held here
  std::printf(
      "bench model=%s threads=%d dp=%d median_ms=%.3f "
      "flops_per_step=%.0f fma_peak_gflops=%.1f mfu=%.3f update_ms=%.3f",
      to_string(config.model.kind),
      threads,
      p.dp,
      r.median_ms,
      r.flops_per_step,
      r.fma_peak_gflops,
      r.mfu,
      r.update_ms);
  if (r.has_ddp) {
    std::printf(
        " allreduce_ms=%.3f exposed_ms=%.3f hidden_fraction=%.3f",
        r.allreduce_ms,
        r.exposed_ms,
        r.allreduce_ms > 0 ? 1.0 - r.exposed_ms / r.allreduce_ms : 0.0);
  }
  if (r.has_pipeline) {
    std::printf(
        " pp=%d schedule=%s microbatches=%d chunks=%d recompute=%s "
        "bubble=%.4f bubble_theory=%.4f",
        p.pp,
        to_string(p.schedule),
        p.microbatches,
        p.pp_chunks,
        to_string(p.recompute),
        r.bubble,
        r.bubble_theory);
  }
  // Per rank, in MiB (pipeline stage s of replica 0 is rank s).
  std::printf(" act_peak_mib=");
  for (size_t i = 0; i < r.act_peak_mib.size(); ++i)
    std::printf("%s%.2f", i ? "," : "", r.act_peak_mib[i]);
  std::printf(" mem_peak_mib=");
  for (size_t i = 0; i < r.mem_peak_mib.size(); ++i)
    std::printf("%s%.2f", i ? "," : "", r.mem_peak_mib[i]);
  std::printf("\n");
  return 0;
}

// Prints the step x stage grid of a pipeline schedule (forward 1 time
// unit, backward 2) after checking it with verify_schedule; with
// `instructions` each rank's list too ("rank 0: L0 F0 SA0>1 ...").
int cmd_schedule(
    PipeSchedule kind,
    int pp,
    int microbatches,
    int chunks,
    bool instructions) {
  Schedule s = make_schedule(kind, pp, microbatches, chunks);
  ScheduleReport r = verify_schedule(s);
  std::cout << render_grid(s, r);
  if (instructions) {
    for (int rank = 0; rank < pp; ++rank) {
      std::cout << "rank " << rank << ":";
      for (const Instr& in : s.instrs[rank])
        std::cout << " " << to_string(in);
      std::cout << "\n";
    }
  }
  if (!r.ok) {
    std::cout << "verify: FAIL: " << r.error << "\n";
    return 1;
  }
  std::cout << "verify: PASS (peak in flight per rank:";
  for (int n : r.peak_in_flight)
    std::cout << " " << n;
  std::cout << ")\n";
  return 0;
}

// The plan's options of the machine and the memory limit (plan, and
// train --auto-layout); returns them.
std::vector<CLI::Option*> add_machine_options(CLI::App& app, MachineArgs& a) {
  struct Number {
    const char* name;
    double* value;
    const char* help;
    bool positive;  // else non-negative
  };
  const Number numbers[] = {
      {"--memory-mib", &a.memory_mib, "memory per rank (0: any)", false},
      {"--gflops",
       &a.gflops,
       "GFLOP/s of one rank (0: measure sgemm here)",
       false},
      {"--update-ns-per-param",
       &a.update_ns_per_param,
       "one rank's optimizer step per parameter it updates, ns (0: measure "
       "the config's optimizer here)",
       false},
      {"--link-alpha-us",
       &a.link_alpha_us,
       "latency of one step of a collective (2; --auto-layout: measured on "
       "the job's ranks unless this or --link-gbps is given)",
       false},
      {"--link-gbps",
       &a.link_gbps,
       "bus bandwidth between ranks, GB/s (7.5; --auto-layout: measured "
       "unless this or --link-alpha-us is given)",
       true},
      {"--host-link-alpha-us",
       &a.host_link_alpha_us,
       "latency of one step of a collective between hosts (30; "
       "--auto-layout on several hosts: measured unless this or "
       "--host-link-gbps is given)",
       false},
      {"--host-link-gbps",
       &a.host_link_gbps,
       "bus bandwidth between hosts, GB/s (1.25; --auto-layout on several "
       "hosts: measured unless this or --host-link-alpha-us is given)",
       true}};
  std::vector<CLI::Option*> out;
  for (const Number& n : numbers) {
    out.push_back(app.add_option(n.name, *n.value, n.help)
                      ->check(
                          n.positive ? CLI::Validator(CLI::PositiveNumber)
                                     : CLI::Validator(CLI::NonNegativeNumber)));
  }
  out.push_back(app.add_flag(
      "--comm-on-cores",
      a.comm_on_cores,
      "the ranks share one host's memory: every transfer is a copy by a "
      "rank's own core, so communication hides no compute"));
  out.push_back(int_option(
      app,
      "--ranks-per-host",
      a.ranks_per_host,
      0,
      "ranks fill hosts of this many in rank order; a group on two hosts "
      "uses the host link (0: one host; not given: one host for plan, the "
      "job's hosts under --auto-layout)"));
  return out;
}

// --auto-layout and, needing it, plan's options of the machine.
void add_auto_layout(CLI::App& app, AutoLayout& a) {
  CLI::Option* flag = app.add_flag(
      "--auto-layout",
      a.on,
      "the layout `ndtrain plan` picks for the job's ranks (the options "
      "below as plan's)");
  for (CLI::Option* o : add_machine_options(app, a.machine))
    o->needs(flag);
}

int run(int argc, char** argv) {
  if (argc < 2) {
    std::cout << kUsage;
    return 2;
  }
  CLI::App app("ndtrain: n-dimensional parallel training", "ndtrain");
  app.require_subcommand(1);
  ConfigArgs train_args, verify_args, bench_args;
  CLI::App* train = app.add_subcommand("train", "train a model");
  add_config_args(*train, train_args);
  CLI::App* verify =
      app.add_subcommand("verify", "compare a layout with the serial run");
  add_config_args(*verify, verify_args);
  CLI::App* bench = app.add_subcommand("bench", "time training steps");
  add_config_args(*bench, bench_args);
  AutoLayout train_layout, verify_layout, bench_layout;
  add_auto_layout(*train, train_layout);
  add_auto_layout(*verify, verify_layout);
  add_auto_layout(*bench, bench_layout);
  std::vector<std::string> verify_layouts;
  verify
      ->add_option(
          "--layout",
          verify_layouts,
          "a layout to compare (its overrides, after the shared ones); "
          "repeat it to compare several in one job")
      ->type_name("\"KEY=VALUE ...\"")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  int iters = 20, warmup = 5;
  int_option(*bench, "--iters", iters, 1, "timed steps (20)");
  int_option(*bench, "--warmup", warmup, 0, "untimed steps first (5)");
  CLI::App* peak = app.add_subcommand("peak", "measure the sgemm peak");
  int threads = 0;
  int_option(*peak, "--threads", threads, 0, "threads (0: all cores)");
  CLI::App* schedule =
      app.add_subcommand("schedule", "print and check a pipeline schedule");
  int pp = 0, microbatches = 0, chunks = 1;
  std::string kind_name;
  int_option(*schedule, "--pp", pp, 1, "pipeline ranks")->required();
  int_option(*schedule, "--microbatches", microbatches, 1, "micro-batches")
      ->required();
  int_option(*schedule, "--chunks", chunks, 1, "chunks per rank (1)");
  bool instructions = false;
  schedule->add_flag(
      "--instructions", instructions, "also print each rank's instructions");
  std::vector<std::string> kinds;
  for (const auto& e : EnumNames<PipeSchedule>::kTable)
    kinds.push_back(e.name);
  schedule->add_option("--kind", kind_name, "the schedule")
      ->required()
      ->check(CLI::IsMember(kinds));
  PlanArgs plan_args;
  CLI::App* plan = app.add_subcommand(
      "plan", "rank the layouts of N ranks by predicted step time");
  add_config_args(*plan, plan_args.config);
  int_option(*plan, "--ranks", plan_args.ranks, 1, "ranks of the job")
      ->required();
  int_option(*plan, "--top", plan_args.top, 1, "layouts to print (10)");
  add_machine_options(*plan, plan_args.machine);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout
        << (app.get_subcommands().empty() ? std::string(kUsage)
                                          : app.get_subcommands()[0]->help());
    return 0;
  } catch (const CLI::ParseError& e) {
    const auto used = app.get_subcommands();
    throw ConfigError(
        (used.empty() ? std::string()
                      : "ndtrain " + used[0]->get_name() + ": ") +
        printable(e.what()) + "\n" + kUsage);
  }
  for (auto [cmd, layout] :
       {std::pair{train, &train_layout},
        {verify, &verify_layout},
        {bench, &bench_layout}}) {
    layout->machine.link_given =
        cmd->count("--link-alpha-us") + cmd->count("--link-gbps") > 0;
    layout->machine.host_link_given =
        cmd->count("--host-link-alpha-us") + cmd->count("--host-link-gbps") > 0;
  }
  if (*train)
    return cmd_train(train_args, train_layout, &argc, &argv);
  if (*verify && !verify_layouts.empty()) {
    return cmd_verify_layouts(
        verify_args, verify_layout, verify_layouts, &argc, &argv);
  }
  if (*verify)
    return cmd_verify(verify_args, verify_layout, &argc, &argv);
  if (*bench)
    return cmd_bench(bench_args, bench_layout, iters, warmup, &argc, &argv);
  if (*peak)
    return cmd_peak(threads);
  if (*plan)
    return cmd_plan(plan_args);
  return cmd_schedule(
      *enum_from_string<PipeSchedule>(kind_name),
      pp,
      microbatches,
      chunks,
      instructions);
}
}  // namespace
}  // namespace ndt

namespace {

// The message with control characters other than newline and tab
// escaped: text from files and names can hold ESC or other terminal codes.
std::string terminal_safe(const char* what) {
  std::string out;
  for (const char* p = what; *p; ++p) {
    const auto c = static_cast<unsigned char>(*p);
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// Reports an error and ends the job. `shared`: an error that every rank
// may meet alike (a bad config, data or checkpoint), reported by rank 0
// alone where it has it; otherwise (a failed or timed-out collective,
// an internal error) each rank names its own.
int fail(const char* raw, bool shared) {
  const std::string safe = terminal_safe(raw);
  const char* what = safe.c_str();
  std::fflush(stdout);
  if (ndt::g_world_size == 1 && ndt::launcher_rank() > 0) {
    // An error before MPI started (a bad config) is the same on every
    // rank: rank 0 reports it and its exit ends the job. Ending at once
    // here could end the job before rank 0 has printed; the wait outlasts
    // mpirun's stopping of the others (about 1.2 s), and after it a rank
    // whose error rank 0 did not share (a file only its host lacks)
    // reports its own.
    std::this_thread::sleep_for(std::chrono::seconds(5));
    std::fprintf(stderr, "[rank %d] error: %s\n", ndt::launcher_rank(), what);
    return 1;
  }
  if (ndt::g_world_size > 1) {
    if (shared && ndt::g_world_rank > 0) {
      // As before MPI started: rank 0's abort ends this rank silently
      // (mpirun stops the others about 1.2 s after it) unless rank 0 did
      // not meet the error; then this rank reports its own, within half
      // the watchdog's bound so that no collective times out first.
      signal(SIGTERM, SIG_DFL);
      const double timeout =
          ndt::g_job && ndt::g_job->world ? ndt::g_job->world->timeout_s() : 0;
      const double wait = timeout > 0 ? std::min(5.0, timeout / 2) : 5.0;
      std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    }
    std::fprintf(stderr, "[rank %d] error: %s\n", ndt::g_world_rank, what);
    std::fflush(stderr);
    ndt::MpiRuntime::abort(1);  // ends every rank of the job
  } else {
    std::fprintf(stderr, "error: %s\n", what);
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  ndt::ops::flush_denormals();
  try {
    int code = ndt::run(argc, argv);
    ndt::g_job.reset();  // MPI_Finalize after a clean run
    return code;
  } catch (const ndt::CommError& e) {
    return fail(e.what(), false);
  } catch (const ndt::Error& e) {
    return fail(e.what(), true);
  } catch (const std::bad_alloc&) {
    return fail(
        "out of memory: the configured sizes (train.batch_size, the model's "
        "dimensions, the dataset) need more memory than this machine can "
        "give",
        false);
  } catch (const std::exception& e) {
    return fail(e.what(), false);
  }
}
