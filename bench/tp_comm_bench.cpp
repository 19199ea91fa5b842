// tp_comm_bench: communication volume of 1D (Megatron) tensor parallelism,
// counted by the process group (CommLedger, Note [Comm ledger] in
// comm/process_group.h) against the analytic volume of the plan library
// (plan/tp1d_comm.h, ALGORITHMS.md 2.0; ctest checks the same formulas on
// the threads backend, tests/plan). Run under `mpirun -np P` (bench/tp.sh);
// tp = P = the world size, the tp group is the world group.
//
// Each case is built with Tp1dBuilder exactly as the models build it, in
// both modes (split=no: replicated activations; split=seq: Megatron
// sequence parallelism, Tp1dBuilder token_split), and runs one forward and
// one backward on deterministic inputs (counter RNG; volume does not
// depend on values). The ledger of the tp group is reset before and read
// after each pass. Cases: the column-parallel fc1 alone, the row-parallel
// fc2 alone, the Megatron MLP pair fc1 -> fc2, the attention half of a
// block (qkv column -> attention core -> proj row), a whole
// TransformerBlock, VocabParallelEmbedding, VocabParallelLmHead (with the
// vocab-parallel cross-entropy), and the whole GPT (embedding, blocks,
// head: one training step of one micro-batch). The engine's own
// collectives (loss reduction, gradient clipping, data parallelism) are
// not part of the layers and are not run here.
//
// Shapes are those of configs/fortunes_gpt.yaml: B = 16 (train.batch_size),
// T = 128, C = 192, F = 768 (mlp_dim), H = 4 heads, V = 256, L = 4 blocks;
// N = B T tokens, P = tp.
//
// Per (case, split, pass) it prints, per operation type, calls and
// elements measured vs analytic (elements as the ledger counts them:
// all_reduce the buffer, reduce_scatter / all_gather the block per rank)
// and the relative error of elements and of bytes (fp64 all-reduces count
// 8 bytes per element); calls must match exactly. Last line:
// max_comm_volume_error=X over every case, split and pass (also reported:
// whether every rank counted the same).
//
// --time K: instead, times K training steps (forward + backward of one
// micro-batch) of the whole GPT in each mode, after 2 untimed, and reports
// the median step time and the time spent inside collectives (calls and
// waits, including waiting for the slower rank) through a timer on the
// group (CommTimer, comm/comm_timer.h). With one rank the serial model is
// timed.
//
// A benchmark, not src/.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/check.h"
#include "base/median.h"
#include "comm/comm_timer.h"
#include "comm/mpi_process_group.h"
#include "nn/model.h"
#include "nn/transformer_block.h"
#include "parallel/tp1d_builder.h"
#include "plan/comm_volume.h"
#include "plan/model_shape.h"
#include "plan/tp1d_comm.h"
#include "tensor/rng.h"

