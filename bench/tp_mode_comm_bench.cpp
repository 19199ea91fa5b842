// tp_mode_comm_bench: communication of one training step in any tensor-
// parallel mode (1d, 2d, 2.5d, 3d) or under sequence parallelism (any
// parallel.sp_attention), counted by the process groups
// (CommLedger, Note [Comm ledger] in comm/process_group.h) against the plan
// library's step model (plan/step_comm.h; ctest checks the same on the
// threads backend, tests/plan/test_step_comm.cpp).
//
//   mpirun -np N tp_mode_comm_bench -c CONFIG [key=value ...]
//     builds the engine of the config on real data exactly as `ndtrain
//     train` does (every mesh axis, the mode's builder), runs one
//     Engine::step(), and prints per rank-0 group: calls and bytes counted
//     vs planned, then the rank's bytes per step in total (ledger units:
//     fp32 4, fp64 8 bytes per element; not wire bytes) and
//     max_comm_volume_error=X, the largest relative difference of bytes
//     over every group of every rank (calls must match too; a mismatch in
//     calls counts as error 1). Where the plan models the step's
//     activations (step_activation_modelled: any model, tensor-parallel
//     mode and sequence-parallel core, with or without recompute, and the
//     GPT's and the ViT's pipelines under every schedule) every rank also
//     holds its activation peak from the allocator's ledger to the plan's
//     step model (plan/activation_memory.h): max_act_peak_error_bytes=X
//     over every rank, else max_act_peak_error_bytes=unmodelled. Exit 1
//     when either differs.
//   mpirun -np N tp_mode_comm_bench -c CONFIG [key=value ...]
//       --shape NAME [key=value ...] [--shape NAME [key=value ...]]...
//     the same for each shape in turn in one job (the config with the
//     shared overrides, then the shape's), each on an engine of its own
//     with the ledger's peaks reset, then one line over all shapes:
//     step_shapes=K max_comm_volume_error=X max_act_peak_error_bytes=Y
//     (Y unmodelled if any shape's step is). Exit 1 when any differs.
//     (One MPI start, one dataset load and one set of oneDNN kernels for
//     several shapes of a layout: the tests' activation checks.)
//   tp_mode_comm_bench --predict
//     prints the plan's per-rank bytes of one transformer block (forward +
//     backward) of a GPT-2-medium-sized layer (C = 1024, F = 4096, 64
//     samples x 1024 tokens per micro-batch) at 64 and 512 tensor-parallel
//     ranks in each mode whose grid fits that count (2.5d with d <= q; 1d
//     only where the 16 heads split).
//
// A benchmark, not src/.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/check.h"
#include "base/error.h"
#include "comm/mesh.h"
#include "comm/mpi_process_group.h"
#include "comm/mpi_runtime.h"
#include "io/config.h"
#include "ops/ops.h"
#include "parallel/tensor_parallel_mode.h"
#include "plan/activation_memory.h"
#include "plan/ddp_comm.h"
#include "plan/model_shape.h"
#include "plan/rank_memory.h"
#include "plan/step_comm.h"
#include "plan/tp1d_comm.h"
#include "plan/tp2d_comm.h"
#include "plan/tp3d_comm.h"
#include "tensor/memory.h"
#include "train/data_source.h"
#include "train/engine.h"

