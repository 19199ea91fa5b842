// Sequence parallelism as a mode (parallel/sequence_parallel.h): its config
// rules, each failing with a ConfigError naming the keys; the split each
// attention core gets; and whole models built by SpBuilder on run_local(N)
// threads against the serial model: one training forward and backward
// (dropout on) of the GPT (causal, every attention core, zig-zag for ring)
// and the ViT (class-token and mean pooling), comparing the loss summed
// over ranks and every parameter gradient summed over ranks with the
// serial ones.
//
// Tolerance: max |a - b| / max |b| <= max(1e-5, 10 x floor) per gradient
// tensor and relative 1e-6 on the loss: the serial math summed in another
// order (per rank, then over ranks). The floor is the same difference
// between the serial gradients and the serial model's run one sample at a
// time (another summation order); it passes 1e-6 only for sums with
// strong cancellation (the LM head's LayerNorm bias: 2.4e-6). A dropped
// token, wrong position or mask, or a head counted on every rank is O(1).
#include <gtest/gtest.h>

#include <algorithm>
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
  // Tensor parallelism: Ulysses splits each rank's heads of any mode
  // further (2D on a 2 x 2 grid: 6 / 2 = 3 heads do not split over sp=2).
  expect_has(
      sp_error(gpt(
          {"parallel.sp=2",
           "parallel.tp=4",
           "parallel.tp_mode=2d",
           "train.batch_size=4",
           "parallel.sp_attention=ulysses"})),
      {"model.heads (6)", "parallel.sp (2)", "the 2d layout's head split (2)"});
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

// Rows [first, first + count) of a batch (dimension 0).
Tensor rows_of(const Tensor& x, int64_t first, int64_t count) {
  Shape shape = x.shape();
  const int64_t per = x.numel() / shape[0];
  shape[0] = count;
  return x.slice(first * per, shape);
}

// The serial model's loss and gradients, the batch in `parts` equal
// micro-batches (gradients accumulated).
Grads serial_grads(
    const Config& c, const Tensor& input, const Tensor& t, int parts = 1) {
  SerialBuilder b;
  std::unique_ptr<Model> m = make_model(c.model, b);
  m->init(c.train.seed);
  const int64_t n = input.dim(0) / parts;
  Grads g;
  for (int k = 0; k < parts; ++k) {
    Context ctx;
    ctx.run = training_state();
    ctx.run.sample_offset += k * n;
    LossStats stats;
    m->forward_backward(
        rows_of(input, k * n, n),
        rows_of(t, k * n, n),
        ctx,
        1.0f / float(t.numel()),
        stats);
    g.loss += stats.loss_sum;
  }
  for (Parameter* p : m->parameters())
    g.grads.push_back(p->grad.clone(MemTag::kOther));
  return g;
}

