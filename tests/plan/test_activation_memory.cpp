// The plan's activation memory of a transformer block (plan/
// activation_memory.h) against the allocator's ledger: every rank of the
// layout is a thread of run_local and builds the model with its mode's
// builder on the mesh ndtrain builds; each runs the input layer on its
// rows of a synthetic batch (TensorParallelMode::sample_rows), then,
// between barriers, the training forward of one block. The live
// activation bytes (MemTag::kActs) the block added over all ranks must
// equal the formula summed over the ranks, exactly (size classes
// included). exact: the allocator counts blocks.
//
// The whole step's peak (step_activation_bytes) needs every rank's own
// ledger: the plan_step_acts_* ctests hold it to the ledger under mpirun.
//
// Covered: serial, 1D at tp 2 and 4 with and without tp_seq, 2D (tp=4),
// 2.5D (tp=8, d=2) and 3D (tp=8) on the GPT (causal) and the ViT (class
// token and mean pooling), dropout on; and sequence parallelism (sp=2)
// with each attention core alone, with 1D's sequence-split regions, 2D
// and 3D.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "base/error.h"
#include "comm/local_process_group.h"
#include "comm/mesh.h"
#include "nn/seq_split.h"
#include "parallel/sequence_parallel.h"
#include "parallel/tensor_parallel_mode.h"
#include "plan/activation_memory.h"
#include "plan/model_shape.h"
#include "tensor/memory.h"
#include "train/data_source.h"
#include "train/factory.h"