namespace ndt {
namespace {

// ---- Shapes (configs/fortunes_gpt.yaml)
// ---------------------------------------------------------------------------
constexpr int64_t kB = 16, kT = 128, kC = 192, kF = 768, kHeads = 4;
constexpr int64_t kV = 256, kL = 4, kN = kB * kT;
constexpr uint64_t kSeed = 1;

// ---- Analytic volume: the plan library (plan/tp1d_comm.h)
// ---------------------------------------------------------------------------

// The volume per OpType on one rank, in the ledger's units
// (plan/comm_volume.h); forward and backward of a case.
using Volume = CommVolume;
using Passes = PassVolume;

constexpr OpType kAR = OpType::kAllReduce;
constexpr OpType kRS = OpType::kReduceScatter;
constexpr OpType kAG = OpType::kAllGather;

GptOptions gpt_options() {
  GptOptions o;
  o.vocab = static_cast<int>(kV);
  o.seq_len = static_cast<int>(kT);
  o.dim = static_cast<int>(kC);
  o.depth = static_cast<int>(kL);
  o.heads = static_cast<int>(kHeads);
  o.mlp_dim = static_cast<int>(kF);
  return o;
}

// The plan's prediction for a case: the layer's formula on N = B T
// tokens, or for the whole GPT the sum over its modules (embedding, L
// blocks, LM head) of one micro-batch of B samples.
Passes analytic(const std::string& name, bool seq, int64_t P) {
  const Tp1dLayout l{static_cast<int>(P), seq};
  if (name == "column")
    return column_linear_comm(l, kN, kC);  // fc1: C -> F
  if (name == "row")
    return row_linear_comm(l, kN, kC, /*bias=*/true);  // fc2: F -> C
  if (name == "mlp")
    return mlp_comm(l, kN, kC);
  if (name == "attention")
    return attention_comm(l, kN, kC);
  if (name == "block")
    return transformer_block_comm(l, kN, kC);
  if (name == "embedding")
    return vocab_embedding_comm(l, kN, kC);
  if (name == "lm_head")
    return vocab_lm_head_comm(l, kN, kC);
  NDT_ASSERT(name == "gpt", "unknown case ", name);
  const ModelShape shape = gpt_shape(gpt_options(), static_cast<int>(P));
  Passes total;
  for (int m = 0; m < shape.num_modules(); ++m)
    total = total + module_comm(shape, m, l, kB);
  return total;
}

// ---- Measurement
// ---------------------------------------------------------------------------

Volume snapshot(const ProcessGroup& pg) {
  Volume v;
  for (int i = 0; i < kNumOpTypes; ++i) {
    const CommOpCount& c = pg.comm_ledger()[static_cast<OpType>(i)];
    v.op[i] = {c.calls, c.elements, c.bytes};
  }
  return v;
}

// Replicated [shape] activations from the counter RNG (same on all ranks).
Tensor random_acts(Shape shape, const std::string& name) {
  Tensor t(std::move(shape), MemTag::kActs);
  rng_fill_normal(t.data(), t.numel(), rng_key(kSeed, name), 0, 0.0f, 1.0f);
  return t;
}

// This rank's tokens [N/P, C] of a replicated [B, T, C] tensor.
Tensor my_rows(const Tensor& full, const ProcessGroup& tp) {
  const int64_t C = full.dim(-1), n = full.numel() / C / tp.size();
  Tensor out({n, C}, MemTag::kActs);
  out.copy_(full.slice(tp.rank() * n * C, {n, C}));
  return out;
}

Tensor random_ids(const std::string& name) {
  Tensor ids({kB, kT}, MemTag::kData, DType::kI32);
  const uint64_t key = rng_key(kSeed, name);
  for (int64_t i = 0; i < ids.numel(); ++i)
    ids.data_i32()[i] = static_cast<int32_t>(rng_u64(key, i) % kV);
  return ids;
}

void init_all(const std::vector<Parameter*>& ps) {
  for (Parameter* p : ps)
    init_parameter(*p, kSeed);
}

// A module's input in the layout the mode gives it: a [B, T, width]
// activation replicated over tp, or (seq) my tokens [N/P, width].
Tensor module_input(bool seq, int64_t width, const ProcessGroup& tp) {
  Tensor full = random_acts({kB, kT, width}, "input");
  return seq ? my_rows(full, tp) : full;
}

Tensor like(const Tensor& y, const std::string& name) {
  return random_acts(y.shape(), name);
}

// Runs forward then backward of `m` on x, measuring each pass.
std::pair<Volume, Volume> measure_module(
    Module& m, const Tensor& x, ProcessGroup& tp) {
  init_all(m.parameters());
  Context ctx;
  ctx.run.training = true;
  ctx.run.seed = kSeed;
  tp.reset_comm_ledger();
  Tensor y = m.forward(x, ctx);
  Volume fwd = snapshot(tp);
  Tensor dy = like(y, "dy");
  tp.reset_comm_ledger();
  m.backward(dy, ctx);
  Volume bwd = snapshot(tp);
  return {fwd, bwd};
}

// A chain of modules as one (fc1 -> fc2, qkv -> core -> proj).
class Chain final : public Module {
 public:
  explicit Chain(std::vector<std::unique_ptr<Module>> mods)
      : mods_(std::move(mods)) {}
  Tensor forward(const Tensor& x, Context& ctx) override {
    Tensor a = x;
    for (size_t i = 0; i < mods_.size(); ++i)
      a = mods_[i]->forward(a, ctx.child(i));
    return a;
  }
  Tensor backward(const Tensor& dy, Context& ctx) override {
    Tensor g = dy;
    for (size_t i = mods_.size(); i-- > 0;)
      g = mods_[i]->backward(g, ctx.child(i));
    return g;
  }
  void collect_parameters(std::vector<Parameter*>& out) override {
    for (auto& m : mods_)
      m->collect_parameters(out);
  }

