// Model::forward_range / backward_range, activation checkpointing and
// builds that keep some modules: the pieces a pipeline stage runs.
//
// Every comparison here is exact (EXPECT_EQ on the loss, max_abs_diff == 0
// on tensors): a split run calls the same kernels on the same tensors in
// the same order as the whole-model run, one thread throughout; a module
// range only changes who holds the tensor passed between modules.
// Recompute runs each block's forward a second time on the same input with
// the same dropout keys (seed, step, sample position), so the rebuilt
// saved tensors are the same bits as the first time.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/model.h"
#include "tensor/memory.h"
#include "test_util.h"

namespace ndt {
namespace {

using test::max_abs_diff;
using test::randn;

constexpr uint64_t kSeed = 5;
constexpr int64_t kStep = 3;
constexpr int64_t kSampleOffset = 8;
constexpr float kScale = 0.05f;

// A model with its batch.
struct Case {
  std::string name;
  // keep: the modules the build keeps (null: all).
  std::function<std::unique_ptr<Model>(KeepModule keep)> build;
  Tensor input;
  Tensor targets;
};

// Dropout 0.1 everywhere, so the masks (keyed by the run state) matter.
std::vector<Case> cases() {
  std::vector<Case> out;
  out.push_back(
      {"gpt",
       [](KeepModule keep) {
         SerialBuilder b;
         GptOptions o;
         o.vocab = 11;
         o.seq_len = 8;
         o.dim = 16;
         o.depth = 3;
         o.heads = 2;
         o.mlp_dim = 32;
         o.dropout = 0.1f;
         o.init_std = 0.1f;
         return build_gpt(o, b, std::move(keep));
       },
       test::int_tensor({4, 8}, 11, 3, 1),
       test::int_tensor({4, 8}, 11, 5, 2)});
  out.push_back(
      {"vit",
       [](KeepModule keep) {
         SerialBuilder b;
         VitOptions o;
         o.image_size = 8;
         o.channels = 1;
         o.patch = 4;
         o.dim = 16;
         o.depth = 2;
         o.heads = 2;
         o.mlp_dim = 32;
         o.classes = 3;
         o.dropout = 0.1f;
         o.init_std = 0.1f;
         return build_vit(o, b, std::move(keep));
       },
       randn({4, 1, 8, 8}, 1, "img"),
       test::int_tensor({4}, 3, 2, 1)});
  out.push_back(
      {"mlp",
       [](KeepModule keep) {
         SerialBuilder b;
         MlpOptions o;
         o.inputs = 2 * 4 * 4;
         o.hidden = {16, 12};
         o.classes = 5;
         o.dropout = 0.1f;  // blocks: linear, dropout, linear, dropout
         return build_mlp(o, b, std::move(keep));
       },
       randn({4, 2, 4, 4}, 2, "img"),
       test::int_tensor({4}, 5, 3, 1)});
  return out;
}

void set_run(Context& ctx) {
  ctx.run.training = true;
  ctx.run.seed = kSeed;
  ctx.run.step = kStep;
  ctx.run.sample_offset = kSampleOffset;
}

std::map<std::string, Tensor> grads_of(Model& m) {
  std::map<std::string, Tensor> out;
  for (Parameter* p : m.parameters())
    out[p->name] = p->grad.clone(MemTag::kOther);
  return out;
}

// Every gradient of `m` equals `want` bit for bit.
void expect_same_grads(Model& m, const std::map<std::string, Tensor>& want) {
  auto params = m.parameters();
  EXPECT_EQ(params.size(), want.size());
  for (Parameter* p : params) {
    auto it = want.find(p->name);
    ASSERT_NE(it, want.end()) << p->name;
    EXPECT_EQ(max_abs_diff(p->grad, it->second), 0.0) << p->name;
  }
}

int64_t act_bytes() {
  return memory_stats().current_bytes[static_cast<int>(MemTag::kActs)];
}

TEST(ModelRange, SplitAtEveryCutMatchesWholeModel) {
  for (Case& c : cases()) {
    SCOPED_TRACE(c.name);
    auto model = c.build(nullptr);
    model->init(kSeed);
    const int head = model->num_modules() - 1;

    model->zero_grad();
    Context ctx;
    set_run(ctx);
    LossStats want;
    model->forward_backward(c.input, c.targets, ctx, kScale, want);
    ctx.clear();
    ASSERT_GT(want.count, 0);
    const auto want_grads = grads_of(*model);
    // The tensors a whole-model forward feeds to each block: with
    // recompute, block m keeps exactly its input (recompute_input).
    Context whole;
    set_run(whole);
    LossStats unused;
    model->forward_range(0, head, c.input, c.targets, whole, unused, true);

    // Modules [0, cut - 1] then [cut, head], each with its own Context as
    // on two pipeline stages.
    for (int cut = 1; cut <= head; ++cut) {
      SCOPED_TRACE("cut before module " + std::to_string(cut));
      // The activation crossing the cut in the whole-model forward (the
      // head keeps no recompute input: there, a forward of [0, head - 1]).
      Context ref_ctx;
      set_run(ref_ctx);
      Tensor want_act =
          cut < head ? whole.child(cut).recompute_input
                     : model->forward_range(
                           0, cut - 1, c.input, Tensor(), ref_ctx, unused);
      ASSERT_TRUE(want_act.defined());

      model->zero_grad();
      Context a, b;
      set_run(a);
      set_run(b);
      LossStats stats;
      Tensor act =
          model->forward_range(0, cut - 1, c.input, Tensor(), a, stats);
      EXPECT_EQ(stats.count, 0);  // no loss before the head
      ASSERT_TRUE(act.defined());
      EXPECT_EQ(act.shape(), want_act.shape());
      EXPECT_EQ(max_abs_diff(act, want_act), 0.0);
      // The receive buffer shape a pipeline stage would allocate.
      Shape per_sample = act.shape();
      per_sample.erase(per_sample.begin());
      EXPECT_EQ(per_sample, model->sample_shapes.at(cut - 1));

      Tensor out = model->forward_range(cut, head, act, c.targets, b, stats);
      EXPECT_FALSE(out.defined());  // the head returns no activation
      Tensor dact = model->backward_range(cut, head, Tensor(), b, kScale);
      ASSERT_TRUE(dact.defined());
      EXPECT_EQ(dact.shape(), act.shape());
      Tensor dinput = model->backward_range(0, cut - 1, dact, a, kScale);
      EXPECT_FALSE(dinput.defined());  // nobody consumes the raw input's

      EXPECT_EQ(stats.loss_sum, want.loss_sum);
      EXPECT_EQ(stats.count, want.count);
      EXPECT_EQ(stats.correct, want.correct);
      expect_same_grads(*model, want_grads);
    }
  }
}

TEST(ModelRange, BackwardDoneReportsEachModuleInReverse) {
  auto model = cases()[0].build(nullptr);
  model->init(kSeed);
  std::vector<int> done;
  model->on_backward_done = [&](int m) { done.push_back(m); };
  const Case c = cases()[0];
  Context a, b;
  set_run(a);
  set_run(b);
  LossStats stats;
  const int head = model->num_modules() - 1;
  Tensor act = model->forward_range(0, 1, c.input, Tensor(), a, stats);
  model->forward_range(2, head, act, c.targets, b, stats);
  Tensor dact = model->backward_range(2, head, Tensor(), b, kScale);
  EXPECT_EQ(done, (std::vector<int>{4, 3, 2}));
  model->backward_range(0, 1, dact, a, kScale);
  EXPECT_EQ(done, (std::vector<int>{4, 3, 2, 1, 0}));
}

// Every module's forward starts with on_forward_begin; every transformer
// block polls communication after each of its 9 layers' forward and
// backward (before its on_backward_done); nothing polls when no hook is
// set.
TEST(ModelRange, HooksAndPollsBetweenTheLayersOfEachBlock) {
  const Case c = cases()[0];  // gpt: embedding, 3 blocks, head
  auto model = c.build(nullptr);
  model->init(kSeed);
  constexpr int kPoll = -1;
  constexpr int kForward = 100;  // + m: module m's forward begins
  std::vector<int> events;
  model->on_forward_begin = [&](int m) { events.push_back(kForward + m); };
  model->on_backward_done = [&](int m) { events.push_back(m); };
  model->on_comm_poll = [&] { events.push_back(kPoll); };
  Context ctx;
  set_run(ctx);
  LossStats stats;
  const int head = model->num_modules() - 1;
  model->forward_range(0, head, c.input, c.targets, ctx, stats);
  model->backward_range(0, head, Tensor(), ctx, kScale);
  std::vector<int> want{kForward};
  for (int m = 1; m < head; ++m) {
    want.push_back(kForward + m);
    want.insert(want.end(), 9, kPoll);
  }
  want.push_back(kForward + head);
  want.push_back(head);
  for (int m = head - 1; m >= 1; --m) {
    want.insert(want.end(), 9, kPoll);
    want.push_back(m);
  }
  want.push_back(0);
  EXPECT_EQ(events, want);

  model->on_comm_poll = nullptr;
  model->on_forward_begin = nullptr;
  events.clear();
  Context again;
  set_run(again);
  model->forward_range(0, head, c.input, c.targets, again, stats);
  model->backward_range(0, head, Tensor(), again, kScale);
  EXPECT_EQ(events, (std::vector<int>{4, 3, 2, 1, 0}));
}

TEST(ModelRange, RecomputeIsExactAndHoldsFewerActivations) {
  for (Case& c : cases()) {
    SCOPED_TRACE(c.name);
    auto model = c.build(nullptr);
    model->init(kSeed);
    const int head = model->num_modules() - 1;

    LossStats stats[2];
    int64_t held[2];
    std::map<std::string, Tensor> grads[2];
    for (int recompute = 0; recompute < 2; ++recompute) {
      model->zero_grad();
      Context ctx;
      set_run(ctx);
      const int64_t before = act_bytes();
      model->forward_range(
          0, head, c.input, c.targets, ctx, stats[recompute], recompute == 1);
      held[recompute] = act_bytes() - before;
      if (recompute == 1) {
        // Each block kept its input only.
        for (int m = 1; m < head; ++m) {
          EXPECT_TRUE(ctx.child(m).recompute_input.defined()) << m;
          EXPECT_TRUE(ctx.child(m).saved.empty()) << m;
        }
      }
      model->backward_range(0, head, Tensor(), ctx, kScale);
      for (int m = 1; m < head; ++m)
        EXPECT_FALSE(ctx.child(m).recompute_input.defined()) << m;
      grads[recompute] = grads_of(*model);
    }
    EXPECT_EQ(stats[1].loss_sum, stats[0].loss_sum);
    EXPECT_EQ(stats[1].count, stats[0].count);
    expect_same_grads(*model, grads[0]);
    EXPECT_GT(held[1], 0);
    if (c.name == "mlp") {
      // An MLP block is one linear or one dropout: what it saves (a
      // pre-activation, or nothing) is no larger than the input recompute
      // keeps instead, so checkpointing single layers cannot save memory.
      EXPECT_LE(held[1], held[0]);
    } else {
      // A transformer block saves ~10 tensors of its input's size or more.
      EXPECT_LT(held[1], held[0])
          << "recompute holds " << held[1] << " activation bytes after "
          << "forward, without recompute " << held[0];
    }
  }
}

TEST(ModelRange, EvaluationHoldsOnlyTheActivationPassedOn) {
  // In evaluation no backward reads what a module saves: when module m
  // begins, the activations alive are at most module m-1's output (in
  // training, every earlier module's saved tensors too).
  for (Case& c : cases()) {
    SCOPED_TRACE(c.name);
    auto model = c.build(nullptr);
    model->init(kSeed);
    const int64_t batch = c.input.dim(0);
    const int64_t before = act_bytes();
    std::vector<int64_t> live;
    model->on_forward_begin = [&](int) {
      live.push_back(act_bytes() - before);
    };
    Context ctx;
    set_run(ctx);
    LossStats stats;
    model->forward_eval(c.input, c.targets, ctx, stats);
    ASSERT_EQ(static_cast<int>(live.size()), model->num_modules());
    for (int m = 1; m < model->num_modules(); ++m) {
      const int64_t out = batch * shape_numel(model->sample_shapes[m - 1]);
      EXPECT_LE(live[m], static_cast<int64_t>(mem_block_bytes(size_t(out) * 4)))
          << "activation bytes alive when module " << m << " begins";
    }
    EXPECT_EQ(act_bytes(), before);
  }
}

TEST(ModelRange, RecomputeIsOffInEvaluation) {
  // forward_range in eval mode keeps nothing to recompute.
  auto model = cases()[0].build(nullptr);
  model->init(kSeed);
  const Case c = cases()[0];
  Context ctx;
  set_run(ctx);
  ctx.run.training = false;
  LossStats stats;
  model->forward_range(
      0, model->num_modules() - 1, c.input, c.targets, ctx, stats, true);
  for (int m = 1; m < model->num_modules() - 1; ++m)
    EXPECT_FALSE(ctx.child(m).recompute_input.defined()) << m;
  LossStats eval;
  Context e;
  set_run(e);
  model->forward_eval(c.input, c.targets, e, eval);
  EXPECT_EQ(stats.loss_sum, eval.loss_sum);
}

int64_t param_bytes() {
  return memory_stats().current_bytes[static_cast<int>(MemTag::kParams)];
}

// The parameter bytes of each module of `c`'s model: a build that keeps
// only that module.
std::vector<int64_t> module_param_bytes(const Case& c, int modules) {
  std::vector<int64_t> out;
  for (int k = 0; k < modules; ++k) {
    const int64_t before = param_bytes();
    auto m =
        c.build([k](int x, const std::vector<Parameter*>&) { return x == k; });
    out.push_back(param_bytes() - before);
  }
  return out;
}

TEST(ModelRange, BuildKeepsOnlyItsModules) {
  const Case c = cases()[0];  // gpt, depth 3: modules 0..4
  int64_t before = param_bytes();
  auto full = c.build(nullptr);
  full->init(kSeed);
  const int64_t total = param_bytes() - before;
  const int n = full->num_modules();
  ASSERT_EQ(n, 5);
  const std::vector<int64_t> bytes = module_param_bytes(c, n);
  int64_t sum = 0;
  for (int64_t b : bytes)
    sum += b;
  ASSERT_EQ(sum, total);

  const std::vector<bool> keep = {false, true, false, true, false};
  before = param_bytes();
  memory_reset_peaks();
  auto model = c.build(
      [&keep](int m, const std::vector<Parameter*>&) { return keep[m]; });
  model->init(kSeed);
  // The build holds the kept modules and at most the one being built: its
  // peak is the largest of (modules kept before m) + module m.
  int64_t held = 0;
  int64_t peak = 0;
  for (int m = 0; m < n; ++m) {
    peak = std::max(peak, held + bytes[m]);
    if (keep[m])
      held += bytes[m];
  }
  EXPECT_EQ(param_bytes() - before, held);
  EXPECT_EQ(
      memory_stats().peak_bytes[static_cast<int>(MemTag::kParams)] - before,
      peak);
  EXPECT_LT(peak, total);

  size_t expected = 0;
  for (int m = 0; m < n; ++m) {
    EXPECT_EQ(model->has_module(m), keep[m]) << m;
    // Every module is described as built, kept or not.
    const std::vector<Parameter*> want = full->module_parameters(m);
    const std::vector<ParamDesc>& got = model->described(m);
    ASSERT_EQ(got.size(), want.size()) << m;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].name, want[i]->name);
      EXPECT_EQ(got[i].global_shape, want[i]->layout.global_shape);
      EXPECT_EQ(got[i].numel, want[i]->value.numel());
    }
    if (keep[m]) {
      expected += want.size();
    } else {
      EXPECT_TRUE(model->module_parameters(m).empty()) << m;
    }
  }
  auto params = model->parameters();
  EXPECT_EQ(params.size(), expected);
  for (Parameter* p : params) {
    const bool mine = p->name.rfind("blocks.0.", 0) == 0 ||
                      p->name.rfind("blocks.2.", 0) == 0;
    EXPECT_TRUE(mine) << p->name;
    // The same values as the whole model's (init is keyed by name).
    for (Parameter* q : full->parameters()) {
      if (q->name == p->name) {
        EXPECT_EQ(max_abs_diff(p->value, q->value), 0.0) << p->name;
      }
    }
  }
}

