// The plan's per-step volumes (plan/step_comm.h) and model-state memory
// (plan/rank_memory.h) against a real training step: every rank of the layout
// is a thread of run_local (LocalProcessGroup), builds the mesh the way
// `ndtrain train` does (every axis of the layout), constructs an Engine on
// synthetic data and runs one Engine::step(); the CommLedger of every
// group the mesh made (axes and multi-axis groups), reset after
// construction, must equal step_comm() exactly (calls, elements, bytes
// per OpType) on every rank, and every group the plan names must exist;
// DDP's start-up check is compared with ddp_startup_comm(), and the
// parameters and optimizer state the rank holds with rank_memory().
// exact: counts, not values.
//
// Covered: 1D tensor parallel (ViT, GPT; tp 2 and 4; with and without
// tp_seq; LAMB's sharded trust ratios), 2D (tp=4), 2.5D (tp=8, d=2) and 3D
// (tp=8) on the GPT and the ViT (class token and mean pooling), with LAMB,
// dp=2 and pp=2 with recompute, recompute without a pipeline (1D, 2D,
// sequence parallelism), sequence parallelism (each attention core
// at sp 2 and 4, the ViT's pooling head, with dp=2 and with pp=2; Ulysses
// inside 1D tensor parallelism, alone and in dp2 x pp2 x tp2 x sp2; each
// core inside 1D with tp_seq, alone and in dp2 x pp2 x tp2 x sp2; each
// core inside 2D, 2.5D and 3D, the ViT's grid head on sp rank 0 only, and
// dp2 x pp2 x 2D x sp2),
// distributed data parallel over the dp group (several buckets, gradient
// accumulation), pipelines (every schedule, interleaved chunks, recompute), and
// their products, and ZeRO stage 1 in each kind of layout (the
// optimizer's norms and state on the buckets each rank updates). Single-
// process data parallel (dp_mode threads) is not: its
// group lives inside Engine::step, so no ledger can be read (see
// test_model_shape.cpp for its formula's inputs).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
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
  int sync_rank = 0;  // in the gradient sync's group (ZeRO's owners)
  int sp_rank = 0;
  CommVolume startup;                      // the gradient reduction's group
  std::map<std::string, CommVolume> step;  // every group of the mesh
  RankMemory memory;
  int64_t last_bucket = 0;  // elements of the sync's last bucket
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

// The group the gradients are reduced over (dp, 2.5D's depth and sp), as
// the engine picks it; "dp" when there is none (its ledger is then empty).
std::string grad_group(const ParallelConfig& p) {
  std::string g = p.dp > 1 ? "dp" : "";
  if (p.tp > 1 && p.tp_mode == TpMode::k2p5d && p.tp_depth > 1)
    g += std::string(g.empty() ? "" : ",") + "tp_dep";
  if (p.sp > 1)
    g += std::string(g.empty() ? "" : ",") + "sp";
  return g.empty() ? "dp" : g;
}

// Elements of memory the model's gradients (or values) occupy: the union
// of their address ranges (ZeRO stage 2's and 3's buckets of other ranks
// share slots).
int64_t memory_of(Model& model, bool grads) {
  std::vector<std::pair<const float*, const float*>> ranges;
  for (Parameter* q : model.parameters()) {
    const Tensor& t = grads ? q->grad : q->value;
    ranges.emplace_back(t.data(), t.data() + t.numel());
  }
  std::sort(ranges.begin(), ranges.end());
  int64_t n = 0;
  const float* end = nullptr;
  for (const auto& [lo, hi] : ranges) {
    const float* from = end != nullptr && lo < end ? end : lo;
    if (hi > from)
      n += hi - from;
    if (end == nullptr || hi > end)
      end = hi;
  }
  return n;
}

