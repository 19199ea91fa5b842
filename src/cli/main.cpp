// ndtrain command-line entry point.
//
//   [mpirun -np N] ndtrain train -c CONFIG.yaml [key=value ...]
//   [mpirun -np N] ndtrain verify -c CONFIG.yaml [key=value ...]
//   ndtrain bench -c CONFIG.yaml [key=value ...] [--iters N] [--warmup N]
//   ndtrain peak [--threads N]
//   ndtrain schedule --pp P --microbatches M --kind K [--chunks V]
//
// The only place that catches ndt::Error: it prints "[rank r] error:
// <message>" and, in a multi-rank job, aborts every rank (MPI_Abort) so no
// peer hangs.
#include <omp.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "base/activity.h"
#include "base/check.h"
#include "comm/mesh.h"
#include "comm/mpi_process_group.h"
#include "comm/self_process_group.h"
#include "io/config.h"
#include "io/untrusted.h"
#include "nn/builder.h"
#include "ops/ops.h"
#include "parallel/pipeline/schedules.h"
#include "parallel/pipeline/verify.h"
#include "parallel/tensor_parallel_mode.h"
#include "tensor/memory.h"
#include "train/data_source.h"
#include "train/engine.h"
#include "train/factory.h"
#include "train/peak.h"
#include "train/trace_file.h"
#include "train/trainer.h"
#include "train/verify.h"

