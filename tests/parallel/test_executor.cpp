// PipelineExecutor against the serial model, in-process: run_local(P)
// gives every pipeline rank a thread and a real send/recv backend. Each
// rank builds its own replica (GPT, and ViT / MLP for the input layer and
// head variants) from the same seed, keeps only its chunks' modules
// (chunk_modules of a partition_blocks split) and runs its instruction
// list of one schedule; the serial reference is Model::forward_backward
// over the same M micro-batches with gradient accumulation and the same
// dropout keys (seed, step, global sample position). Dropout is 0.1
// everywhere, so a wrong key shows.
//
// Tolerance: relative L2 error ||g_pipe - g_serial|| / ||g_serial|| <= 1e-6
// per gradient tensor, and relative 1e-6 on the summed loss. A micro-batch
// runs the same kernels on the same data in both runs; what may differ is
// fp32 rounding from (a) the order in which the micro-batches' gradients
// are added (gpipe runs the backwards in reverse micro-batch order, the
// other schedules in forward order like the serial loop) and (b) kernels
// that split a reduction over OpenMP threads on the serial run's thread but
// run single-threaded inside run_local's parallel region. Both are a few
// ulps (observed: <= 1e-7, loss identical), far below 1e-6; a misrouted
// activation, a wrong dropout key or a lost micro-batch is O(1e-1).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/local_process_group.h"
#include "nn/model.h"
#include "parallel/pipeline/executor.h"
#include "parallel/pipeline/partition.h"
#include "parallel/pipeline/schedules.h"
#include "parallel/pipeline/tracer.h"
#include "test_util.h"

