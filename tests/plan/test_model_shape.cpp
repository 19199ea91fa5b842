// ModelShape (plan/model_shape.h) against the built models: for the MLP,
// the ViT (both pools) and the GPT, serial and under Tp1dBuilder at tp 2
// and 4 (run_local threads), every module's parameters in
// collect_parameters() order must have the plan's names, local element
// counts, tp sharding and layer (ZeRO stage 3's gather unit), and every
// module's output per sample must be the model's sample_shapes entry. exact.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "comm/local_process_group.h"
#include "comm/mesh.h"
#include "optim/layer_norms.h"
#include "parallel/ddp.h"
#include "parallel/tensor_parallel_mode.h"
#include "parallel/tp1d_builder.h"
#include "plan/ddp_comm.h"
#include "plan/model_shape.h"
#include "train/factory.h"

namespace ndt {
namespace {

// Compares the built model (this rank's shards) with the plan's shape.
void expect_same(Model& model, const ModelShape& s, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(model.num_modules(), s.num_modules());
  for (int m = 0; m < s.num_modules(); ++m) {
    const std::vector<Parameter*> ps = model.module_parameters(m);
    const std::vector<ParamShape>& want = s.modules[m].params;
    ASSERT_EQ(ps.size(), want.size()) << "module " << m;
    for (size_t i = 0; i < ps.size(); ++i) {
      EXPECT_EQ(ps[i]->name, want[i].name) << "module " << m;
      EXPECT_EQ(ps[i]->value.numel(), want[i].numel_local) << ps[i]->name;
      EXPECT_EQ(sharded_axes(ps[i]->layout), want[i].shard_axes) << ps[i]->name;
      EXPECT_EQ(model.described(m).at(i).layer, want[i].layer) << ps[i]->name;
    }
    if (m < s.head()) {
      EXPECT_EQ(model.sample_shapes.at(m), Shape(s.modules[m].sample_out))
          << "module " << m;
    }
  }
  EXPECT_EQ(model.loss_terms_per_sample, s.loss_terms_per_sample);
}

GptOptions gpt_options() {
  GptOptions o;
  o.vocab = 64;
  o.seq_len = 16;
  o.dim = 32;
  o.depth = 2;
  o.heads = 4;
  o.mlp_dim = 64;
  return o;
}

VitOptions vit_options(HeadPool pool) {
  VitOptions o;
  o.dim = 32;
  o.depth = 2;
  o.heads = 4;
  o.mlp_dim = 64;
  o.pool = pool;
  return o;
}

TEST(ModelShape, SerialModelsMatch) {
  SerialBuilder b;
  MlpOptions mlp;
  mlp.hidden = {64, 32};
  for (float dropout : {0.0f, 0.1f}) {
    mlp.dropout = dropout;
    expect_same(*build_mlp(mlp, b), mlp_shape(mlp), "mlp");
  }
  for (HeadPool pool : {HeadPool::kCls, HeadPool::kMean}) {
    expect_same(
        *build_vit(vit_options(pool), b),
        vit_shape(vit_options(pool), 1),
        "vit");
  }
  expect_same(*build_gpt(gpt_options(), b), gpt_shape(gpt_options(), 1), "gpt");
}

TEST(ModelShape, TensorParallelShardsMatch) {
  for (int tp : {2, 4}) {
    run_local(tp, [&](ProcessGroup& pg) {
      Tp1dBuilder b(pg, /*token_split=*/false, 16);
      expect_same(
          *build_gpt(gpt_options(), b),
          gpt_shape(gpt_options(), tp),
          "gpt tp=" + std::to_string(tp));
      Tp1dBuilder v(pg, false, 17);
      expect_same(
          *build_vit(vit_options(HeadPool::kCls), v),
          vit_shape(vit_options(HeadPool::kCls), tp),
          "vit tp=" + std::to_string(tp));
    });
  }
}

// 2D, 2.5D and 3D: the models the mode's builder makes on the mode's mesh
// (threads) against model_shape(config.model, config.parallel).
TEST(ModelShape, GridAndCubeShardsMatch) {
  const std::vector<std::vector<std::string>> modes = {
      {"parallel.tp=4", "parallel.tp_mode=2d"},
      {"parallel.tp=8", "parallel.tp_mode=2.5d", "parallel.tp_depth=2"},
      {"parallel.tp=8", "parallel.tp_mode=3d"}};
  for (const std::vector<std::string>& mode : modes) {
    for (const char* kind : {"model.kind=gpt", "model.kind=vit"}) {
      std::vector<std::string> keys = {
          kind,
          "data.name=synthetic",
          "model.dim=32",
          "model.heads=4",
          "model.mlp_dim=64",
          "model.depth=2",
          "train.batch_size=8"};
      keys.insert(keys.end(), mode.begin(), mode.end());
      const Config c = load_config("", keys);
      const auto tp_mode = make_tensor_parallel_mode(c);
      run_local(c.parallel.tp, [&](ProcessGroup& pg) {
        const std::unique_ptr<Mesh> mesh = make_layout_mesh(pg, c);
        auto b = tp_mode->make_builder(*mesh);
        expect_same(
            *make_model(c.model, *b),
            model_shape(c.model, c.parallel),
            std::string(kind) + " " + mode[1]);
      });
    }
  }
}

TEST(ModelShape, IndivisibleSplitIsConfigError) {
  GptOptions o = gpt_options();
  o.vocab = 30;
  EXPECT_THROW(gpt_shape(o, 4), ConfigError);
}

// Single-process data parallel has no readable ledger (its group lives
// inside Engine::step); its formula is one broadcast and one reduce per
// parameter tensor, whose count and sizes are the shape's.
TEST(ModelShape, ThreadsDataParallelFormula) {
  SerialBuilder b;
  auto model = build_gpt(gpt_options(), b);
  const CommVolume v = threads_dp_step_comm(gpt_shape(gpt_options(), 1), 2);
  const int64_t n = static_cast<int64_t>(model->parameters().size());
  int64_t numel = 0;
  for (Parameter* p : model->parameters())
    numel += p->value.numel();
  EXPECT_EQ(v[OpType::kBroadcast], (OpVolume{n, numel, 4 * numel}));
  EXPECT_EQ(v[OpType::kReduce], (OpVolume{n, numel, 4 * numel}));
  EXPECT_EQ(v.total_calls(), 2 * n);
}

// The plan's DDP buckets are the run's: DistributedDataParallel on
// run_local(2) builds its buckets over the same (serial) GPT, for one
// bucket, several, and one per parameter; exact. (The step tests cover
// sharded and pipeline-held parameter lists through the ledger.)
TEST(ModelShape, DdpBucketsAreTheRunsBuckets) {
  for (int64_t bytes : {int64_t{4} << 20, int64_t{16} << 10, int64_t{1}}) {
    std::vector<std::vector<int64_t>> got(2);
    run_local(2, [&](ProcessGroup& pg) {
      SerialBuilder b;
      auto model = build_gpt(gpt_options(), b);
      DistributedDataParallel ddp(*model, pg, bytes);
      for (const Bucket& bk : ddp.buckets())
        got[pg.rank()].push_back(bk.numel);
    });
    const std::vector<int64_t> want =
        ddp_bucket_numels(gpt_shape(gpt_options(), 1), {}, bytes);
    EXPECT_EQ(got[0], want) << bytes << " bytes";
    EXPECT_EQ(got[1], want) << bytes << " bytes";
    if (bytes < (int64_t{4} << 20)) {
      EXPECT_GT(want.size(), 2u) << bytes << " bytes: several buckets";
    }
  }
}

}  // namespace
}  // namespace ndt