 private:
  std::vector<std::unique_ptr<Module>> mods_;
};

std::unique_ptr<Module> fc1(Builder& b) {
  return b.linear(
      "mlp.fc1", kC, kF, true, Act::kGelu, LinearRole::kFirst, 0.02f);
}
std::unique_ptr<Module> fc2(Builder& b) {
  return b.linear(
      "mlp.fc2", kF, kC, true, Act::kNone, LinearRole::kSecond, 0.02f);
}

std::pair<Volume, Volume> run_case(
    const std::string& name, bool seq, ProcessGroup& tp) {
  const int64_t P = tp.size();
  Tp1dBuilder b(tp, seq, kT);
  if (name == "column") {
    auto m = fc1(b);
    return measure_module(*m, module_input(seq, kC, tp), tp);
  }
  if (name == "row") {
    // Input: the column layer's output, [B, T, F/P] in both modes.
    auto m = fc2(b);
    return measure_module(*m, random_acts({kB, kT, kF / P}, "h"), tp);
  }
  if (name == "mlp") {
    std::vector<std::unique_ptr<Module>> mods;
    mods.push_back(fc1(b));
    mods.push_back(fc2(b));
    Chain m(std::move(mods));
    return measure_module(m, module_input(seq, kC, tp), tp);
  }
  if (name == "attention") {
    std::vector<std::unique_ptr<Module>> mods;
    mods.push_back(b.linear(
        "attn.qkv",
        kC,
        3 * kC,
        true,
        Act::kNone,
        LinearRole::kFirstQkv,
        0.02f));
    mods.push_back(b.attention_core(kHeads, /*causal=*/true));
    mods.push_back(b.linear(
        "attn.proj", kC, kC, true, Act::kNone, LinearRole::kSecond, 0.02f));
    Chain m(std::move(mods));
    return measure_module(m, module_input(seq, kC, tp), tp);
  }
  if (name == "block") {
    TransformerBlockOptions o;
    o.name = "blocks.0";
    o.dim = kC;
    o.heads = kHeads;
    o.mlp_dim = kF;
    o.causal = true;
    TransformerBlock m(o, b);
    return measure_module(m, module_input(seq, kC, tp), tp);
  }
  if (name == "embedding") {
    auto m = b.token_embedding("embed", kV, kT, kC, 0.02f);
    return measure_module(*m, random_ids("ids"), tp);
  }
  if (name == "lm_head") {
    LmHeadOptions o;
    o.dim = kC;
    o.vocab = kV;
    auto head = b.lm_head(o);
    init_all([&] {
      std::vector<Parameter*> ps;
      head->collect_parameters(ps);
      return ps;
    }());
    Tensor x = module_input(seq, kC, tp);
    Tensor targets = random_ids("targets");
    Context ctx;
    ctx.run.training = true;
    LossStats stats;
    tp.reset_comm_ledger();
    head->forward(x, targets, ctx, stats);
    Volume fwd = snapshot(tp);
    tp.reset_comm_ledger();
    head->backward(ctx, 1.0f / static_cast<float>(kN));
    return {fwd, snapshot(tp)};
  }
  if (name == "gpt") {
    GptOptions o;
    o.vocab = static_cast<int>(kV);
    o.seq_len = static_cast<int>(kT);
    o.dim = static_cast<int>(kC);
    o.depth = static_cast<int>(kL);
    o.heads = static_cast<int>(kHeads);
    o.mlp_dim = static_cast<int>(kF);
    auto model = build_gpt(o, b);
    model->init(kSeed);
    Tensor ids = random_ids("ids");
    Tensor targets = random_ids("targets");
    Context ctx;
    ctx.run.training = true;
    ctx.run.seed = kSeed;
    LossStats stats;
    const int head_m = model->num_modules() - 1;
    tp.reset_comm_ledger();
    model->forward_range(0, head_m, ids, targets, ctx, stats);
    Volume fwd = snapshot(tp);
    tp.reset_comm_ledger();
    model->backward_range(
        0, head_m, Tensor(), ctx, 1.0f / static_cast<float>(kN));
    return {fwd, snapshot(tp)};
  }
  NDT_ASSERT(false, "unknown case ", name);
  return {};
}

// Relative error of one measured quantity; analytic 0 with a non-zero
// measurement is an infinite error.
double rel(int64_t measured, int64_t expected) {
  if (expected == 0)
    return measured == 0 ? 0.0 : INFINITY;
  return std::fabs(double(measured - expected)) / double(expected);
}

struct RowResult {
  double err = 0;        // max relative error of elements and bytes
  bool calls_ok = true;  // every op type's call count matches
};

// "calls:elements" (elements summed over the calls).
std::string fmt_count(const OpVolume& v) {
  char s[48];
  std::snprintf(
      s, sizeof s, "%lld:%lld", (long long)v.calls, (long long)v.elements);
  return s;
}

// Bytes one rank sends with the ring algorithms the MPI backend uses for
// these sizes: all-reduce 2 (P-1)/P x the buffer, reduce-scatter and
// all-gather (P-1) x the block. Derived from the counts, not measured.
double wire_bytes(const Volume& v, int P) {
  return v[kAR].bytes * 2.0 * (P - 1) / P +
         double(v[kRS].bytes + v[kAG].bytes) * (P - 1);
}

// One table row: measured (m) vs analytic (a).
RowResult print_row(
    int P,
    const std::string& name,
    bool seq,
    const char* pass,
    const Volume& m,
    const Volume& a) {
  RowResult r;
  std::string other;
  for (int i = 0; i < kNumOpTypes; ++i) {
    const OpVolume& mv = m.op[i];
    const OpVolume& av = a.op[i];
    r.err = std::max(
        {r.err, rel(mv.elements, av.elements), rel(mv.bytes, av.bytes)});
    if (mv.calls != av.calls)
      r.calls_ok = false;
    const OpType t = static_cast<OpType>(i);
    if (t != kAR && t != kRS && t != kAG && (mv.calls || av.calls))
      other += std::string(" ") + to_string(t);
  }
  int64_t mb = 0, ab = 0;
  for (int i = 0; i < kNumOpTypes; ++i) {
    mb += m.op[i].bytes;
    ab += a.op[i].bytes;
  }
  auto cell = [](const OpVolume& v) { return fmt_count(v); };
  std::printf(
      "%-9s %-3s %-4s %15s %15s %12s %12s %12s %12s %9.4f %9.4f %8.3f "
      "%9.2e %s%s\n",
      name.c_str(),
      seq ? "seq" : "no",
      pass,
      cell(m[kAR]).c_str(),
      cell(a[kAR]).c_str(),
      cell(m[kRS]).c_str(),
      cell(a[kRS]).c_str(),
      cell(m[kAG]).c_str(),
      cell(a[kAG]).c_str(),
      double(mb) / (1 << 20),
      double(ab) / (1 << 20),
      wire_bytes(m, P) / (1 << 20),
      r.err,
      r.calls_ok ? "ok" : "CALLS_DIFFER",
      other.empty() ? "" : (" other:" + other).c_str());
  return r;
}

// Are the measured volumes the same on every rank? (A collective over the
// group, run after the snapshot; the ledger is reset before each case.)
bool same_on_all_ranks(const Volume& v, ProcessGroup& tp) {
  std::vector<double> mx, mn;
  for (int i = 0; i < kNumOpTypes; ++i) {
    for (int64_t x : {v.op[i].calls, v.op[i].elements, v.op[i].bytes}) {
      mx.push_back(double(x));
      mn.push_back(-double(x));
    }
  }
  tp.all_reduce(mx.data(), static_cast<int64_t>(mx.size()), ReduceOp::kMax);
  tp.all_reduce(mn.data(), static_cast<int64_t>(mn.size()), ReduceOp::kMax);
  for (size_t i = 0; i < mx.size(); ++i) {
    if (mx[i] != -mn[i])
      return false;
  }
  return true;
}

// ---- Timing (--time)
// ---------------------------------------------------------------------------

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Median step time and time in collectives of the whole GPT, per mode.
int run_timing(ProcessGroup& world, int reps) {
  const int P = world.size();
  const bool root = world.rank() == 0;
  if (root) {
    std::printf(
        "tp_time tp=%d: GPT fwd+bwd of one micro-batch (B=%lld), median of "
        "%d steps after 2 warm-up; comm = time inside collectives (incl. "
        "waiting for the other ranks), max over ranks\n",
        P,
        (long long)kB,
        reps);
  }
  GptOptions o;
  o.vocab = static_cast<int>(kV);
  o.seq_len = static_cast<int>(kT);
  o.dim = static_cast<int>(kC);
  o.depth = static_cast<int>(kL);
  o.heads = static_cast<int>(kHeads);
  o.mlp_dim = static_cast<int>(kF);
  for (bool seq : {false, true}) {
    if (P == 1 && seq)
      continue;
    CommTimer tp(world);
    SerialBuilder serial;
    Tp1dBuilder tp1d(world, seq, kT);
    Builder& b = P == 1 ? static_cast<Builder&>(serial) : tp1d;
    auto model = build_gpt(o, b);
    model->init(kSeed);
    Tensor ids = random_ids("ids");
    Tensor targets = random_ids("targets");
    const int head_m = model->num_modules() - 1;
    std::vector<double> step_ms, comm_ms;
    for (int i = 0; i < reps + 2; ++i) {
      Context ctx;
      ctx.run.training = true;
      ctx.run.seed = kSeed;
      LossStats stats;
      world.barrier();
      const double c0 = tp.seconds();
      auto t0 = Clock::now();
      model->forward_range(0, head_m, ids, targets, ctx, stats);
      model->backward_range(
          0, head_m, Tensor(), ctx, 1.0f / static_cast<float>(kN));
      double t[2] = {seconds_since(t0), tp.seconds() - c0};
      world.all_reduce(t, 2, ReduceOp::kMax);
      if (i >= 2) {
        step_ms.push_back(1e3 * t[0]);
        comm_ms.push_back(1e3 * t[1]);
      }
    }
    if (root) {
      const double s = median(step_ms), c = median(comm_ms);
      std::printf(
          "tp_time tp=%d sp=%s step_ms=%.1f comm_ms=%.1f "
          "compute_ms=%.1f comm_fraction=%.3f\n",
          P,
          seq ? "seq" : "no",
          s,
          c,
          s - c,
          c / s);
    }
  }
  return 0;
}

int run(ProcessGroup& tp) {
  const int P = tp.size();
  const bool root = tp.rank() == 0;
  if (root) {
    std::printf(
        "tp_comm tp=%d B=%lld T=%lld C=%lld F=%lld heads=%lld V=%lld L=%lld "
        "N=%lld\n",
        P,
        (long long)kB,
        (long long)kT,
        (long long)kC,
        (long long)kF,
        (long long)kHeads,
        (long long)kV,
        (long long)kL,
        (long long)kN);
    std::printf(
        "per rank; cells: calls:elements (measured, then analytic); MiB: "
        "bytes of all ops (fp64 all-reduce 8 B/element); wire_MiB: bytes "
        "sent per rank by the ring algorithms (from the measured counts); "
        "err: max relative error of elements and bytes\n");
    std::printf(
        "%-9s %-3s %-4s %15s %15s %12s %12s %12s %12s %9s %9s %8s %9s %s\n",
        "case",
        "sp",
        "pass",
        "all_reduce",
        "(analytic)",
        "red_scatter",
        "(analytic)",
        "all_gather",
        "(analytic)",
        "MiB",
        "(analytic)",
        "wire_MiB",
        "err",
        "calls");
  }
  double max_err = 0;
  bool calls_ok = true, consistent = true;
  const char* cases[] = {
      "column",
      "row",
      "mlp",
      "attention",
      "block",
      "embedding",
      "lm_head",
      "gpt"};
  for (const char* name : cases) {
    for (bool seq : {false, true}) {
      auto [fwd, bwd] = run_case(name, seq, tp);
      const Passes a = analytic(name, seq, P);
      const bool same =
          same_on_all_ranks(fwd, tp) && same_on_all_ranks(bwd, tp);
      consistent = consistent && same;
      if (!root)
        continue;
      const Volume total = fwd + bwd;
      const Volume a_total = a.fwd + a.bwd;
      for (const RowResult& r :
           {print_row(P, name, seq, "fwd", fwd, a.fwd),
            print_row(P, name, seq, "bwd", bwd, a.bwd),
            print_row(P, name, seq, "step", total, a_total)}) {
        max_err = std::max(max_err, r.err);
        calls_ok = calls_ok && r.calls_ok;
      }
      if (!same)
        std::printf("  ^ ranks counted different volumes\n");
    }
  }
  if (root) {
    std::printf(
        "tp=%d calls_match=%s ranks_agree=%s max_comm_volume_error=%.3g\n",
        P,
        calls_ok ? "yes" : "no",
        consistent ? "yes" : "no",
        max_err);
  }
  return (max_err <= 0.01 && calls_ok && consistent) ? 0 : 1;
}

}  // namespace
}  // namespace ndt

int main(int argc, char** argv) {
  ndt::MpiRuntime mpi(&argc, &argv);
  try {
    auto world = mpi.world();
    if (argc == 3 && std::string(argv[1]) == "--time")
      return ndt::run_timing(*world, std::atoi(argv[2]));
    if (argc != 1) {
      if (mpi.world_rank() == 0)
        std::fprintf(stderr, "usage: tp_comm_bench [--time STEPS]\n");
      return 2;
    }
    return ndt::run(*world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] error: %s\n", mpi.world_rank(), e.what());
    ndt::MpiRuntime::abort(1);
    return 1;
  }
}