namespace ndt {
namespace {

const std::vector<std::string> kGpt = {
    "model.kind=gpt",
    "model.dim=32",
    "model.depth=2",
    "model.heads=8",
    "model.mlp_dim=64",
    "model.seq_len=16",
    "model.vocab=64",
    "model.dropout=0.1",
    "train.batch_size=8"};
const std::vector<std::string> kVit = {
    "model.kind=vit",
    "model.dim=32",
    "model.depth=2",
    "model.heads=8",
    "model.mlp_dim=64",
    "model.dropout=0.1",
    "train.batch_size=8"};

const std::vector<std::string> kMlp = {
    "model.kind=mlp", "model.hidden=[64]", "train.batch_size=8"};

struct Case {
  std::string name;
  const std::vector<std::string>* model;
  std::vector<std::string> layout;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

int64_t live_acts() {
  return memory_stats().current_bytes[static_cast<int>(MemTag::kActs)];
}

class ActivationMemoryTest : public ::testing::TestWithParam<Case> {};

TEST_P(ActivationMemoryTest, BlockEqualsLedger) {
  std::vector<std::string> args = *GetParam().model;
  args.push_back("data.name=synthetic");
  for (const std::string& a : GetParam().layout)
    args.push_back(a);
  const Config config = load_config("", args);
  const auto mode = make_tensor_parallel_mode(config);
  int world = 1;
  for (const MeshAxis& a : mesh_axes(config))
    world *= a.size;
  const int64_t B = config.train.batch_size;
  DataSource data(config);
  Tensor input = data.make_input(B);
  Tensor targets = data.make_targets(B);
  data.train_batch(0, B, input, targets);
  int64_t before = 0, after = 0;
  std::vector<int64_t> want(world);
  run_local(world, [&](ProcessGroup& pg) {
    const std::unique_ptr<Mesh> layout = make_layout_mesh(pg, config);
    Mesh& mesh = *layout;
    std::unique_ptr<Builder> builder =
        config.parallel.sp > 1 ? make_sequence_parallel_builder(config, mesh)
                               : mode->make_builder(mesh);
    std::unique_ptr<Model> model = make_model(config.model, *builder);
    model->init(config.train.seed);
    const SampleRows rows = mode->sample_rows(mesh, B);
    Tensor x = input.rows(rows.first, rows.count);
    Tensor y0 = targets.rows(rows.first, rows.count);
    // Under sp the GPT's data path gives my tokens; the ViT's patch
    // embedding takes the whole image.
    if (config.parallel.sp > 1 && config.model.kind == ModelKind::kGpt) {
      const SeqShard shard = sequence_shard(config, mesh);
      x = take_tokens(x, shard);
      y0 = take_tokens(y0, shard);
    }
    Context ctx;
    ctx.run.seed = 3;
    LossStats stats;
    const Tensor x0 = model->forward_range(0, 0, x, y0, ctx, stats);
    pg.barrier();
    if (pg.rank() == 0)
      before = live_acts();
    pg.barrier();
    const Tensor y = model->forward_range(1, 1, x0, Tensor(), ctx, stats);
    pg.barrier();
    if (pg.rank() == 0)
      after = live_acts();
    pg.barrier();
    want[pg.rank()] = block_activation_bytes(
        model_shape(config.model, config.parallel),
        config.parallel,
        config.model.heads,
        B);
  });
  int64_t sum = 0;
  for (int64_t w : want)
    sum += w;
  EXPECT_EQ(after - before, sum) << "measured " << after - before << " B over "
                                 << world << " ranks, formula " << sum << " B";
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const auto& [name, model] :
       {std::pair{std::string("gpt"), &kGpt}, {std::string("vit"), &kVit}}) {
    out.push_back({name + "_serial", model, {}});
    for (int tp : {2, 4}) {
      for (bool seq : {false, true}) {
        out.push_back(
            {name + "_tp" + std::to_string(tp) + (seq ? "_seq" : ""),
             model,
             {"parallel.tp=" + std::to_string(tp),
              std::string("parallel.tp_seq=") + (seq ? "true" : "false")}});
      }
    }
    out.push_back(
        {name + "_tp2d", model, {"parallel.tp=4", "parallel.tp_mode=2d"}});
    out.push_back(
        {name + "_tp2p5d",
         model,
         {"parallel.tp=8", "parallel.tp_mode=2.5d", "parallel.tp_depth=2"}});
    out.push_back(
        {name + "_tp3d", model, {"parallel.tp=8", "parallel.tp_mode=3d"}});
    for (const char* core : {"rsa", "ring", "ulysses"}) {
      const auto sp_case = [&](const std::string& layout,
                               std::vector<std::string> keys) {
        keys.push_back("parallel.sp=2");
        keys.push_back(std::string("parallel.sp_attention=") + core);
        // The ViT's 16 patches split over sp without the class token.
        if (name == "vit")
          keys.push_back("model.pool=mean");
        out.push_back({name + layout + "_sp2_" + core, model, keys});
      };
      sp_case("", {});
      sp_case("_tp2_seq", {"parallel.tp=2", "parallel.tp_seq=true"});
      sp_case("_tp2d", {"parallel.tp=4", "parallel.tp_mode=2d"});
      sp_case("_tp3d", {"parallel.tp=8", "parallel.tp_mode=3d"});
    }
  }
  out.push_back(
      {"vit_mean_tp3d",
       &kVit,
       {"parallel.tp=8", "parallel.tp_mode=3d", "model.pool=mean"}});
  out.push_back(
      {"vit_mean_tp2d",
       &kVit,
       {"parallel.tp=4", "parallel.tp_mode=2d", "model.pool=mean"}});
  return out;
}

INSTANTIATE_TEST_SUITE_P(
    Layouts,
    ActivationMemoryTest,
    ::testing::ValuesIn(cases()),
    [](const auto& info) { return info.param.name; });

// The step model (held to the ledger under mpirun by the
// plan_step_acts_* ctests) says what it does not cover.
TEST(ActivationMemory, StepModelRefusesWhatItDoesNotCover) {
  const auto step = [](std::vector<std::string> args) {
    args.push_back("data.name=synthetic");
    const Config c = load_config("", args);
    return step_activation_bytes(
        model_shape(c.model, c.parallel),
        c.parallel,
        c.model.heads,
        8,
        c.model.dropout,
        c.train.threads,
        0);
  };
  EXPECT_GT(step(kGpt), 0);
  // The ViT in one stage.
  EXPECT_GT(step(kVit), 0);
  for (const std::vector<std::string>& mode :
       {std::vector<std::string>{"parallel.tp=2", "parallel.tp_seq=true"},
        {"parallel.tp=4", "parallel.tp_mode=2d"},
        {"parallel.tp=8", "parallel.tp_mode=3d"},
        {"parallel.sp=2", "model.pool=mean"}}) {
    std::vector<std::string> vit = kVit;
    vit.insert(vit.end(), mode.begin(), mode.end());
    EXPECT_GT(step(vit), 0) << mode[1];
  }
  // The MLP, one replica per process.
  EXPECT_GT(step(kMlp), 0);
  std::vector<std::string> threads = kMlp;
  threads.push_back("parallel.dp=2");
  threads.push_back("parallel.dp_mode=threads");
  EXPECT_THROW(step(threads), ConfigError);
  // Pipelines (the plan_step_acts_*pp* ctests hold them to the ledger).
  std::vector<std::string> pp = kGpt;
  pp.push_back("parallel.pp=2");
  EXPECT_GT(step(pp), 0);
  // Sequence parallelism is covered: half the tokens hold less.
  std::vector<std::string> sp = kGpt;
  sp.push_back("parallel.sp=2");
  EXPECT_GT(step(sp), 0);
  EXPECT_LT(step(sp), step(kGpt));
  // Recompute is covered, and holds less than every block's state.
  std::vector<std::string> rc = kGpt;
  rc.push_back("parallel.recompute=block");
  EXPECT_GT(step(rc), 0);
  EXPECT_LT(step(rc), step(kGpt));
}

}  // namespace
}  // namespace ndt
