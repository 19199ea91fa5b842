// The plan's per-step volumes (plan/step_comm.h) and model-state memory
// (plan/rank_memory.h) against a real training step: every rank of the layout
// is a thread of run_local (LocalProcessGroup), builds the mesh the way
// `ndtrain train` does (axes dp, pp, tp), constructs an Engine on
// synthetic data and runs one Engine::step(); each group's CommLedger,
// reset after construction, must equal step_comm() exactly (calls,
// elements, bytes per OpType) on every rank; DDP's start-up check is
// compared with ddp_startup_comm(), and the parameters and optimizer
// state the rank holds with rank_memory(). exact: counts, not values.
//
// Covered: 1D tensor parallel (ViT, GPT; tp 2 and 4; with and without
// tp_seq; LAMB's sharded trust ratios), distributed data parallel over the
// dp group (several buckets, gradient accumulation), pipelines (every
// schedule, interleaved chunks, recompute), and their products. Single-
// process data parallel (dp_mode threads) is not: its group lives inside
// Engine::step, so no ledger can be read (see test_model_shape.cpp for
// its formula's inputs).
#include <gtest/gtest.h>

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "base/error.h"
#include "comm/local_process_group.h"
#include "comm/mesh.h"
#include "plan/ddp_comm.h"
#include "plan/model_shape.h"
#include "plan/pipeline_comm.h"
#include "plan/rank_memory.h"
#include "plan/step_comm.h"
#include "train/data_source.h"
#include "train/engine.h"