// Runs one step of `config` on every rank of its mesh as threads; compares
// every group's ledger of every rank with the plan.
void check_layout(const Config& config) {
  const ParallelConfig& p = config.parallel;
  const int world = p.dp * p.pp * p.tp * p.sp;
  std::vector<RankResult> got(world);
  run_local(world, [&](ProcessGroup& pg) {
    // The mesh as ndtrain builds it.
    const std::unique_ptr<Mesh> layout = make_layout_mesh(pg, config);
    Mesh& mesh = *layout;
    DataSource data(config);
    Engine engine(config, data, mesh);
    RankResult& r = got[pg.rank()];
    r.pp_rank = mesh.coord("pp");
    r.sp_rank = mesh.coord("sp");
    if (engine.ddp()) {
      r.sync_rank = engine.ddp()->group().rank();
      r.last_bucket = engine.ddp()->buckets().back().numel;
    }
    r.startup = ledger(mesh.named_group(grad_group(p)));
    for (const std::string& name : mesh.group_names())
      mesh.named_group(name).reset_comm_ledger();
    engine.step(0);
    for (const std::string& name : mesh.group_names())
      r.step[name] = ledger(mesh.named_group(name));
    r.memory.params = memory_of(engine.model(), false);
    r.memory.grads = memory_of(engine.model(), true);
    for (const auto& [name, t] : engine.optimizer().state())
      r.memory.optimizer += t.numel();
  });
  const ModelShape shape = model_shape(config.model, p);
  for (int w = 0; w < world; ++w) {
    const RankResult& r = got[w];
    SCOPED_TRACE(
        "rank " + std::to_string(w) + " (pp rank " + std::to_string(r.pp_rank) +
        ")");
    const StepComm want = step_comm(config, r.pp_rank, r.sync_rank, r.sp_rank);
    for (const auto& [name, v] : r.step) {
      EXPECT_EQ(v, want.at(name)) << name << ": measured " << to_string(v)
                                  << ", plan " << to_string(want.at(name));
    }
    EXPECT_EQ(r.last_bucket, want.last_bucket) << "the sync's last bucket";
    for (const auto& [name, v] : want.groups) {
      EXPECT_TRUE(r.step.count(name))
          << "the plan counts " << to_string(v) << " on group " << name
          << ", which the run does not have";
    }
    std::vector<bool> held;
    if (p.pp > 1) {
      PipelineLayout pl;
      pl.pp = p.pp;
      pl.chunks = p.pp_chunks;
      held = held_modules(shape, pl, r.pp_rank);
    }
    const int grad_ranks =
        p.dp * p.sp * (p.tp > 1 && p.tp_mode == TpMode::k2p5d ? p.tp_depth : 1);
    const CommVolume start = ddp_startup_comm(shape, held, grad_ranks);
    EXPECT_EQ(r.startup, start)
        << "start-up on " << grad_group(p) << ": measured "
        << to_string(r.startup) << ", plan " << to_string(start);
    const RankMemory plan = rank_memory(config, r.pp_rank, r.sync_rank);
    EXPECT_EQ(r.memory, plan)
        << "elements of parameters, gradients, optimizer state: measured "
        << r.memory.params << ", " << r.memory.grads << ", "
        << r.memory.optimizer << "; plan " << plan.params << ", " << plan.grads
        << ", " << plan.optimizer;
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
  // Recompute without a pipeline: each block's forward collectives twice.
  out.push_back(
      {"gpt_tp2_seq_recompute",
       &kGpt,
       {"parallel.tp=2", "parallel.tp_seq=true", "parallel.recompute=block"}});
  out.push_back(
      {"vit_tp4_2d_recompute",
       &kVit,
       {"parallel.tp=4", "parallel.tp_mode=2d", "parallel.recompute=block"}});
  out.push_back(
      {"gpt_sp2_ring_recompute",
       &kGpt,
       {"parallel.sp=2", "parallel.recompute=block"}});
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
  // 2D, 2.5D and 3D tensor parallelism, alone (ViT with both poolings,
  // GPT, LAMB's trust ratios) and with data and pipeline parallelism.
  const std::vector<std::string> tp2d = {
      "parallel.tp=4", "parallel.tp_mode=2d"};
  const std::vector<std::string> tp2p5d = {
      "parallel.tp=8", "parallel.tp_mode=2.5d", "parallel.tp_depth=2"};
  const std::vector<std::string> tp3d = {
      "parallel.tp=8", "parallel.tp_mode=3d"};
  const std::vector<std::pair<std::string, std::vector<std::string>>> modes = {
      {"2d", tp2d}, {"2p5d", tp2p5d}, {"3d", tp3d}};
  for (const auto& [name, l] : modes) {
    out.push_back({"gpt_tp" + name, &kGpt, l});
    out.push_back({"vit_tp" + name, &kVit, l});
    std::vector<std::string> mean = l;
    mean.push_back("model.pool=mean");
    out.push_back({"vit_mean_tp" + name, &kVit, mean});
    std::vector<std::string> lamb = l;
    lamb.push_back("optim.name=lamb");
    lamb.push_back("optim.eps=1e-6");
    out.push_back({"gpt_lamb_tp" + name, &kGpt, lamb});
    std::vector<std::string> dp = l;
    for (const char* e :
         {"parallel.dp=2", "train.batch_size=16", "parallel.bucket_mb=0.01"})
      dp.push_back(e);
    out.push_back({"gpt_dp2_tp" + name, &kGpt, dp});
    std::vector<std::string> pp = l;
    for (const char* e :
         {"parallel.pp=2",
          "parallel.microbatches=2",
          "train.batch_size=16",
          "model.depth=4",
          "parallel.recompute=block"})
      pp.push_back(e);
    out.push_back({"gpt_pp2_recompute_tp" + name, &kGpt, pp});
  }
  // Sequence parallelism: each attention core on the GPT (ring on its
  // zig-zag split) and the ViT (mean pooling: 16 tokens; the class token
  // with 4x4 patches: 50), at sp 2 and 4, with dp=2 and with pp=2.
  for (const char* att : {"rsa", "ring", "ulysses"}) {
    const std::string a = std::string("parallel.sp_attention=") + att;
    out.push_back({std::string("gpt_sp2_") + att, &kGpt, {"parallel.sp=2", a}});
    out.push_back({std::string("gpt_sp4_") + att, &kGpt, {"parallel.sp=4", a}});
    out.push_back(
        {std::string("vit_mean_sp2_") + att,
         &kVit,
         {"parallel.sp=2", "model.pool=mean", a}});
  }
  out.push_back(
      {"vit_cls_sp2_ring", &kVit, {"parallel.sp=2", "model.patch=4"}});
  // The other cores inside 1D tensor parallelism (each tp rank's heads).
  out.push_back(
      {"gpt_sp2_tp2_ring",
       &kGpt,
       {"parallel.sp=2", "parallel.sp_attention=ring", "parallel.tp=2"}});
  out.push_back(
      {"vit_mean_sp2_tp2_rsa",
       &kVit,
       {"parallel.sp=2",
        "parallel.sp_attention=rsa",
        "parallel.tp=2",
        "model.pool=mean"}});
  // Ulysses inside 1D tensor parallelism.
  const std::vector<std::string> sp_tp = {
      "parallel.sp=2", "parallel.sp_attention=ulysses", "parallel.tp=2"};
  out.push_back({"gpt_sp2_tp2_ulysses", &kGpt, sp_tp});
  {
    std::vector<std::string> l = sp_tp;
    l.push_back("model.pool=mean");
    out.push_back({"vit_mean_sp2_tp2_ulysses", &kVit, l});
  }
  {
    std::vector<std::string> l = sp_tp;
    for (const char* e :
         {"parallel.dp=2",
          "parallel.pp=2",
          "parallel.microbatches=2",
          "train.batch_size=16",
          "model.depth=4"})
      l.push_back(e);
    out.push_back({"gpt_dp2_pp2_sp2_tp2_ulysses", &kGpt, l});
  }
  // Each core inside 1D tensor parallelism with its sequence-split
  // regions: the tp gathers and scatters cut each sp rank's tokens, and a
  // pipeline's stages exchange [B T / (sp tp), C].
  const std::vector<std::string> sp_tp_seq = {
      "parallel.sp=2", "parallel.tp=2", "parallel.tp_seq=true"};
  {
    std::vector<std::string> l = sp_tp_seq;
    l.push_back("parallel.sp_attention=ring");
    out.push_back({"gpt_sp2_tp2seq_ring", &kGpt, l});
    for (const char* e :
         {"parallel.dp=2",
          "parallel.pp=2",
          "parallel.microbatches=2",
          "train.batch_size=16",
          "model.depth=4"})
      l.push_back(e);
    out.push_back({"gpt_dp2_pp2_sp2_tp2seq_ring", &kGpt, l});
  }
  {
    std::vector<std::string> l = sp_tp_seq;
    l.push_back("parallel.sp_attention=ulysses");
    l.push_back("model.pool=mean");
    out.push_back({"vit_mean_sp2_tp2seq_ulysses", &kVit, l});
  }
  {
    std::vector<std::string> l = sp_tp_seq;
    l.push_back("parallel.sp_attention=rsa");
    l.push_back("model.patch=4");
    out.push_back({"vit_cls_sp2_tp2seq_rsa", &kVit, l});
  }
  // Each core inside 2D (tp=4), 2.5D (tp=8, d=2) and 3D (tp=8): the
  // cores run on the grid's samples and heads; the ViT's classifier head
  // (and its grid communication) on sp rank 0 only.
  const std::vector<std::pair<std::string, std::vector<std::string>>> grids = {
      {"tp2d", {"parallel.tp=4", "parallel.tp_mode=2d"}},
      {"tp2p5d",
       {"parallel.tp=8", "parallel.tp_mode=2.5d", "parallel.tp_depth=2"}},
      {"tp3d", {"parallel.tp=8", "parallel.tp_mode=3d"}}};
  for (const auto& [name, l] : grids) {
    for (const char* att : {"rsa", "ring", "ulysses"}) {
      std::vector<std::string> g = l;
      g.push_back("parallel.sp=2");
      g.push_back(std::string("parallel.sp_attention=") + att);
      out.push_back({"gpt_sp2_" + name + "_" + att, &kGpt, g});
      g.push_back("model.pool=mean");
      out.push_back({"vit_mean_sp2_" + name + "_" + att, &kVit, g});
    }
  }
  out.push_back(
      {"vit_cls_sp2_tp2d_rsa",
       &kVit,
       {"parallel.tp=4",
        "parallel.tp_mode=2d",
        "parallel.sp=2",
        "parallel.sp_attention=rsa",
        "model.patch=4"}});
  out.push_back(
      {"gpt_dp2_pp2_sp2_tp2d_ring",
       &kGpt,
       {"parallel.tp=4",
        "parallel.tp_mode=2d",
        "parallel.sp=2",
        "parallel.dp=2",
        "parallel.pp=2",
        "parallel.microbatches=2",
        "train.batch_size=16",
        "model.depth=4"}});
  out.push_back(
      {"gpt_dp2_sp2_ring",
       &kGpt,
       {"parallel.dp=2",
        "parallel.sp=2",
        "train.batch_size=16",
        "parallel.bucket_mb=0.01"}});
  out.push_back(
      {"gpt_pp2_sp2_ulysses_recompute",
       &kGpt,
       {"parallel.pp=2",
        "parallel.sp=2",
        "parallel.sp_attention=ulysses",
        "parallel.microbatches=2",
        "model.depth=4",
        "parallel.recompute=block"}});
  out.push_back(
      {"vit_mean_pp2_sp2_rsa",
       &kVit,
       {"parallel.pp=2",
        "parallel.sp=2",
        "parallel.sp_attention=rsa",
        "model.pool=mean",
        "parallel.microbatches=2"}});
  return out;
}

// ZeRO stage 1 (small buckets, so that every rank owns some): per rank
// the buckets it updates, in each kind of layout. Stage 2: a reduce per
// bucket and micro-batch, and the gradient memory of its buckets and the
// shared slots. Stage 3: the broadcasts before the modules, and the
// parameter memory of its buckets and the value slots.
std::vector<Case> zero_cases() {
  auto with = [](std::vector<std::string> l, int stage = 1) {
    l.insert(
        l.end(),
        {"parallel.zero=" + std::to_string(stage),
         "parallel.bucket_mb=0.01",
         "train.batch_size=16"});
    return l;
  };
  return {
      {"zero_mlp_dp2", &kMlp, with({"parallel.dp=2"})},
      // The default 4 MiB buckets, cut by ZeRO's limit (a share of the
      // owners'); the MLP's first layer is a bucket of its own, so at
      // dp=4 two ranks own nothing.
      {"zero_gpt_dp2_default_buckets",
       &kGpt,
       {"parallel.dp=2", "parallel.zero=1", "train.batch_size=16"}},
      {"zero2_mlp_dp4_idle_ranks",
       &kMlp,
       {"parallel.dp=4",
        "parallel.zero=2",
        "parallel.microbatches=2",
        "train.batch_size=16"}},
      {"zero3_gpt_dp4_default_buckets",
       &kGpt,
       {"parallel.dp=4", "parallel.zero=3", "train.batch_size=16"}},
      {"zero_gpt_dp4_lamb", &kGpt, with({"parallel.dp=4", "optim.name=lamb"})},
      {"zero_vit_dp2_tp2_lamb",
       &kVit,
       with({"parallel.dp=2", "parallel.tp=2", "optim.name=lamb"})},
      {"zero_gpt_dp2_pp2",
       &kGpt,
       with({"parallel.dp=2", "parallel.pp=2", "parallel.microbatches=2"})},
      {"zero_gpt_tp2p5d",
       &kGpt,
       with(
           {"parallel.tp=8",
            "parallel.tp_mode=2.5d",
            "parallel.tp_depth=2",
            "model.heads=8"})},
      {"zero_gpt_dp2_sp2_tp2_ulysses",
       &kGpt,
       with(
           {"parallel.dp=2",
            "parallel.sp=2",
            "parallel.tp=2",
            "parallel.sp_attention=ulysses"})},
      {"zero2_mlp_dp2_accum2",
       &kMlp,
       with({"parallel.dp=2", "parallel.microbatches=2"}, 2)},
      {"zero2_gpt_dp4", &kGpt, with({"parallel.dp=4"}, 2)},
      {"zero2_vit_dp2_tp2_accum2",
       &kVit,
       with({"parallel.dp=2", "parallel.tp=2", "parallel.microbatches=2"}, 2)},
      {"zero2_gpt_dp2_pp2",
       &kGpt,
       with({"parallel.dp=2", "parallel.pp=2", "parallel.microbatches=2"}, 2)},
      {"zero2_gpt_dp2_sp2", &kGpt, with({"parallel.dp=2", "parallel.sp=2"}, 2)},
      {"zero3_mlp_dp2_accum2",
       &kMlp,
       with({"parallel.dp=2", "parallel.microbatches=2"}, 3)},
      {"zero3_gpt_dp4", &kGpt, with({"parallel.dp=4"}, 3)},
      // Six blocks: buckets leave their slots and are gathered again.
      {"zero3_gpt6_dp2_accum2",
       &kGpt,
       with({"parallel.dp=2", "parallel.microbatches=2", "model.depth=6"}, 3)},
      {"zero3_vit_dp2_tp2_accum2",
       &kVit,
       with({"parallel.dp=2", "parallel.tp=2", "parallel.microbatches=2"}, 3)},
      {"zero3_gpt_dp2_pp2",
       &kGpt,
       with({"parallel.dp=2", "parallel.pp=2", "parallel.microbatches=2"}, 3)},
      {"zero3_gpt_dp2_sp2", &kGpt, with({"parallel.dp=2", "parallel.sp=2"}, 3)},
      // Recompute: gathered module by module.
      {"zero3_gpt6_dp2_pp2_recompute",
       &kGpt,
       with(
           {"parallel.dp=2",
            "parallel.pp=2",
            "parallel.microbatches=2",
            "parallel.recompute=block",
            "model.depth=6"},
           3)},
      // Interleaved chunks: each chunk's buckets reduced and gathered in
      // its own passes.
      {"zero2_gpt_dp2_pp2_interleaved",
       &kGpt,
       with(
           {"parallel.dp=2",
            "parallel.pp=2",
            "parallel.pp_chunks=2",
            "parallel.schedule=interleaved",
            "parallel.microbatches=2",
            "model.depth=4"},
           2)},
      {"zero3_gpt_dp2_pp2_interleaved",
       &kGpt,
       with(
           {"parallel.dp=2",
            "parallel.pp=2",
            "parallel.pp_chunks=2",
            "parallel.schedule=interleaved",
            "parallel.microbatches=2",
            "model.depth=4"},
           3)},
  };
}

INSTANTIATE_TEST_SUITE_P(
    Zero,
    StepCommTest,
    ::testing::ValuesIn(zero_cases()),
    [](const auto& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Layouts, StepCommTest, ::testing::ValuesIn(cases()), [](const auto& info) {
      return info.param.name;
    });

}  // namespace
}  // namespace ndt
