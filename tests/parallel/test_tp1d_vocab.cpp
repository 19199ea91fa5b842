// Vocabulary-parallel embedding and LM head (1D tensor parallelism) against
// their serial oracles, TokenEmbedding and LmHead, the master-vs-shard way
// (CONVENTIONS.md 5): the serial layer runs once on the main thread; each
// run_local(tp) rank builds the parallel layer with the same names and
// seed, and its parameters, outputs, input gradients and every parameter
// gradient are compared with this rank's block of the serial ones
// (Layout::take_local; my tokens in token-split mode). B = 2, T = 8, C = 16.
//
// Tolerances:
// - Embedding: exact (bitwise). Each output element is one table value
//   (plus zeros from the other ranks) plus one position, and the gradient
//   rows are summed in token order as in the serial kernel.
// - LM head: fp32 reduction order only. The softmax sum is split over
//   vocabulary shards and the input / LayerNorm gradients are summed over
//   tp: loss_sum relative error <= 1e-6; every gradient's max |diff|
//   relative to its max |value| <= 1e-5. count and correct exact.
//   Observed: <= 1e-8 for the loss and <= 7e-7 for gradients; a wrong
//   position offset or a lost reduction fails by far more.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "comm/local_process_group.h"
#include "nn/builder.h"
#include "nn/embedding.h"
#include "nn/head.h"
#include "ops/ops.h"
#include "parallel/regions.h"
#include "parallel/tp1d_embedding.h"
#include "parallel/tp1d_lm_head.h"
#include "tensor/rng.h"
#include "test_util.h"