TEST(ModelRange, PrunedReplicasReproduceWholeModel) {
  // Two replicas holding modules [0, 2] and [3, 4] of a 5-module GPT, as
  // two pipeline ranks do: same init (keyed by name), same loss and
  // gradients as the whole model, exactly.
  const Case c = cases()[0];
  auto full = c.build(nullptr);
  full->init(kSeed);
  full->zero_grad();
  Context ctx;
  set_run(ctx);
  LossStats want;
  full->forward_backward(c.input, c.targets, ctx, kScale, want);
  const auto want_grads = grads_of(*full);

  auto first =
      c.build([](int m, const std::vector<Parameter*>&) { return m <= 2; });
  auto second =
      c.build([](int m, const std::vector<Parameter*>&) { return m >= 3; });
  first->init(kSeed);
  second->init(kSeed);
  Context a, b;
  set_run(a);
  set_run(b);
  LossStats stats;
  Tensor act = first->forward_range(0, 2, c.input, Tensor(), a, stats);
  second->forward_range(3, 4, act, c.targets, b, stats);
  Tensor dact = second->backward_range(3, 4, Tensor(), b, kScale);
  first->backward_range(0, 2, dact, a, kScale);
  EXPECT_EQ(stats.loss_sum, want.loss_sum);
  size_t compared = 0;
  for (Model* m : {first.get(), second.get()}) {
    for (Parameter* p : m->parameters()) {
      EXPECT_EQ(max_abs_diff(p->grad, want_grads.at(p->name)), 0.0) << p->name;
      ++compared;
    }
  }
  EXPECT_EQ(compared, want_grads.size());
}

}  // namespace
}  // namespace ndt