namespace ndt {
namespace {

constexpr double kTol = 1e-6;
constexpr uint64_t kSeed = 7;
constexpr int64_t kStep = 2;
constexpr int64_t kBatch = 12;  // divisible by every M below

// Depth 8: enough blocks for P x V = 8 virtual stages.
GptOptions gpt_options() {
  GptOptions o;
  o.vocab = 13;
  o.seq_len = 8;
  o.dim = 16;
  o.depth = 8;
  o.heads = 2;
  o.mlp_dim = 32;
  o.dropout = 0.1f;
  o.init_std = 0.1f;
  return o;
}

// A model (built and initialised from kSeed on every call) with one step's
// batch of kBatch rows.
struct Workload {
  // keep: the modules the build keeps (null: all).
  std::function<std::unique_ptr<Model>(KeepModule keep)> build;
  Tensor input;
  Tensor targets;
};

Workload gpt_workload() {
  Workload w;
  w.build = [](KeepModule keep) {
    SerialBuilder b;
    auto m = build_gpt(gpt_options(), b, std::move(keep));
    m->init(kSeed);
    return m;
  };
  w.input = test::int_tensor({kBatch, 8}, 13, 3, 1);
  w.targets = test::int_tensor({kBatch, 8}, 13, 5, 4);
  return w;
}

// Per-sample labels and a float input; 4 blocks.
Workload vit_workload() {
  Workload w;
  w.build = [](KeepModule keep) {
    SerialBuilder b;
    VitOptions o;
    o.image_size = 8;
    o.channels = 1;
    o.patch = 4;
    o.dim = 16;
    o.depth = 4;
    o.heads = 2;
    o.mlp_dim = 32;
    o.classes = 3;
    o.dropout = 0.1f;
    o.init_std = 0.1f;
    auto m = build_vit(o, b, std::move(keep));
    m->init(kSeed);
    return m;
  };
  w.input = test::randn({kBatch, 1, 8, 8}, 1, "img");
  w.targets = test::int_tensor({kBatch}, 3, 2, 1);
  return w;
}

// An input layer without parameters (Flatten); 6 blocks (linear, dropout
// per hidden layer), so a stage may start at a dropout.
Workload mlp_workload() {
  Workload w;
  w.build = [](KeepModule keep) {
    SerialBuilder b;
    MlpOptions o;
    o.inputs = 2 * 4 * 4;
    o.hidden = {16, 16, 12};
    o.classes = 5;
    o.dropout = 0.1f;
    auto m = build_mlp(o, b, std::move(keep));
    m->init(kSeed);
    return m;
  };
  w.input = test::randn({kBatch, 2, 4, 4}, 2, "img");
  w.targets = test::int_tensor({kBatch}, 5, 3, 1);
  return w;
}

// The modules of a pipeline rank's chunks.
KeepModule held_by(const std::vector<ModuleRange>& chunks) {
  return [chunks](int m, const std::vector<Parameter*>&) {
    for (const ModuleRange& r : chunks) {
      if (m >= r.first && m <= r.last)
        return true;
    }
    return false;
  };
}

// Rows [first, first + n) of a batch tensor (dim 0), sharing storage.
Tensor rows(const Tensor& t, int64_t first, int64_t n) {
  const int64_t per = t.numel() / t.dim(0);
  Shape s = t.shape();
  s[0] = n;
  return t.slice(first * per, s);
}

int64_t numel_of(const std::vector<Parameter*>& ps) {
  int64_t n = 0;
  for (Parameter* p : ps)
    n += p->value.numel();
  return n;
}

// Blocks per virtual stage, balanced by parameters as the engine does.
std::vector<int> split_of(Model& m, int stages) {
  std::vector<int64_t> cost;
  for (int i = 0; i < static_cast<int>(m.blocks.size()); ++i)
    cost.push_back(numel_of(m.module_parameters(1 + i)));
  return partition_blocks(
      cost,
      stages,
      numel_of(m.module_parameters(0)),
      numel_of(m.module_parameters(m.num_modules() - 1)));
}

double rel_l2(const Tensor& a, const Tensor& b) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = double(a.data()[i]) - double(b.data()[i]);
    diff += d * d;
    norm += double(b.data()[i]) * double(b.data()[i]);
  }
  // Exactly-zero reference (e.g. the attention key bias): absolute error.
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

float loss_scale(const Model& m) {
  return 1.0f / float(kBatch * m.loss_terms_per_sample);
}

// The serial step: M micro-batches accumulated into one gradient.
struct Serial {
  LossStats stats;
  std::map<std::string, Tensor> grads;
};

Serial serial_step(const Workload& work, int M, int64_t step = kStep) {
  auto model = work.build(nullptr);
  model->zero_grad();
  Serial out;
  const int64_t mbs = kBatch / M;
  Context ctx;
  for (int k = 0; k < M; ++k) {
    ctx.run.training = true;
    ctx.run.seed = kSeed;
    ctx.run.step = step;
    ctx.run.sample_offset = k * mbs;
    model->forward_backward(
        rows(work.input, k * mbs, mbs),
        rows(work.targets, k * mbs, mbs),
        ctx,
        loss_scale(*model),
        out.stats);
  }
  for (Parameter* p : model->parameters())
    out.grads[p->name] = p->grad.clone(MemTag::kOther);
  return out;
}

// What one pipeline rank saw, checked on the main thread.
struct RankResult {
  LossStats stats;
  int optimizer_calls = 0;
  std::vector<std::string> params;  // names held by this rank
  std::vector<double> errors;       // rel_l2 per held parameter
};

struct PipeCase {
  PipeSchedule kind;
  int chunks;
};

std::string case_name(const PipeCase& c, int P, int M, bool recompute) {
  return std::string(to_string(c.kind)) + " V=" + std::to_string(c.chunks) +
         " P=" + std::to_string(P) + " M=" + std::to_string(M) +
         (recompute ? " recompute" : "");
}

std::vector<RankResult> pipeline_step(
    const Workload& work,
    const Serial& serial,
    const PipeCase& c,
    int P,
    int M,
    bool recompute) {
  const Schedule schedule = make_schedule(c.kind, P, M, c.chunks);
  const int stages = P * c.chunks;
  std::vector<int> stage_blocks;
  {
    auto full = work.build(nullptr);
    stage_blocks = split_of(*full, stages);
  }
  std::vector<RankResult> results(P);
  run_local(P, [&](ProcessGroup& pg) {
    const int rank = pg.rank();
    RankResult& res = results[rank];
    const auto chunks = chunk_modules(stage_blocks, P, rank);
    auto model = work.build(held_by(chunks));
    Tracer tracer(0, 0);
    PipelineExecutor executor(
        *model,
        pg,
        chunks,
        stages,
        nullptr,
        nullptr,
        nullptr,
        recompute,
        tracer,
        [&res] { ++res.optimizer_calls; });
    model->zero_grad();
    PipelineBatch pb;
    pb.input = work.input;
    pb.targets = work.targets;
    pb.seed = kSeed;
    pb.step = kStep;
    pb.sample_offset = 0;
    pb.loss_scale = loss_scale(*model);
    executor.run(schedule.instrs.at(rank), M, pb, res.stats);
    for (Parameter* p : model->parameters()) {
      res.params.push_back(p->name);
      res.errors.push_back(rel_l2(p->grad, serial.grads.at(p->name)));
    }
  });
  return results;
}

void expect_matches_serial(
    const std::vector<RankResult>& results, const Serial& serial) {
  const int P = static_cast<int>(results.size());
  std::map<std::string, int> held;
  for (int r = 0; r < P; ++r) {
    const RankResult& res = results[r];
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(res.optimizer_calls, 1);
    for (size_t i = 0; i < res.params.size(); ++i) {
      EXPECT_LE(res.errors[i], kTol) << res.params[i];
      ++held[res.params[i]];
    }
    if (r == P - 1) {  // the last virtual stage is on the last rank
      EXPECT_EQ(res.stats.count, serial.stats.count);
      EXPECT_NEAR(
          res.stats.loss_sum,
          serial.stats.loss_sum,
          kTol * std::fabs(serial.stats.loss_sum));
      EXPECT_EQ(res.stats.correct, serial.stats.correct);
    } else {
      EXPECT_EQ(res.stats.count, 0);
    }
  }
  // Every parameter on exactly one rank.
  EXPECT_EQ(held.size(), serial.grads.size());
  for (const auto& [name, n] : held)
    EXPECT_EQ(n, 1) << name;
}

TEST(PipelineExecutor, EveryScheduleMatchesSerialGradients) {
  const std::vector<PipeCase> kinds = {
      {PipeSchedule::kNaive, 1},
      {PipeSchedule::kGpipe, 1},
      {PipeSchedule::kOneFOneB, 1},
      {PipeSchedule::kInterleaved, 1},
      {PipeSchedule::kInterleaved, 2},
  };
  const Workload work = gpt_workload();
  for (int M : {1, 3, 4}) {
    const Serial serial = serial_step(work, M);
    ASSERT_EQ(serial.stats.count, kBatch * gpt_options().seq_len);
    for (int P : {2, 4}) {
      for (const PipeCase& c : kinds) {
        for (bool recompute : {false, true}) {
          SCOPED_TRACE(case_name(c, P, M, recompute));
          expect_matches_serial(
              pipeline_step(work, serial, c, P, M, recompute), serial);
        }
      }
    }
  }
}

TEST(PipelineExecutor, VitAndMlpMatchSerialGradients) {
  for (const Workload& work : {vit_workload(), mlp_workload()}) {
    const Serial serial = serial_step(work, 3);
    for (const PipeCase& c :
         {PipeCase{PipeSchedule::kOneFOneB, 1},
          PipeCase{PipeSchedule::kInterleaved, 2}}) {
      for (bool recompute : {false, true}) {
        SCOPED_TRACE(
            work.build(nullptr)->kind + " " + case_name(c, 2, 3, recompute));
        expect_matches_serial(
            pipeline_step(work, serial, c, 2, 3, recompute), serial);
      }
    }
  }
}

TEST(PipelineExecutor, ConsecutiveStepsReuseNoState) {
  // The engine keeps one executor for the whole run: a second step (new
  // dropout masks), after an evaluation pass in between, must match the
  // serial step as the first did.
  const Workload work = gpt_workload();
  const int P = 2, V = 2, M = 4;
  const Serial serial[2] = {
      serial_step(work, M, kStep), serial_step(work, M, kStep + 1)};
  const Schedule schedule = make_schedule(PipeSchedule::kInterleaved, P, M, V);
  std::vector<int> stage_blocks;
  {
    auto full = work.build(nullptr);
    stage_blocks = split_of(*full, P * V);
  }
  std::vector<RankResult> results[2];
  results[0].resize(P);
  results[1].resize(P);
  run_local(P, [&](ProcessGroup& pg) {
    const int rank = pg.rank();
    const auto chunks = chunk_modules(stage_blocks, P, rank);
    auto model = work.build(held_by(chunks));
    Tracer tracer(0, 0);
    int calls = 0;
    PipelineExecutor executor(
        *model,
        pg,
        chunks,
        P * V,
        nullptr,
        nullptr,
        nullptr,
        false,
        tracer,
        [&calls] { ++calls; });
    for (int s = 0; s < 2; ++s) {
      RankResult& res = results[s][rank];
      model->zero_grad();
      PipelineBatch pb;
      pb.input = work.input;
      pb.targets = work.targets;
      pb.seed = kSeed;
      pb.step = kStep + s;
      pb.loss_scale = loss_scale(*model);
      calls = 0;
      executor.run(schedule.instrs.at(rank), M, pb, res.stats);
      res.optimizer_calls = calls;
      for (Parameter* p : model->parameters()) {
        res.params.push_back(p->name);
        res.errors.push_back(rel_l2(p->grad, serial[s].grads.at(p->name)));
      }
      LossStats eval;
      executor.forward_eval(
          rows(work.input, 0, 5), rows(work.targets, 0, 5), kSeed, s, eval);
    }
  });
  for (int s = 0; s < 2; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    expect_matches_serial(results[s], serial[s]);
  }
}

TEST(PipelineExecutor, ForwardEvalMatchesSerial) {
  const Workload work = gpt_workload();
  LossStats want;
  {
    auto model = work.build(nullptr);
    Context ctx;
    ctx.run.seed = kSeed;
    ctx.run.step = kStep;
    model->forward_eval(work.input, work.targets, ctx, want);
  }
  ASSERT_EQ(want.count, kBatch * gpt_options().seq_len);
  const int P = 2;
  for (int V : {1, 2}) {
    SCOPED_TRACE("V=" + std::to_string(V));
    std::vector<int> stage_blocks;
    {
      auto full = work.build(nullptr);
      stage_blocks = split_of(*full, P * V);
    }
    std::vector<LossStats> stats(P);
    run_local(P, [&](ProcessGroup& pg) {
      const auto chunks = chunk_modules(stage_blocks, P, pg.rank());
      auto model = work.build(held_by(chunks));
      Tracer tracer(0, 0);
      PipelineExecutor executor(
          *model,
          pg,
          chunks,
          P * V,
          nullptr,
          nullptr,
          nullptr,
          false,
          tracer,
          [] {});
      executor.forward_eval(
          work.input, work.targets, kSeed, kStep, stats[pg.rank()]);
    });
    EXPECT_EQ(stats[0].count, 0);
    EXPECT_EQ(stats[P - 1].count, want.count);
    EXPECT_EQ(stats[P - 1].correct, want.correct);
    EXPECT_NEAR(
        stats[P - 1].loss_sum, want.loss_sum, kTol * std::fabs(want.loss_sum));
  }
}

}  // namespace
}  // namespace ndt