namespace ndt {
namespace {

double rel_error(const CommVolume& got, const CommVolume& want) {
  if (got.total_calls() != want.total_calls())
    return 1.0;
  const double w = static_cast<double>(want.total_bytes());
  const double g = static_cast<double>(got.total_bytes());
  return w == 0 ? (g == 0 ? 0.0 : 1.0) : std::fabs(g - w) / w;
}

// One shape's step: its largest relative communication-volume error over
// every group of every rank, and its largest activation-peak error in
// bytes over every rank (-1: the step's activations are not modelled).
struct StepCheck {
  double comm_err = 0;
  int64_t act_err_bytes = -1;
};

StepCheck measure(ProcessGroup& world, const Config& config) {
  memory_reset_peaks();  // a previous shape's engine is gone
  const std::unique_ptr<Mesh> layout = make_layout_mesh(world, config);
  Mesh& mesh = *layout;
  ops::set_num_threads(train_threads(config));  // as ndtrain train
  DataSource data(config);
  Engine engine(config, data, mesh);
  for (const std::string& g : mesh.group_names())
    mesh.named_group(g).reset_comm_ledger();
  engine.step(0);
  // Under ZeRO stage 1 the rank's place in the gradient sync picks the
  // buckets it updates.
  const int sync_rank = engine.ddp() ? engine.ddp()->group().rank() : 0;
  const StepComm want =
      step_comm(config, mesh.coord("pp"), sync_rank, mesh.coord("sp"));
  double err = 0;
  int64_t total = 0, planned = 0;
  std::vector<std::string> lines;
  for (const std::string& g : mesh.group_names()) {
    const CommVolume got = from_ledger(mesh.named_group(g).comm_ledger());
    const CommVolume& w = want.at(g);
    err = std::max(err, rel_error(got, w));
    total += got.total_bytes();
    planned += w.total_bytes();
    if (got.total_calls() > 0 || w.total_calls() > 0) {
      char buf[256];
      std::snprintf(
          buf,
          sizeof buf,
          "  %-22s calls %5lld / %5lld  bytes %12lld / %12lld",
          g.c_str(),
          static_cast<long long>(got.total_calls()),
          static_cast<long long>(w.total_calls()),
          static_cast<long long>(got.total_bytes()),
          static_cast<long long>(w.total_bytes()));
      lines.push_back(buf);
    }
  }
  for (const auto& [g, w] : want.groups) {
    bool found = false;
    for (const std::string& n : mesh.group_names())
      found = found || n == g;
    if (!found && w.total_calls() > 0)
      err = 1.0;  // planned on a group the run does not have
  }
  double worst = err;
  world.all_reduce(&worst, 1, ReduceOp::kMax);
  // The step's activation peak against the plan's step model, on every
  // rank (-1: not modelled).
  const ParallelConfig& p = config.parallel;
  const ModelShape shape = model_shape(config.model, p);
  const int64_t samples = config.train.batch_size / p.dp / p.microbatches;
  const int64_t acts_peak =
      memory_stats().peak_bytes[static_cast<int>(MemTag::kActs)];
  int64_t step_acts = -1;
  if (step_activation_modelled(p))
    step_acts = step_activation_bytes(
        shape,
        p,
        config.model.heads,
        samples,
        config.model.dropout,
        train_threads(config),
        mesh.coord("sp"),
        mesh.coord("pp"));
  double act_err = step_acts < 0
                       ? 0.0
                       : std::fabs(static_cast<double>(acts_peak - step_acts));
  world.all_reduce(&act_err, 1, ReduceOp::kMax);
  if (world.rank() == 0) {
    std::printf(
        "mode_comm: tp=%d tp_mode=%s dp=%d pp=%d sp=%d (%d ranks), rank 0 per "
        "group (counted / planned):\n",
        p.tp,
        p.tp > 1 ? to_string(p.tp_mode) : "none",
        p.dp,
        p.pp,
        p.sp,
        world.size());
    for (const std::string& l : lines)
      std::printf("%s\n", l.c_str());
    std::printf(
        "mode_comm_row tp=%d mode=%s rank0_bytes_per_step=%lld "
        "planned=%lld max_comm_volume_error=%.3g sp=%d sp_attention=%s\n",
        p.tp,
        p.tp > 1 ? to_string(p.tp_mode) : "none",
        static_cast<long long>(total),
        static_cast<long long>(planned),
        worst,
        p.sp,
        to_string(p.sp_attention));
    // Model state from the allocator's ledger against the plan's formula;
    // activations: the measured peak, beside the blocks' forward state.
    // The allocator counts each tensor's size class (mem_block_bytes): the
    // formula's tensors, each a block of its own (live after the step;
    // gradients held in data-parallel buckets are blocked differently).
    const MemoryStats m = memory_stats();
    const RankMemory rm = rank_memory(config, mesh.coord("pp"), sync_rank);
    // Under ZeRO the optimizer's tensors are those of the
    // parameters this rank updates.
    std::vector<std::vector<bool>> updated;
    if (p.zero > 0 && grad_sync_ranks(config) > 1) {
      updated = zero_updated_params(
          shape,
          {},
          static_cast<int64_t>(p.bucket_mb * (1 << 20)),
          grad_sync_ranks(config),
          sync_rank);
    }
    int64_t blocks = 0, optim_blocks = 0;
    for (size_t m = 0; m < shape.modules.size(); ++m) {
      const std::vector<ParamShape>& ps = shape.modules[m].params;
      for (size_t i = 0; i < ps.size(); ++i) {
        const auto b =
            static_cast<int64_t>(mem_block_bytes(4 * ps[i].numel_local));
        blocks += b;
        if (updated.empty() || updated[m][i])
          optim_blocks += b;
      }
    }
    const int64_t states = optimizer_states_per_param(config.optim.name);
    // Every block's forward state at once (the bulk of the step's
    // activation peak: plan/activation_memory.h; the input layer's output,
    // the head and backward's gradients come on top). One micro-batch of
    // the whole model: 0 with a pipeline (stages hold several).
    int64_t blocks_acts = 0;
    if (p.pp == 1) {
      int64_t n_blocks = 0;
      for (const ModuleShape& mod : shape.modules)
        n_blocks += mod.kind == ModuleKind::kTransformerBlock;
      blocks_acts = n_blocks * block_activation_bytes(
                                   shape, p, config.model.heads, samples);
    }
    auto live = [&](MemTag t) {
      return static_cast<long long>(m.current_bytes[static_cast<int>(t)]);
    };
    std::printf(
        "mode_mem_row tp=%d mode=%s params_elements=%lld params_bytes=%lld "
        "params_planned=%lld grads_bytes=%lld grads_planned=%lld "
        "optim_bytes=%lld optim_planned=%lld acts_peak_bytes=%lld "
        "acts_blocks_planned=%lld acts_step_planned=%lld "
        "max_act_peak_error_bytes=%s\n",
        p.tp,
        p.tp > 1 ? to_string(p.tp_mode) : "none",
        static_cast<long long>(rm.params),
        live(MemTag::kParams),
        static_cast<long long>(blocks),
        live(MemTag::kGrads),
        static_cast<long long>(blocks),
        live(MemTag::kOptim),
        static_cast<long long>(states * optim_blocks),
        static_cast<long long>(acts_peak),
        static_cast<long long>(blocks_acts),
        static_cast<long long>(step_acts),
        step_acts < 0 ? "unmodelled"
                      : std::to_string(static_cast<int64_t>(act_err)).c_str());
  }
  return {worst, step_acts < 0 ? -1 : static_cast<int64_t>(act_err)};
}

// Splits "key=value ... --shape NAME key=value ..." into the shared
// overrides and each named shape's.
struct ShapeArgs {
  std::vector<std::string> shared;
  std::vector<std::pair<std::string, std::vector<std::string>>> shapes;
};

ShapeArgs split_shapes(const std::vector<std::string>& args) {
  ShapeArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] != "--shape") {
      (out.shapes.empty() ? out.shared : out.shapes.back().second)
          .push_back(args[i]);
      continue;
    }
    NDT_CHECK(
        i + 1 < args.size() && args[i + 1].find('=') == std::string::npos &&
            args[i + 1] != "--shape",
        ConfigError,
        "--shape needs a name before its key=value overrides");
    out.shapes.push_back({args[++i], {}});
  }
  return out;
}