namespace ndt {
namespace {

using test::max_abs_diff;
using test::randn;

constexpr int64_t kB = 2, kT = 8, kC = 16, kN = kB * kT;
constexpr uint64_t kSeed = 17;
constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor random_ids(int V, uint64_t seed, const std::string& name) {
  Tensor ids({kB, kT}, MemTag::kData, DType::kI32);
  const uint64_t key = rng_key(seed, name);
  for (int64_t i = 0; i < ids.numel(); ++i)
    ids.data_i32()[i] = static_cast<int32_t>(rng_u64(key, i) % V);
  return ids;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i)
    m = std::max(m, std::fabs(double(t.data()[i])));
  return m;
}

// Max |a - b| relative to max |b|; infinite when the shapes differ.
double rel_diff(const Tensor& a, const Tensor& b) {
  if (!a.defined() || a.shape() != b.shape())
    return kInf;
  const double scale = max_abs(b);
  return max_abs_diff(a, b) / (scale > 0 ? scale : 1.0);
}

double exact_diff(const Tensor& a, const Tensor& b) {
  if (!a.defined() || a.shape() != b.shape())
    return kInf;
  return max_abs_diff(a, b);
}

// This rank's tokens of a [B, T, C] tensor, as a [N/tp, C] copy.
Tensor mine(const Tensor& full, const ProcessGroup& tp) {
  return my_tokens(full, tp.rank(), tp.size()).clone(MemTag::kOther);
}

// One comparison made on a rank, checked on the main thread.
struct Check {
  std::string what;
  double err;
  double tol;
};

void expect_checks(const std::vector<std::vector<Check>>& per_rank) {
  for (size_t r = 0; r < per_rank.size(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_FALSE(per_rank[r].empty());
    for (const Check& c : per_rank[r])
      EXPECT_LE(c.err, c.tol) << c.what;
  }
}

// Serial results every rank compares against.
struct Reference {
  std::vector<Tensor> outputs;  // per micro-batch (embedding y, head dx)
  std::map<std::string, Tensor> values, grads;
  LossStats stats;
};

void record_params(Module& m, Reference& ref) {
  for (Parameter* p : m.parameters()) {
    ref.values[p->name] = p->value.clone(MemTag::kOther);
    ref.grads[p->name] = p->grad.clone(MemTag::kOther);
  }
}

// Parameter values and gradients of a rank against the serial blocks.
void check_params(
    const std::vector<Parameter*>& params,
    const Reference& ref,
    double grad_tol,
    std::vector<Check>& out) {
  out.push_back(
      {"parameter count", params.size() == ref.grads.size() ? 0.0 : kInf, 0});
  for (Parameter* p : params) {
    auto v = ref.values.find(p->name);
    auto g = ref.grads.find(p->name);
    if (v == ref.values.end() || g == ref.grads.end()) {
      out.push_back({"unknown parameter " + p->name, kInf, 0});
      continue;
    }
    out.push_back(
        {p->name + " global shape",
         p->layout.global_shape == v->second.shape() ? 0.0 : kInf,
         0});
    if (p->layout.global_shape != v->second.shape())
      continue;
    out.push_back(
        {p->name + " value",
         exact_diff(p->value, p->layout.take_local(v->second)),
         0});
    out.push_back(
        {p->name + " grad",
         rel_diff(p->grad, p->layout.take_local(g->second)),
         grad_tol});
  }
}

// ---- embedding --------------------------------------------------------------

constexpr int kEmbedVocab = 64;
constexpr int kEmbedMicroBatches = 2;  // gradients accumulate over both

Reference serial_embedding(int max_tokens) {
  Reference ref;
  TokenEmbedding serial("embed", kEmbedVocab, max_tokens, kC, 0.5f);
  for (Parameter* p : serial.parameters())
    init_parameter(*p, kSeed);
  record_params(serial, ref);  // values (grads overwritten below)
  for (int mb = 0; mb < kEmbedMicroBatches; ++mb) {
    Context ctx;
    Tensor ids = random_ids(kEmbedVocab, kSeed, "ids" + std::to_string(mb));
    ref.outputs.push_back(serial.forward(ids, ctx).clone(MemTag::kOther));
    serial.backward(randn({kB, kT, kC}, kSeed, "dy" + std::to_string(mb)), ctx);
  }
  for (Parameter* p : serial.parameters())
    ref.grads[p->name] = p->grad.clone(MemTag::kOther);
  return ref;
}

void run_embedding_case(int tp_size, bool token_split, int max_tokens) {
  SCOPED_TRACE(
      "tp " + std::to_string(tp_size) + " token_split " +
      std::to_string(token_split) + " max_tokens " +
      std::to_string(max_tokens));
  const Reference ref = serial_embedding(max_tokens);
  std::vector<std::vector<Check>> checks(tp_size);
  run_local(tp_size, [&](ProcessGroup& tp) {
    std::vector<Check>& out = checks[tp.rank()];
    VocabParallelEmbedding par(
        "embed", kEmbedVocab, max_tokens, kC, 0.5f, tp, token_split);
    for (Parameter* p : par.parameters())
      init_parameter(*p, kSeed);
    const Parameter& tokens = *par.parameters().at(0);
    out.push_back(
        {"local token rows",
         tokens.value.dim(0) == kEmbedVocab / tp_size ? 0.0 : kInf,
         0});
    for (int mb = 0; mb < kEmbedMicroBatches; ++mb) {
      const std::string m = std::to_string(mb);
      Context ctx;
      Tensor ids = random_ids(kEmbedVocab, kSeed, "ids" + m);
      Tensor y = par.forward(ids, ctx);
      const Tensor& ys = ref.outputs[mb];
      out.push_back(
          {"output mb " + m,
           exact_diff(y, token_split ? mine(ys, tp) : ys),
           0});
      Tensor dy = randn({kB, kT, kC}, kSeed, "dy" + m);
      Tensor dx = par.backward(token_split ? mine(dy, tp) : dy, ctx);
      out.push_back({"no input grad", dx.defined() ? kInf : 0.0, 0});
    }
    check_params(par.parameters(), ref, 0.0, out);
  });
  expect_checks(checks);
}

TEST(VocabParallelEmbedding, MatchesTokenEmbeddingExactly) {
  for (int tp : {2, 4}) {
    for (bool split : {false, true}) {
      run_embedding_case(tp, split, kT);      // positions == T
      run_embedding_case(tp, split, kT + 4);  // positions > T (a prefix)
    }
  }
}

TEST(VocabParallelEmbedding, VocabularyMustSplitOverTp) {
  EXPECT_THROW(
      run_local(
          3,
          [](ProcessGroup& tp) {
            VocabParallelEmbedding par("embed", 64, kT, kC, 0.02f, tp, false);
          }),
      ConfigError);
}

// ---- LM head
// ------------------------------------------------------------------

constexpr int kHeadVocab = 256;
constexpr double kLossTol = 1e-6, kGradTol = 1e-5;

LmHeadOptions head_options() {
  LmHeadOptions o;
  o.name = "head";
  o.dim = kC;
  o.vocab = kHeadVocab;
  o.init_std = 0.3f;
  return o;
}

// init_parameter, then LayerNorm parameters moved off ones / zeros so
// their gradients are exercised; the same global values on every layout.
void init_head(LossHead& head) {
  std::vector<Parameter*> ps;
  head.collect_parameters(ps);
  for (Parameter* p : ps) {
    init_parameter(*p, kSeed);
    if (p->init.kind == Init::kNormal)
      continue;
    Tensor noise = p->layout.take_local(
        randn(p->layout.global_shape, kSeed, p->name + ".perturb", 0.5f));
    ops::add_(p->value, noise);
  }
}

// Targets: the serial argmax for even tokens (so `correct` is non-trivial),
// random ids for odd ones. The argmax comes from the serial parameters.
Tensor head_targets(
    const Tensor& x,
    const std::map<std::string, Tensor>& values,
    const std::string& name) {
  Tensor h({kN, kC}, MemTag::kOther), mean({kN}), rstd({kN});
  ops::layernorm_forward(
      h,
      mean,
      rstd,
      x.view({kN, kC}),
      values.at("head.ln.weight"),
      values.at("head.ln.bias"),
      1e-5f);
  Tensor logits({kN, kHeadVocab}, MemTag::kOther), none;
  ops::linear_forward(logits, h, values.at("head.out.weight"), none);
  Tensor t = random_ids(kHeadVocab, kSeed, name);
  for (int64_t n = 0; n < kN; n += 2) {
    const float* row = logits.data() + n * kHeadVocab;
    t.data_i32()[n] =
        static_cast<int32_t>(std::max_element(row, row + kHeadVocab) - row);
  }
  return t;
}

struct HeadInputs {
  std::vector<Tensor> x, targets;
};

Reference serial_head(int micro_batches, HeadInputs& in) {
  Reference ref;
  SerialBuilder builder;
  LmHead serial(head_options(), builder);
  init_head(serial);
  std::vector<Parameter*> ps;
  serial.collect_parameters(ps);
  for (Parameter* p : ps)
    ref.values[p->name] = p->value.clone(MemTag::kOther);
  const float scale = 1.0f / float(micro_batches * kN);
  for (int mb = 0; mb < micro_batches; ++mb) {
    const std::string m = std::to_string(mb);
    in.x.push_back(randn({kB, kT, kC}, kSeed, "x" + m));
    in.targets.push_back(head_targets(in.x.back(), ref.values, "t" + m));
    Context ctx;
    serial.forward(in.x.back(), in.targets.back(), ctx, ref.stats);
    ref.outputs.push_back(serial.backward(ctx, scale).clone(MemTag::kOther));
  }
  for (Parameter* p : ps)
    ref.grads[p->name] = p->grad.clone(MemTag::kOther);
  return ref;
}

void run_head_case(int tp_size, bool token_split, int micro_batches) {
  SCOPED_TRACE(
      "tp " + std::to_string(tp_size) + " token_split " +
      std::to_string(token_split) + " micro-batches " +
      std::to_string(micro_batches));
  HeadInputs in;
  const Reference ref = serial_head(micro_batches, in);
  ASSERT_GE(ref.stats.correct, kN / 2 * micro_batches);
  std::vector<std::vector<Check>> checks(tp_size);
  run_local(tp_size, [&](ProcessGroup& tp) {
    std::vector<Check>& out = checks[tp.rank()];
    VocabParallelLmHead par(head_options(), tp, token_split, kT);
    init_head(par);
    const float scale = 1.0f / float(micro_batches * kN);
    LossStats stats;
    for (int mb = 0; mb < micro_batches; ++mb) {
      const std::string m = std::to_string(mb);
      Context ctx;
      Tensor x = token_split ? mine(in.x[mb], tp) : in.x[mb];
      par.forward(x, in.targets[mb], ctx, stats);
      // No [N, V] tensor is kept: the probabilities are [N, V/tp].
      double widest = 0;
      for (const Tensor& t : ctx.saved)
        widest = std::max(widest, double(t.numel()));
      out.push_back(
          {"largest saved tensor / (N V / tp) mb " + m,
           widest / (double(kN) * kHeadVocab / tp_size),
           1.0});
      Tensor dx = par.backward(ctx, scale);
      const Tensor& dxs = ref.outputs[mb];
      out.push_back(
          {"input grad mb " + m,
           rel_diff(dx, token_split ? mine(dxs, tp) : dxs),
           kGradTol});
    }
    out.push_back(
        {"loss_sum",
         std::fabs(stats.loss_sum - ref.stats.loss_sum) /
             std::fabs(ref.stats.loss_sum),
         kLossTol});
    out.push_back(
        {"count", std::fabs(double(stats.count - ref.stats.count)), 0});
    out.push_back(
        {"correct", std::fabs(double(stats.correct - ref.stats.correct)), 0});
    std::vector<Parameter*> ps;
    par.collect_parameters(ps);
    check_params(ps, ref, kGradTol, out);
  });
  expect_checks(checks);
}

TEST(VocabParallelLmHead, MatchesLmHead) {
  for (int tp : {2, 4}) {
    for (bool split : {false, true}) {
      run_head_case(tp, split, 1);
      run_head_case(tp, split, 2);  // gradients accumulate over two
    }
  }
}

}  // namespace
}  // namespace ndt