namespace ndt {
namespace {

const std::vector<std::string> kGpt = {
    "model.kind=gpt",
    "model.dim=32",
    "model.depth=2",
    "model.heads=4",
    "model.mlp_dim=64",
    "model.seq_len=16",
    "model.vocab=64",
    "model.dropout=0.1",
    "train.batch_size=8",
    "optim.clip_grad_norm=1.0"};
const std::vector<std::string> kVit = {
    "model.kind=vit",
    "model.dim=32",
    "model.depth=2",
    "model.heads=4",
    "model.mlp_dim=64",
    "model.dropout=0.1",
    "train.batch_size=8"};
const std::vector<std::string> kMlp = {
    "model.kind=mlp",
    "model.hidden=[64, 32, 16]",
    "model.dropout=0.1",
    "train.batch_size=8"};

struct RankResult {
  int pp_rank = 0;
  StepComm startup;  // only dp is filled
  StepComm step;
  RankMemory memory;
};

Config make_config(
    std::vector<std::string> model, const std::vector<std::string>& extra) {
  model.push_back("data.name=synthetic");
  model.push_back("train.steps=4");
  model.push_back("train.threads=1");
  for (const std::string& e : extra)
    model.push_back(e);
  return load_config("", model);
}

CommVolume ledger(ProcessGroup& g) {
  return from_ledger(g.comm_ledger());
}

// Runs one step of `config` on dp x pp x tp threads; compares every rank
// with the plan.
void check_layout(const Config& config) {
  const ParallelConfig& p = config.parallel;
  const int world = p.dp * p.pp * p.tp;
  std::vector<RankResult> got(world);
  run_local(world, [&](ProcessGroup& pg) {
    // The mesh as ndtrain builds it.
    std::vector<int> sizes;
    std::vector<std::string> names;
    for (const MeshAxis& a : mesh_axes(config)) {
      sizes.push_back(a.size);
      names.push_back(a.name);
    }
    Mesh mesh(pg, sizes, names);
    ProcessGroup& dp = mesh.group("dp");
    ProcessGroup& pp = mesh.group("pp");
    ProcessGroup& tp = mesh.group("tp");
    auto reset = [&] {
      for (ProcessGroup* g : {&dp, &pp, &tp})
        g->reset_comm_ledger();
    };
    reset();
    DataSource data(config);
    Engine engine(config, data, mesh);
    RankResult& r = got[pg.rank()];
    r.pp_rank = mesh.coord("pp");
    r.startup.dp = ledger(dp);
    reset();
    engine.step(0);
    r.step.dp = ledger(dp);
    r.step.pp = ledger(pp);
    r.step.tp = ledger(tp);
    for (Parameter* q : engine.model().parameters())
      r.memory.params += q->value.numel();
    for (Parameter* q : engine.model().parameters())
      r.memory.grads += q->grad.numel();
    for (const auto& [name, t] : engine.optimizer().state())
      r.memory.optimizer += t.numel();
  });
  const ModelShape shape = model_shape(config.model, p.tp);
  for (int w = 0; w < world; ++w) {
    const RankResult& r = got[w];
    SCOPED_TRACE(
        "rank " + std::to_string(w) + " (pp rank " + std::to_string(r.pp_rank) +
        ")");
    const StepComm want = step_comm(config, r.pp_rank);
    EXPECT_EQ(r.step.tp, want.tp) << "tp: measured " << to_string(r.step.tp)
                                  << ", plan " << to_string(want.tp);
    EXPECT_EQ(r.step.pp, want.pp) << "pp: measured " << to_string(r.step.pp)
                                  << ", plan " << to_string(want.pp);
    EXPECT_EQ(r.step.dp, want.dp) << "dp: measured " << to_string(r.step.dp)
                                  << ", plan " << to_string(want.dp);
    std::vector<bool> held;
    if (p.pp > 1) {
      PipelineLayout pl;
      pl.pp = p.pp;
      pl.chunks = p.pp_chunks;
      held = held_modules(shape, pl, r.pp_rank);
    }
    const CommVolume start = ddp_startup_comm(shape, held, p.dp);
    EXPECT_EQ(r.startup.dp, start)
        << "dp start-up: measured " << to_string(r.startup.dp) << ", plan "
        << to_string(start);
    EXPECT_EQ(r.memory, rank_memory(config, r.pp_rank));
  }
}

struct Case {
  std::string name;
  const std::vector<std::string>* model;
  std::vector<std::string> layout;
};

// gtest prints the case by name.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

class StepCommTest : public ::testing::TestWithParam<Case> {};

TEST_P(StepCommTest, LedgerEqualsPlan) {
  const Case& c = GetParam();
  check_layout(make_config(*c.model, c.layout));
}

// The 2D mode has no step or memory model yet: said, not a 1D answer.
TEST(StepComm, RefusesTheModesItDoesNotModel) {
  const Config c = make_config(kGpt, {"parallel.tp=4", "parallel.tp_mode=2d"});
  for (int which = 0; which < 2; ++which) {
    try {
      if (which == 0)
        step_comm(c);
      else
        rank_memory(c, 0);
      ADD_FAILURE() << "expected a ConfigError";
    } catch (const ConfigError& e) {
      EXPECT_NE(
          std::string(e.what()).find("parallel.tp_mode=2d"), std::string::npos)
          << e.what();
    }
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int tp : {2, 4}) {
    for (bool seq : {false, true}) {
      const std::string s = seq ? "true" : "false";
      const std::string suffix = std::to_string(tp) + (seq ? "_seq" : "");
      out.push_back(
          {"gpt_tp" + suffix,
           &kGpt,
           {"parallel.tp=" + std::to_string(tp), "parallel.tp_seq=" + s}});
      out.push_back(
          {"vit_tp" + suffix,
           &kVit,
           {"parallel.tp=" + std::to_string(tp), "parallel.tp_seq=" + s}});
    }
  }
  out.push_back(
      {"gpt_tp2_lamb",
       &kGpt,
       {"parallel.tp=2", "optim.name=lamb", "optim.eps=1e-6"}});
  out.push_back(
      {"vit_tp2_seq_microbatches2",
       &kVit,
       {"parallel.tp=2", "parallel.tp_seq=true", "parallel.microbatches=2"}});
  // Distributed data parallel; 0.01 MiB buckets cut the model into several.
  out.push_back({"mlp_dp2", &kMlp, {"parallel.dp=2"}});
  out.push_back(
      {"mlp_dp2_buckets_accum2",
       &kMlp,
       {"parallel.dp=2",
        "parallel.bucket_mb=0.01",
        "parallel.microbatches=2"}});
  out.push_back(
      {"gpt_dp2_buckets",
       &kGpt,
       {"parallel.dp=2", "parallel.bucket_mb=0.01", "optim.name=sgd"}});
  // Pipelines: every schedule, 3 micro-batches of 4 samples.
  const std::vector<std::string> pp = {
      "parallel.pp=2",
      "parallel.microbatches=3",
      "train.batch_size=12",
      "model.depth=4"};
  for (const char* kind : {"naive", "gpipe", "1f1b"}) {
    std::vector<std::string> l = pp;
    l.push_back(std::string("parallel.schedule=") + kind);
    out.push_back({std::string("gpt_pp2_") + kind, &kGpt, l});
  }
  {
    std::vector<std::string> l = pp;
    l.push_back("parallel.schedule=interleaved");
    l.push_back("parallel.pp_chunks=2");
    out.push_back({"gpt_pp2_interleaved_v2", &kGpt, l});
    out.push_back({"vit_pp2_interleaved_v2", &kVit, l});
  }
  out.push_back(
      {"mlp_pp2_1f1b", &kMlp, {"parallel.pp=2", "parallel.microbatches=2"}});
  // Products.
  out.push_back(
      {"gpt_dp2_pp2",
       &kGpt,
       {"parallel.dp=2",
        "parallel.pp=2",
        "parallel.microbatches=2",
        "train.batch_size=16",
        "parallel.bucket_mb=0.01"}});
  out.push_back(
      {"gpt_pp2_tp2_seq_recompute",
       &kGpt,
       {"parallel.pp=2",
        "parallel.tp=2",
        "parallel.tp_seq=true",
        "parallel.microbatches=2",
        "parallel.recompute=block"}});
  out.push_back(
      {"gpt_dp2_pp2_tp2_seq",
       &kGpt,
       {"parallel.dp=2",
        "parallel.pp=2",
        "parallel.tp=2",
        "parallel.tp_seq=true",
        "parallel.microbatches=2",
        "train.batch_size=16"}});
  return out;
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, StepCommTest, ::testing::ValuesIn(cases()), [](const auto& info) {
      return info.param.name;
    });

}  // namespace
}  // namespace ndt