int run(ProcessGroup& world, const std::string& path, const ShapeArgs& a) {
  if (a.shapes.empty()) {
    const StepCheck c = measure(world, load_config(path, a.shared));
    return c.comm_err == 0 && c.act_err_bytes <= 0 ? 0 : 1;
  }
  // Every shape's config first: a bad one fails before any step runs.
  std::vector<Config> configs;
  for (const auto& [name, overrides] : a.shapes) {
    std::vector<std::string> args = a.shared;
    args.insert(args.end(), overrides.begin(), overrides.end());
    configs.push_back(load_config(path, args));
  }
  double comm_err = 0;
  int64_t act_err = 0;
  bool unmodelled = false;
  for (size_t i = 0; i < configs.size(); ++i) {
    if (world.rank() == 0) {
      std::printf("step_shape %s\n", a.shapes[i].first.c_str());
      std::fflush(stdout);
    }
    const StepCheck c = measure(world, configs[i]);
    comm_err = std::max(comm_err, c.comm_err);
    act_err = std::max(act_err, c.act_err_bytes);
    unmodelled = unmodelled || c.act_err_bytes < 0;
  }
  if (world.rank() == 0)
    std::printf(
        "step_shapes=%zu max_comm_volume_error=%.3g "
        "max_act_peak_error_bytes=%s\n",
        configs.size(),
        comm_err,
        unmodelled ? "unmodelled" : std::to_string(act_err).c_str());
  return comm_err == 0 && act_err == 0 ? 0 : 1;
}