// The model on the layout's ranks (threads; the mesh and the builder as
// the engine makes them): each rank takes the mode's rows of the batch
// and its tokens; its loss summed over sp and the mode's sample axes, its
// gradients summed over sp and the mode's replica axes (what the engine's
// DDP over dp x sp does), each gradient compared with its block of the
// serial one (tensor parallelism shards some).
void check_model(const Config& c, const Tensor& input, const Tensor& t) {
  const ParallelConfig& p = c.parallel;
  SCOPED_TRACE(
      std::string(to_string(c.model.kind)) + " sp=" + std::to_string(p.sp) +
      " " + to_string(p.sp_attention) + " tp=" + std::to_string(p.tp) + " " +
      to_string(p.tp_mode) + (p.tp_seq ? " tp_seq" : "") + " pool " +
      std::to_string(static_cast<int>(c.model.pool)));
  const Grads want = serial_grads(c, input, t);
  const Grads by_sample = serial_grads(c, input, t, int(input.dim(0)));
  const bool tokens = c.model.kind == ModelKind::kGpt;
  const int world = p.tp * p.sp;
  std::vector<std::vector<double>> diffs(world);
  std::vector<double> loss(world);
  run_local(world, [&](ProcessGroup& pg) {
    const std::unique_ptr<Mesh> layout = make_layout_mesh(pg, c);
    Mesh& mesh = *layout;
    const auto mode = make_tensor_parallel_mode(c);
    const SeqShard shard = sequence_shard(c, mesh);
    std::unique_ptr<Builder> b = make_sequence_parallel_builder(c, mesh);
    std::unique_ptr<Model> m = make_model(c.model, *b);
    m->init(c.train.seed);
    const auto [first, count] = mode->sample_rows(mesh, input.dim(0));
    Context ctx;
    ctx.run = training_state();
    ctx.run.sample_offset += first;
    const Tensor in = rows_of(input, first, count);
    const Tensor tg = rows_of(t, first, count);
    LossStats stats;
    m->forward_backward(
        tokens ? take_tokens(in, shard) : in,
        tokens ? take_tokens(tg, shard) : tg,
        ctx,
        1.0f / float(t.numel()),
        stats);
    double l = stats.loss_sum;
    mesh.group("sp").all_reduce(&l, 1);
    for (const std::string& axis : mode->sample_axes())
      mesh.group(axis).all_reduce(&l, 1);
    loss[pg.rank()] = l;
    std::vector<std::string> sum = mode->replica_axes();
    sum.push_back("sp");
    ProcessGroup& replicas = mesh.group(sum);
    std::vector<Parameter*> ps = m->parameters();
    for (size_t i = 0; i < ps.size(); ++i) {
      Tensor& g = ps[i]->grad;
      replicas.all_reduce(g.data(), g.numel());
      diffs[pg.rank()].push_back(
          i < want.grads.size()
              ? rel_diff(g, ps[i]->layout.take_local(want.grads[i]))
              : INFINITY);
    }
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_NEAR(loss[r], want.loss, 1e-6 * std::fabs(want.loss));
    ASSERT_EQ(diffs[r].size(), want.grads.size());
    for (size_t i = 0; i < diffs[r].size(); ++i) {
      const double floor = rel_diff(by_sample.grads[i], want.grads[i]);
      EXPECT_LE(diffs[r][i], std::max(1e-5, 10 * floor))
          << "rank " << r << " gradient " << i << " (floor " << floor << ")";
    }
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

// Each core inside 2D (a 2 x 2 grid), 2.5D (two such grids) and 3D (a
// 2 x 2 x 2 cube): the cores run on the mode's samples and heads (heads /
// 2; 4 heads so that Ulysses splits the 2 further), dropout draws the
// serial mask of my tokens' feature block, the token embedding adds global
// positions, the ViT's grid classifier head runs on sp rank 0. GPT at
// sp = 2 (ring: the zig-zag split) and the ViT with the class token and
// with mean pooling; 4 samples, so that the grid rows (and the cube's 4
// sample blocks) split them.
TEST(SequenceParallel, CoresWithGridsMatchSerial) {
  const Tensor ids = int_tensor({4, 24}, 32, 7, 3);
  const Tensor next = int_tensor({4, 24}, 32, 5, 1);
  const Tensor labels = int_tensor({4}, 10, 3, 1);
  const std::vector<std::vector<std::string>> modes = {
      {"parallel.tp=4", "parallel.tp_mode=2d"},
      {"parallel.tp=8", "parallel.tp_mode=2.5d", "parallel.tp_depth=2"},
      {"parallel.tp=8", "parallel.tp_mode=3d"}};
  for (const std::vector<std::string>& mode : modes) {
    for (const char* a : {"rsa", "ring", "ulysses"}) {
      std::vector<std::string> l = mode;
      for (const std::string& e :
           {std::string("parallel.sp_attention=") + a,
            std::string("parallel.sp=2"),
            std::string("model.heads=4"),
            std::string("train.batch_size=4")})
        l.push_back(e);
      check_model(gpt(l), ids, next);
      check_model(vit(l), randn({4, 1, 12, 12}, 3, "images"), labels);
      l.push_back("model.pool=mean");
      l.push_back("model.image_size=16");
      check_model(vit(l), randn({4, 1, 16, 16}, 3, "images"), labels);
    }
  }
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
