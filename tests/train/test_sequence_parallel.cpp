// Sequence parallelism as a mode (parallel/sequence_parallel.h): its config
// rules, each failing with a ConfigError naming the keys; the split each
// attention core gets; and whole models built by SpBuilder on run_local(N)
// threads against the serial model: one training forward and backward
// (dropout on) of the GPT (causal, every attention core, zig-zag for ring)
// and the ViT (class-token and mean pooling), comparing the loss summed
// over ranks and every parameter gradient summed over ranks with the
// serial ones.
//
// Tolerance: max |a - b| / max |b| <= 1e-5 per gradient tensor and
// relative 1e-6 on the loss: the serial math summed in another order (per
// rank, then over ranks). A dropped token, wrong position or mask, or a
// head counted on every rank is O(1).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "base/error.h"
#include "comm/local_process_group.h"
#include "comm/mesh.h"
#include "nn/model.h"
#include "parallel/sequence_parallel.h"
#include "parallel/sp_builder.h"
#include "parallel/tensor_parallel_mode.h"
#include "test_util.h"
#include "train/factory.h"

namespace ndt {
namespace {

using test::expect_has;
using test::int_tensor;
using test::randn;
using test::rel_diff;

Config gpt(std::vector<std::string> more) {
  more.insert(
      more.begin(),
      {"model.kind=gpt",
       "data.name=synthetic",
       "model.dim=24",
       "model.depth=2",
       "model.heads=6",
       "model.mlp_dim=32",
       "model.seq_len=24",
       "model.dropout=0.1",
       "model.vocab=32",
       "train.batch_size=3"});
  return load_config("", more);
}

// 12x12 images in 4x4 patches: 9 patches (+1 class token).
Config vit(std::vector<std::string> more) {
  more.insert(
      more.begin(),
      {"model.kind=vit",
       "data.name=synthetic",
       "model.image_size=12",
       "model.patch=4",
       "model.channels=1",
       "model.dim=24",
       "model.depth=2",
       "model.heads=6",
       "model.mlp_dim=32",
       "model.dropout=0.1",
       "train.batch_size=3"});
  return load_config("", more);
}

std::string sp_error(const Config& c) {
  try {
    sequence_parallel_axis(c);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError";
  return "";
}

TEST(SequenceParallel, RefusesWhatIsNotBuilt) {
  // Tensor parallelism: 1D only (with or without its token split).
  expect_has(
      sp_error(gpt(
          {"parallel.sp=2",
           "parallel.tp=4",
           "parallel.tp_mode=2d",
           "parallel.sp_attention=ulysses"})),
      {"parallel.sp=2", "parallel.tp=4", "parallel.tp_mode=1d", "tp_mode=2d"});
  EXPECT_EQ(
      sequence_parallel_axis(
          gpt({"parallel.sp=2", "parallel.tp=2", "parallel.tp_seq=true"}))
          .size,
      2);
  // The token split cuts each sp rank's tokens: 3 samples x 24 / 3 = 24
  // tokens do not split over tp = 5 (nor do model.heads, so use 5 heads).
  try {
    make_tensor_parallel_mode(gpt(
        {"parallel.sp=3",
         "parallel.tp=5",
         "parallel.tp_seq=true",
         "model.heads=5",
         "model.dim=25",
         "model.mlp_dim=35",
         "model.vocab=35",
         "parallel.sp_attention=rsa"}));
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    expect_has(
        e.what(),
        {"parallel.tp_seq",
         "on a sequence-parallel rank",
         "3 samples x 8 tokens (24 / parallel.sp 3) = 24",
         "not divisible by 5"});
  }
  expect_has(
      sp_error(gpt(
          {"parallel.sp=2",
           "parallel.tp=2",
           "parallel.sp_attention=ulysses",
           "model.heads=6"})),
      {"model.heads (6)", "parallel.sp (2) x parallel.tp (2)"});
  expect_has(
      sp_error(
          gpt({"parallel.sp=2", "parallel.dp=3", "parallel.dp_mode=threads"})),
      {"parallel.sp=2", "parallel.dp_mode=mpi"});
  expect_has(
      sp_error(load_config(
          "", {"model.hidden=[8]", "data.name=synthetic", "parallel.sp=2"})),
      {"model.kind mlp"});
  // Tokens must split exactly: 24 into 5 chunks, 26 into the 4 zig-zag
  // chunks of ring attention at sp=2, the ViT's 9 + 1 into 3.
  expect_has(
      sp_error(gpt({"parallel.sp=5", "parallel.sp_attention=rsa"})),
      {"24 tokens (model.seq_len)", "into 5 chunks"});
  expect_has(
      sp_error(gpt({"parallel.sp=2", "model.seq_len=26"})),
      {"26 tokens", "4 zig-zag chunks"});
  expect_has(
      sp_error(vit({"parallel.sp=3"})),
      {"10 tokens", "model.pool cls", "into 3 chunks"});
  expect_has(
      sp_error(gpt({"parallel.sp=4", "parallel.sp_attention=ulysses"})),
      {"model.heads (6)", "parallel.sp (4)"});
  EXPECT_EQ(sequence_parallel_axis(gpt({"parallel.sp=3"})).size, 3);
  EXPECT_EQ(sequence_parallel_axis(gpt({})).name, "sp");
}

TEST(SequenceParallel, SplitPerAttention) {
  EXPECT_EQ(sequence_split(gpt({"parallel.sp=2"})), SeqSplit::kZigzag);
  EXPECT_EQ(
      sequence_split(gpt({"parallel.sp=2", "parallel.sp_attention=rsa"})),
      SeqSplit::kContiguous);
  EXPECT_EQ(
      sequence_split(gpt({"parallel.sp=2", "parallel.sp_attention=ulysses"})),
      SeqSplit::kContiguous);
  EXPECT_EQ(sequence_split(vit({"parallel.sp=2"})), SeqSplit::kContiguous);
}

struct Grads {
  double loss = 0;
  std::vector<Tensor> grads;  // in parameter order
};

RunState training_state() {
  RunState run;
  run.training = true;
  run.seed = 7;
  run.step = 2;
  run.sample_offset = 5;
  return run;
}

Grads serial_grads(const Config& c, const Tensor& input, const Tensor& t) {
  SerialBuilder b;
  std::unique_ptr<Model> m = make_model(c.model, b);
  m->init(c.train.seed);
  Context ctx;
  ctx.run = training_state();
  LossStats stats;
  m->forward_backward(input, t, ctx, 1.0f / float(t.numel()), stats);
  Grads g;
  g.loss = stats.loss_sum;
  for (Parameter* p : m->parameters())
    g.grads.push_back(p->grad.clone(MemTag::kOther));
  return g;
}

// The model on tp x N threads (mesh axes tp, sp); each rank's gradients and
// loss summed over sp (what the engine's DDP over dp x sp does), each
// gradient compared with its block of the serial one (1D tensor
// parallelism shards some).
void check_model(const Config& c, const Tensor& input, const Tensor& t) {
  const int N = c.parallel.sp;
  const int tp = c.parallel.tp;
  SCOPED_TRACE(
      std::string(to_string(c.model.kind)) + " sp=" + std::to_string(N) + " " +
      to_string(c.parallel.sp_attention) + " tp=" + std::to_string(tp) +
      (c.parallel.tp_seq ? " tp_seq" : "") + " pool " +
      std::to_string(static_cast<int>(c.model.pool)));
  const Grads want = serial_grads(c, input, t);
  const bool tokens = c.model.kind == ModelKind::kGpt;
  std::vector<std::vector<double>> diffs(tp * N);
  std::vector<double> loss(tp * N);
  run_local(tp * N, [&](ProcessGroup& world) {
    Mesh mesh(world, {tp, N}, {"tp", "sp"});
    ProcessGroup& pg = mesh.group("sp");
    const SeqShard shard(
        sequence_split(c), model_tokens(c.model), pg.rank(), N);
    SpBuilder b(
        pg,
        c.parallel.sp_attention,
        shard,
        mesh.group("tp"),
        c.parallel.tp_seq);
    std::unique_ptr<Model> m = make_model(c.model, b);
    m->init(c.train.seed);
    Context ctx;
    ctx.run = training_state();
    LossStats stats;
    m->forward_backward(
        tokens ? take_tokens(input, shard) : input,
        tokens ? take_tokens(t, shard) : t,
        ctx,
        1.0f / float(t.numel()),
        stats);
    double l = stats.loss_sum;
    pg.all_reduce(&l, 1);
    loss[world.rank()] = l;
    std::vector<Parameter*> ps = m->parameters();
    for (size_t i = 0; i < ps.size(); ++i) {
      Tensor& g = ps[i]->grad;
      pg.all_reduce(g.data(), g.numel());
      diffs[world.rank()].push_back(
          i < want.grads.size()
              ? rel_diff(g, ps[i]->layout.take_local(want.grads[i]))
              : INFINITY);
    }
  });
  for (int r = 0; r < tp * N; ++r) {
    EXPECT_NEAR(loss[r], want.loss, 1e-6 * std::fabs(want.loss));
    ASSERT_EQ(diffs[r].size(), want.grads.size());
    for (size_t i = 0; i < diffs[r].size(); ++i)
      EXPECT_LE(diffs[r][i], 1e-5) << "rank " << r << " gradient " << i;
  }
}

TEST(SequenceParallel, GptMatchesSerial) {
  const Tensor ids = int_tensor({3, 24}, 32, 7, 3);
  const Tensor next = int_tensor({3, 24}, 32, 5, 1);
  for (const char* a : {"rsa", "ring", "ulysses"}) {
    for (int N : {2, 3}) {
      check_model(
          gpt(
              {"parallel.sp=" + std::to_string(N),
               std::string("parallel.sp_attention=") + a}),
          ids,
          next);
    }
  }
}

// Each core inside 1D tensor parallelism: tp splits the heads (and the
// vocabulary, the MLP), the core runs on each tp rank's heads (Ulysses
// splits them further over sp). GPT: 6 heads, tp = 2, sp = 3; ViT: tp = 3
// (mlp_dim 48 splits), sp = 2, the class token (9 + 1 tokens) and mean
// pooling (16 tokens of a 16 x 16 image). extra: more config.
void check_cores_with_tp1d(const std::string& extra) {
  const Tensor ids = int_tensor({3, 24}, 32, 7, 3);
  const Tensor next = int_tensor({3, 24}, 32, 5, 1);
  const Tensor labels = int_tensor({3}, 10, 3, 1);
  for (const char* a : {"rsa", "ring", "ulysses"}) {
    const std::string att = std::string("parallel.sp_attention=") + a;
    check_model(gpt({"parallel.sp=3", att, "parallel.tp=2", extra}), ids, next);
    const std::vector<std::string> v = {
        "parallel.sp=2", att, "parallel.tp=3", "model.mlp_dim=48", extra};
    check_model(vit(v), randn({3, 1, 12, 12}, 3, "images"), labels);
    std::vector<std::string> mean = v;
    mean.push_back("model.pool=mean");
    mean.push_back("model.image_size=16");
    check_model(vit(mean), randn({3, 1, 16, 16}, 3, "images"), labels);
  }
}

TEST(SequenceParallel, CoresWithTp1dMatchSerial) {
  check_cores_with_tp1d("parallel.tp_seq=false");
}

// With 1D's sequence-split regions the activations between attention and
// MLP are block tp-rank of each sp rank's tokens, cut across samples (GPT:
// 3 samples x 8 tokens over tp = 2, so rank 1's block starts mid-sample;
// ring's zig-zag chunks of 4 are cut there too; ViT, class token: 3 x 5
// tokens over tp = 3, mean pooling: 3 x 8 over 3). Dropout (p = 0.1) must
// draw the serial mask of each block.
TEST(SequenceParallel, CoresWithTp1dTokenSplitMatchSerial) {
  check_cores_with_tp1d("parallel.tp_seq=true");
}

TEST(SequenceParallel, VitMatchesSerial) {
  const Tensor images = randn({3, 1, 12, 12}, 3, "images");
  const Tensor labels = int_tensor({3}, 10, 3, 1);
  for (const char* a : {"rsa", "ring", "ulysses"}) {
    const std::string att = std::string("parallel.sp_attention=") + a;
    check_model(vit({"parallel.sp=2", att}), images, labels);
    check_model(vit({"parallel.sp=3", att, "model.pool=mean"}), images, labels);
  }
}

}  // namespace
}  // namespace ndt