int64_t bytes(const PassVolume& v) {
  return v.fwd.total_bytes() + v.bwd.total_bytes();
}

// Local parameter elements of one block on a q x q grid (weights and
// biases of the four linears, two LayerNorms): what 2.5D's depth
// all-reduce moves per step, once per step whatever the micro-batches.
int64_t block2d_param_numel(int64_t q, int64_t C, int64_t F) {
  return (4 * C * C + 2 * C * F + (6 * C + F) + 4 * C) / (q * q);
}

void predict() {
  const int64_t C = 1024, F = 4096, heads = 16, N = 64 * 1024;
  std::printf(
      "plan: one GPT-2-medium-sized block (C=%lld, F=%lld, %lld heads, "
      "%lld tokens per micro-batch), forward + backward, bytes per rank "
      "(ledger units)\n",
      static_cast<long long>(C),
      static_cast<long long>(F),
      static_cast<long long>(heads),
      static_cast<long long>(N));
  std::printf("%-6s %-6s %-12s %16s\n", "ranks", "mode", "grid", "bytes");
  for (int P : {64, 512}) {
    if (heads % P == 0) {
      const PassVolume t1 = transformer_block_comm({P, false}, N, C);
      std::printf(
          "%-6d %-6s %-12s %16lld\n", P, "1d", "tp", (long long)bytes(t1));
    } else {
      std::printf(
          "%-6d %-6s %-12s %16s  (%lld heads do not split over %d ranks)\n",
          P,
          "1d",
          "tp",
          "n/a",
          static_cast<long long>(heads),
          P);
    }
    for (int q = 2; q * q <= P; ++q) {
      if (q * q == P) {
        const Tp2dVolume v = transformer_block2d_comm(q, N, C, F);
        char grid[32];
        std::snprintf(grid, sizeof grid, "q=%d", q);
        std::printf(
            "%-6d %-6s %-12s %16lld\n",
            P,
            "2d",
            grid,
            (long long)(bytes(v.row) + bytes(v.col)));
      }
    }
    for (int q = 2; q * q <= P; ++q) {
      const int d = P / (q * q);
      if (d > 1 && d <= q && q * q * d == P) {
        // Each grid runs the 2D block on its N / d tokens; the depth's
        // gradient all-reduce is bucketed with the data-parallel one.
        const Tp2dVolume v = transformer_block2d_comm(q, N / d, C, F);
        char grid[32];
        std::snprintf(grid, sizeof grid, "q=%d d=%d", q, d);
        std::printf(
            "%-6d %-6s %-12s %16lld  + depth all-reduce %lld per step\n",
            P,
            "2.5d",
            grid,
            (long long)(bytes(v.row) + bytes(v.col)),
            (long long)(4 * block2d_param_numel(q, C, F)));
      }
    }
    for (int p = 2; p * p * p <= P; ++p) {
      if (p * p * p == P) {
        const Tp3dVolume v = transformer_block3d_comm(p, N, C, F);
        char grid[32];
        std::snprintf(grid, sizeof grid, "p=%d", p);
        std::printf(
            "%-6d %-6s %-12s %16lld\n",
            P,
            "3d",
            grid,
            (long long)(bytes(v.out) + bytes(v.in) + bytes(v.wt) + bytes(v.samples_a) + bytes(v.samples_b)));
      }
    }
  }
}

}  // namespace
}  // namespace ndt

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--predict") {
    ndt::predict();
    return 0;
  }
  ndt::MpiRuntime mpi(&argc, &argv);
  try {
    if (argc < 3 || std::string(argv[1]) != "-c") {
      if (mpi.world_rank() == 0)
        std::fprintf(
            stderr,
            "usage: mpirun -np N tp_mode_comm_bench -c CONFIG [key=value ...]"
            "\n"
            "         [--shape NAME [key=value ...]]...\n"
            "       tp_mode_comm_bench --predict\n");
      return 2;
    }
    const ndt::ShapeArgs args =
        ndt::split_shapes(std::vector<std::string>(argv + 3, argv + argc));
    auto world = mpi.world();
    return ndt::run(*world, argv[2], args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] error: %s\n", mpi.world_rank(), e.what());
    ndt::MpiRuntime::abort(1);
    return 1;
  }
}