namespace ndt {
namespace {

constexpr const char* kUsage =
    "usage:\n"
    "  [mpirun -np N] ndtrain train -c CONFIG.yaml [key=value ...]\n"
    "  [mpirun -np N] ndtrain verify -c CONFIG.yaml [key=value ...]\n"
    "  ndtrain bench -c CONFIG.yaml [key=value ...] [--iters N] [--warmup N]\n"
    "  ndtrain peak [--threads N]\n"
    "  ndtrain schedule --pp P --microbatches M --kind "
    "naive|gpipe|1f1b|interleaved [--chunks V]\n";

struct Args {
  std::string config;
  std::vector<std::string> overrides;
  int iters = 20;
  int warmup = 5;
  int threads = 0;
  int pp = 0;  // schedule
  int microbatches = 0;
  int chunks = 1;
  std::string kind;
};

int parse_int(const std::string& flag, const char* value) {
  NDT_CHECK(value != nullptr, ConfigError, flag, " needs a value");
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(value, &end, 10);
  NDT_CHECK(
      *value != '\0' && *end == '\0' && v >= 0,
      ConfigError,
      flag,
      " must be a non-negative integer, got '",
      printable(value),
      "'");
  NDT_CHECK(
      errno != ERANGE && v <= std::numeric_limits<int>::max(),
      ConfigError,
      flag,
      " must be at most ",
      std::numeric_limits<int>::max(),
      ", got ",
      printable(value));
  return static_cast<int>(v);
}

Args parse_args(int argc, char** argv, int first) {
  Args a;
  for (int i = first; i < argc; ++i) {
    std::string s = argv[i];
    const char* next = i + 1 < argc ? argv[i + 1] : nullptr;
    if (s == "-c" || s == "--config") {
      NDT_CHECK(next != nullptr, ConfigError, s, " needs a file name");
      a.config = next;
      ++i;
    } else if (s == "--iters") {
      a.iters = parse_int(s, next);
      ++i;
    } else if (s == "--warmup") {
      a.warmup = parse_int(s, next);
      ++i;
    } else if (s == "--threads") {
      a.threads = parse_int(s, next);
      ++i;
    } else if (s == "--pp") {
      a.pp = parse_int(s, next);
      ++i;
    } else if (s == "--microbatches") {
      a.microbatches = parse_int(s, next);
      ++i;
    } else if (s == "--chunks") {
      a.chunks = parse_int(s, next);
      ++i;
    } else if (s == "--kind") {
      NDT_CHECK(next != nullptr, ConfigError, s, " needs a value");
      a.kind = next;
      ++i;
    } else if (s.find('=') != std::string::npos && s[0] != '-') {
      a.overrides.push_back(s);
    } else {
      throw ConfigError("unknown argument '" + printable(s) + "'\n" + kUsage);
    }
  }
  return a;
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

Job& start_job(const Config& config, int* argc, char*** argv) {
  Job& job = g_job.emplace();
  std::vector<std::string> names;
  std::vector<int> sizes;
  std::string layout;
  int want = 1;
  for (const MeshAxis& a : mesh_axes(config)) {
    names.push_back(a.name);
    sizes.push_back(a.size);
    want *= a.size;
    layout += (layout.empty() ? "" : " x ") + a.name + " " +
              std::to_string(a.size);
  }
  int n = 1;
  if (launched_by_mpi()) {
    job.mpi = std::make_unique<MpiRuntime>(argc, argv);
    g_world_rank = job.mpi->world_rank();
    g_world_size = job.mpi->world_size();
    if (g_world_size > 1)
      install_termination_report(g_world_rank);
    n = g_world_size;
  }
  NDT_CHECK(
      n == want,
      ConfigError,
      "the layout (",
      layout,
      ", parallel.dp_mode ",
      to_string(config.parallel.dp_mode),
      ") needs ",
      want,
      " MPI ranks, the job has ",
      n,
      "; run mpirun -np ",
      want,
      " ndtrain ... or change the layout");
  if (n > 1) {
    job.world = job.mpi->world();
  } else {
    job.world = make_self_group("world");
  }
  job.world->set_timeout_s(config.comm.timeout_s);
  job.mesh = std::make_unique<Mesh>(*job.world, sizes, names);
  return job;
}

int cmd_train(const Args& a, int* argc, char*** argv) {
  NDT_CHECK(
      !a.config.empty(), ConfigError, "train needs -c CONFIG.yaml\n", kUsage);
  Config config = load_config(a.config, a.overrides);
  Job& job = start_job(config, argc, argv);
  run_training(config, TrainOptions(), *job.mesh);
  return 0;
}

int cmd_verify(const Args& a, int* argc, char*** argv) {
  NDT_CHECK(
      !a.config.empty(), ConfigError, "verify needs -c CONFIG.yaml\n", kUsage);
  Config config = load_config(a.config, a.overrides);
  Job& job = start_job(config, argc, argv);
  std::ostringstream quiet;
  std::ostream& out = g_world_rank <= 0 ? std::cout : quiet;
  VerifyReport rep = run_verify(config, *job.mesh, out);
  return rep.pass ? 0 : 1;
}

// Times full training steps (data, forward, backward, gradient
// reduction, optimizer) of the configured layout on synthetic or real data.
// Under mpirun with parallel.dp=N it times the distributed step and reports
// how much of the all-reduce time backward hid.
int cmd_bench(const Args& a, int* argc, char*** argv) {
  NDT_CHECK(!a.config.empty(), ConfigError, "bench needs -c CONFIG.yaml");
  NDT_CHECK(a.iters >= 1, ConfigError, "--iters must be >= 1");
  Config config = load_config(a.config, a.overrides);
  Job& job = start_job(config, argc, argv);
  const int threads =
      config.train.threads > 0 ? config.train.threads : omp_get_num_procs();
  ops::set_num_threads(threads);
  DataSource data(config);
  Engine engine(config, data, *job.mesh);
  std::vector<double> ms;
  double exposed0 = 0, comm0 = 0;
  // Pipeline: compute time and makespan summed over the timed steps.
  double pipe_busy = 0, pipe_span = 0;
  ProcessGroup& pp = job.mesh->group("pp");
  ProcessGroup& world = job.mesh->world();
  const bool pipeline = config.parallel.pp > 1;
  align_trace_origin(engine.tracer(), *job.mesh);
  for (int i = 0; i < a.warmup + a.iters; ++i) {
    if (i == a.warmup) {
      if (engine.ddp()) {
        exposed0 = engine.ddp()->exposed_seconds();
        comm0 = engine.ddp()->comm_seconds();
      }
      memory_reset_peaks();
    }
    world.barrier();
    auto t0 = std::chrono::steady_clock::now();
    engine.step(i);
    double dt = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - t0)
                    .count();
    if (i >= a.warmup) {
      ms.push_back(dt);
      if (pipeline) {
        // The step's makespan runs from the earliest entry to the latest
        // end of compute over the pipeline's ranks.
        const PipelineTiming& t = engine.executor().timing();
        double span[2] = {-t.start, t.end};
        double busy = t.busy;
        pp.all_reduce(span, 2, ReduceOp::kMax);
        pp.all_reduce(&busy, 1);
        pipe_busy += busy;
        pipe_span += span[0] + span[1];
      }
    }
  }
  // Peak activation bytes of each rank, gathered by sum into slots.
  const int world_size = world.size();
  std::vector<double> act_peak(world_size, 0.0);
  act_peak[std::max(g_world_rank, 0)] = static_cast<double>(
      memory_stats().peak_bytes[static_cast<int>(MemTag::kActs)]);
  world.all_reduce(act_peak.data(), world_size);
  std::sort(ms.begin(), ms.end());
  double median = ms[ms.size() / 2];
  if (ms.size() % 2 == 0)
    median = 0.5 * (ms[ms.size() / 2 - 1] + median);
  if (g_world_rank > 0)
    return 0;
  Model& model = engine.model();
  std::printf(
      "ndtrain: %s, threads %d, %lld parameters\n",
      ops::blas_info().c_str(),
      threads,
      static_cast<long long>(model.num_parameters()));  // held here
  std::printf(
      "bench model=%s threads=%d dp=%d median_ms=%.3f "
      "flops_per_step=%.0f",
      model.kind.c_str(),
      threads,
      config.parallel.dp,
      median,
      model.flops_per_sample * config.train.batch_size);
  if (engine.ddp()) {
    double comm = (engine.ddp()->comm_seconds() - comm0) / a.iters;
    double exposed = (engine.ddp()->exposed_seconds() - exposed0) / a.iters;
    std::printf(
        " allreduce_ms=%.3f exposed_ms=%.3f hidden_fraction=%.3f",
        1e3 * comm,
        1e3 * exposed,
        comm > 0 ? 1.0 - exposed / comm : 0.0);
  }
  if (pipeline) {
    const ParallelConfig& p = config.parallel;
    std::printf(
        " pp=%d schedule=%s microbatches=%d chunks=%d recompute=%s "
        "bubble=%.4f bubble_theory=%.4f",
        p.pp,
        to_string(p.schedule),
        p.microbatches,
        p.pp_chunks,
        to_string(p.recompute),
        1.0 - pipe_busy / (p.pp * pipe_span),
        double(p.pp - 1) / (p.pp_chunks * p.microbatches + p.pp - 1));
  }
  // Per rank, in MiB (pipeline stage s of replica 0 is rank s).
  std::printf(" act_peak_mib=");
  for (int r = 0; r < world_size; ++r)
    std::printf("%s%.2f", r ? "," : "", act_peak[r] / (1 << 20));
  std::printf("\n");
  return 0;
}

int cmd_peak(const Args& a) {
  const int threads = a.threads > 0 ? a.threads : omp_get_num_procs();
  ops::set_num_threads(threads);
  std::printf("ndtrain: %s, threads %d\n", ops::blas_info().c_str(), threads);
  std::printf("peak_gflops=%.1f\n", measure_sgemm_peak_gflops());
  return 0;
}

// Prints the step x stage grid of a pipeline schedule (forward 1 time
// unit, backward 2) after checking it with verify_schedule.
int cmd_schedule(const Args& a) {
  std::optional<ScheduleKind> kind;
  for (ScheduleKind k :
       {ScheduleKind::kNaive,
        ScheduleKind::kGpipe,
        ScheduleKind::kOneFOneB,
        ScheduleKind::kInterleaved}) {
    if (a.kind == to_string(k))
      kind = k;
  }
  NDT_CHECK(
      kind.has_value(),
      ConfigError,
      "--kind must be naive, gpipe, 1f1b or interleaved, got '",
      a.kind,
      "'\n",
      kUsage);
  NDT_CHECK(
      a.pp >= 1 && a.microbatches >= 1,
      ConfigError,
      "schedule needs --pp P >= 1 and --microbatches M >= 1\n",
      kUsage);
  Schedule s = make_schedule(*kind, a.pp, a.microbatches, a.chunks);
  ScheduleReport r = verify_schedule(s);
  std::cout << render_grid(s, r);
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

int run(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "--help")) {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  std::string cmd = argv[1];
  Args a = parse_args(argc, argv, 2);
  if (cmd == "train")
    return cmd_train(a, &argc, &argv);
  if (cmd == "verify")
    return cmd_verify(a, &argc, &argv);
  if (cmd == "bench")
    return cmd_bench(a, &argc, &argv);
  if (cmd == "peak")
    return cmd_peak(a);
  if (cmd == "schedule")
    return cmd_schedule(a);
  throw ConfigError("unknown command '" + printable(cmd) + "'\n" + kUsage);
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

int fail(const char* raw) {
  const std::string safe = terminal_safe(raw);
  const char* what = safe.c_str();
  std::fflush(stdout);
  if (ndt::g_world_size == 1 && ndt::launcher_rank() > 0) {
    // An error before MPI started (a bad config) is the same on every
    // rank: rank 0 alone reports it.
    return 1;
  }
  if (ndt::g_world_size > 1) {
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
  try {
    int code = ndt::run(argc, argv);
    ndt::g_job.reset();  // MPI_Finalize after a clean run
    return code;
  } catch (const ndt::Error& e) {
    return fail(e.what());
  } catch (const std::bad_alloc&) {
    return fail(
        "out of memory: the configured sizes (train.batch_size, the model's "
        "dimensions, the dataset) need more memory than this machine can "
        "give");
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}
