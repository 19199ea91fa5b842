// 1D tensor-parallel dense layers (tp1d_linear.h, tp1d_norm.h) against the
// serial layers, master-vs-shard (CONVENTIONS.md 5): run_local(tp) gives
// every rank a thread and a real ProcessGroup; each rank builds the serial
// layer and its parallel shard with the same names and seed, checks that
// init drew the serial values for its block, runs both on the same random
// input and output gradient (x [B=2, T=4, C]), and compares its part of the
// output, of the input gradient and of every parameter gradient. Token
// split: the rank's input and output are its tokens (regions.h).
//
// Tolerances, max |a - b| / max |b| per tensor:
//   0      parameter values after init; per-token layers (LayerNorm
//          output and dx, dropout): the same kernel on the same rows.
//   1e-6   (kShardTol) no reduction order changes: column-parallel outputs,
//          row-parallel dx, every weight gradient (a shard sums over the
//          same tokens in the same order). Only a GEMM blocked differently
//          for a narrower matrix could differ, by an ulp.
//   1e-5   (kSumTol) the sum over tp replaces a serial sum: row-parallel
//          outputs (partial products added across ranks), column-parallel
//          dx (all-reduce / reduce-scatter of partials), gradients of
//          replicated parameters under token split (row bias, LayerNorm).
// A wrong shard, region or offset is O(1) in these relative terms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "comm/local_process_group.h"
#include "nn/dropout.h"
#include "nn/layernorm.h"
#include "nn/linear.h"
#include "ops/ops.h"
#include "parallel/group_grad_sum.h"
#include "parallel/regions.h"
#include "parallel/tp1d_linear.h"
#include "parallel/tp1d_norm.h"
#include "test_util.h"

namespace ndt {
namespace {

using test::randn;
using test::rel_diff;

constexpr double kShardTol = 1e-6;
constexpr double kSumTol = 1e-5;
constexpr uint64_t kSeed = 11;
constexpr int64_t kB = 2, kT = 4, kC = 8;
constexpr int kHidden = 24;  // divisible by 3 blocks x 4 ranks
constexpr float kStd = 0.3f;

struct Check {
  std::string what;
  double diff;
  double tol;
};

// One list per rank: each thread appends only to its own.
class Checks {
 public:
  explicit Checks(int ranks) : per_rank_(ranks) {}
  void add(int rank, std::string what, double diff, double tol) {
    per_rank_.at(rank).push_back({std::move(what), diff, tol});
  }
  void expect_all(const std::string& label) const {
    const bool verbose = std::getenv("NDT_TP1D_VERBOSE") != nullptr;
    for (size_t r = 0; r < per_rank_.size(); ++r) {
      for (const Check& c : per_rank_[r]) {
        EXPECT_LE(c.diff, c.tol)
            << label << " rank " << r << ": " << c.what << " differs by "
            << c.diff << " (tolerance " << c.tol << ")";
        if (verbose && r == 0)
          std::printf("%s: %s %.3g\n", label.c_str(), c.what.c_str(), c.diff);
      }
    }
  }

 private:
  std::vector<std::vector<Check>> per_rank_;
};

// Serial init; non-normal parameters (biases, LayerNorm) get a perturbation
// so that a bias added twice or a wrong norm gradient shows. The
// perturbation is drawn globally and sliced with the layout, like init.
void init_module(Module& m) {
  for (Parameter* p : m.parameters())
    init_parameter(*p, kSeed);
}
void perturb_module(Module& m) {
  for (Parameter* p : m.parameters()) {
    if (p->init.kind == Init::kNormal)
      continue;
    Tensor g = randn(p->layout.global_shape, kSeed, p->name + ".perturb", 0.5f);
    ops::add_(p->value, p->layout.take_local(g));
  }
}

std::map<std::string, Parameter*> by_name(Module& m) {
  std::map<std::string, Parameter*> out;
  for (Parameter* p : m.parameters())
    out[p->name] = p;
  return out;
}

// Every parameter of `par` against the serial block: values or grads.
void check_params(
    Checks& checks,
    int rank,
    Module& par,
    Module& ser,
    bool grads,
    double tol,
    const std::map<std::string, double>& tol_of = {}) {
  std::map<std::string, Parameter*> serial = by_name(ser);
  std::vector<Parameter*> params = par.parameters();
  checks.add(
      rank,
      "parameter count",
      params.size() == serial.size() ? 0 : INFINITY,
      0);
  for (Parameter* p : params) {
    auto it = serial.find(p->name);
    if (it == serial.end()) {
      checks.add(rank, p->name + " missing in serial", INFINITY, 0);
      continue;
    }
    const Parameter& s = *it->second;
    checks.add(
        rank,
        p->name + " global shape",
        p->layout.global_shape == s.value.shape() ? 0 : INFINITY,
        0);
    const Tensor& mine = grads ? p->grad : p->value;
    Tensor want = p->layout.take_local(grads ? s.grad : s.value);
    auto t = tol_of.find(p->name);
    checks.add(
        rank,
        p->name + (grads ? " grad" : " value"),
        rel_diff(mine, want),
        grads ? (t == tol_of.end() ? tol : t->second) : 0);
  }
}

// full [.., OC] -> [.., cols.size()] with column j = full's column cols[j].
Tensor columns(const Tensor& full, const std::vector<int64_t>& cols) {
  const int64_t OC = full.dim(-1);
  const int64_t N = full.numel() / OC;
  const int64_t n = static_cast<int64_t>(cols.size());
  Shape s = full.shape();
  s.back() = n;
  Tensor out(s, MemTag::kOther);
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t j = 0; j < n; ++j)
      out.data()[i * n + j] = full.data()[i * OC + cols[j]];
  }
  return out;
}

// A copy of my tokens [N/tp, C] of a [B, T, C] tensor.
Tensor tokens_of(const Tensor& full, int rank, int tp) {
  return my_tokens(full, rank, tp).clone(MemTag::kOther);
}

struct Pass {
  Tensor y;
  Tensor dx;
};

Pass run_pass(
    Module& m,
    const Tensor& x,
    const Tensor& dy,
    const RunState& run = RunState()) {
  Context ctx;
  ctx.run = run;
  Pass p;
  p.y = m.forward(x, ctx).clone(MemTag::kOther);
  p.dx = m.backward(dy, ctx);
  return p;
}

std::string label_of(const char* what, int tp, bool token_split) {
  return std::string(what) + " tp=" + std::to_string(tp) +
         (token_split ? " token_split" : " replicated");
}

void column_case(int tp, bool token_split, int blocks, Act act) {
  const std::string label = label_of("column", tp, token_split) +
                            " blocks=" + std::to_string(blocks) +
                            " act=" + std::to_string(static_cast<int>(act));
  SCOPED_TRACE(label);
  const Tensor x = randn({kB, kT, kC}, 1, "x");
  const Tensor dy = randn({kB, kT, kHidden}, 2, "dy");
  Checks checks(tp);
  std::vector<int> skipped_dx(tp, 0);
  run_local(tp, [&](ProcessGroup& pg) {
    const int r = pg.rank();
    Linear ser("fc", kC, kHidden, true, act, kStd);
    ColumnLinear1d par(
        "fc", kC, kHidden, true, act, kStd, pg, token_split, kT, blocks);
    init_module(ser);
    init_module(par);
    check_params(checks, r, par, ser, false, 0);
    perturb_module(ser);
    perturb_module(par);
    const Pass s = run_pass(ser, x, dy);
    // My output columns: for blocks = 3, my heads' rows of q, k and v.
    const std::vector<int64_t> cols = par.weight().layout.global_coords(0);
    const Tensor x_in = token_split ? tokens_of(x, r, tp) : x;
    const Pass p = run_pass(par, x_in, columns(dy, cols));
    checks.add(r, "y", rel_diff(p.y, columns(s.y, cols)), kShardTol);
    checks.add(
        r,
        "dx",
        rel_diff(p.dx, token_split ? tokens_of(s.dx, r, tp) : s.dx),
        kSumTol);
    check_params(checks, r, par, ser, true, kShardTol);
    // The first layer skips dx (and its collective) on every rank.
    Context c;
    c.need_input_grad = false;
    par.forward(x_in, c);
    skipped_dx[r] = !par.backward(columns(dy, cols), c).defined();
  });
  checks.expect_all(label);
  for (int r = 0; r < tp; ++r)
    EXPECT_TRUE(skipped_dx[r]) << "rank " << r;
}

TEST(Tp1dLinear, ColumnMatchesSerial) {
  for (int tp : {2, 4}) {
    for (bool token_split : {false, true}) {
      for (int blocks : {1, 3}) {
        for (Act act : {Act::kNone, Act::kGelu})
          column_case(tp, token_split, blocks, act);
      }
    }
  }
}

// exact: the blocked layout puts my heads' q, k and v rows in order.
TEST(Tp1dLinear, ColumnBlockedShardHoldsMyHeadsOfQkv) {
  run_local(2, [&](ProcessGroup& pg) {
    // [3C, C] with C = 8: each of q, k, v is 8 rows, 4 per rank.
    ColumnLinear1d qkv("qkv", 8, 24, true, Act::kNone, kStd, pg, false, kT, 3);
    const int64_t o = 4 * pg.rank();
    const std::vector<int64_t> want = {
        o,
        o + 1,
        o + 2,
        o + 3,
        8 + o,
        9 + o,
        10 + o,
        11 + o,
        16 + o,
        17 + o,
        18 + o,
        19 + o};
    if (qkv.weight().layout.global_coords(0) != want)
      throw Error("wrong q/k/v rows on rank " + std::to_string(pg.rank()));
    if (qkv.weight().value.shape() != Shape({12, 8}))
      throw Error("wrong local weight shape");
  });
}

void row_case(int tp, bool token_split) {
  const std::string label = label_of("row", tp, token_split);
  SCOPED_TRACE(label);
  const Tensor x = randn({kB, kT, kHidden}, 3, "h");
  const Tensor dy = randn({kB, kT, kC}, 4, "dy");
  Checks checks(tp);
  run_local(tp, [&](ProcessGroup& pg) {
    const int r = pg.rank();
    Linear ser("fc2", kHidden, kC, true, Act::kNone, kStd);
    RowLinear1d par("fc2", kHidden, kC, true, kStd, pg, token_split);
    init_module(ser);
    init_module(par);
    check_params(checks, r, par, ser, false, 0);
    perturb_module(ser);
    perturb_module(par);
    const Pass s = run_pass(ser, x, dy);
    const std::vector<int64_t> cols = par.weight().layout.global_coords(1);
    const Pass p = run_pass(
        par, columns(x, cols), token_split ? tokens_of(dy, r, tp) : dy);
    checks.add(
        r,
        "y",
        rel_diff(p.y, token_split ? tokens_of(s.y, r, tp) : s.y),
        kSumTol);
    checks.add(r, "dx", rel_diff(p.dx, columns(s.dx, cols)), kShardTol);
    check_params(
        checks,
        r,
        par,
        ser,
        true,
        kShardTol,
        {{"fc2.bias", token_split ? kSumTol : kShardTol}});
  });
  checks.expect_all(label);
}

TEST(Tp1dLinear, RowMatchesSerial) {
  for (int tp : {2, 4}) {
    for (bool token_split : {false, true})
      row_case(tp, token_split);
  }
}

// A Megatron MLP: fc1 column-parallel with GELU, fc2 row-parallel; two
// micro-batches accumulate into the same grads, as in the serial run.
void mlp_case(int tp, bool token_split, int micro_batches) {
  const std::string label = label_of("mlp", tp, token_split);
  SCOPED_TRACE(label);
  std::vector<Tensor> xs, dys;
  for (int m = 0; m < micro_batches; ++m) {
    xs.push_back(randn({kB, kT, kC}, 5 + 100 * m, "x"));
    dys.push_back(randn({kB, kT, kC}, 6 + 100 * m, "dy"));
  }
  Checks checks(tp);
  run_local(tp, [&](ProcessGroup& pg) {
    const int r = pg.rank();
    Linear ser1("fc1", kC, kHidden, true, Act::kGelu, kStd);
    Linear ser2("fc2", kHidden, kC, true, Act::kNone, kStd);
    ColumnLinear1d par1(
        "fc1", kC, kHidden, true, Act::kGelu, kStd, pg, token_split, kT);
    RowLinear1d par2("fc2", kHidden, kC, true, kStd, pg, token_split);
    for (Module* m : std::vector<Module*>{&ser1, &ser2, &par1, &par2}) {
      init_module(*m);
      perturb_module(*m);
    }
    for (int m = 0; m < micro_batches; ++m) {
      const std::string mb = std::string(" mb").append(std::to_string(m));
      Context s1, s2, p1, p2;
      const Tensor sy = ser2.forward(ser1.forward(xs[m], s1), s2);
      const Tensor sdx = ser1.backward(ser2.backward(dys[m], s2), s1);
      const Tensor x_in = token_split ? tokens_of(xs[m], r, tp) : xs[m];
      const Tensor dy_in = token_split ? tokens_of(dys[m], r, tp) : dys[m];
      const Tensor py = par2.forward(par1.forward(x_in, p1), p2);
      checks.add(
          r,
          "y" + mb,
          rel_diff(py, token_split ? tokens_of(sy, r, tp) : sy),
          kSumTol);
      const Tensor pdx = par1.backward(par2.backward(dy_in, p2), p1);
      checks.add(
          r,
          "dx" + mb,
          rel_diff(pdx, token_split ? tokens_of(sdx, r, tp) : sdx),
          kSumTol);
    }
    const std::map<std::string, double> tol_of = {
        {"fc2.bias", token_split ? kSumTol : kShardTol}};
    check_params(checks, r, par1, ser1, true, kShardTol);
    check_params(checks, r, par2, ser2, true, kShardTol, tol_of);
  });
  checks.expect_all(label);
}

TEST(Tp1dLinear, MegatronMlpPairMatchesSerialOverTwoMicroBatches) {
  for (int tp : {2, 4}) {
    for (bool token_split : {false, true})
      mlp_case(tp, token_split, 2);
  }
}

// LayerNorm on my tokens; its replicated weight and bias gradients are
// summed over tp per backward call, and accumulate over micro-batches.
TEST(Tp1dNorm, LayerNormGradSumUnderTokenSplit) {
  for (int tp : {2, 4}) {
    const std::string label = label_of("layernorm", tp, true);
    SCOPED_TRACE(label);
    std::vector<Tensor> xs, dys;
    for (int m = 0; m < 2; ++m) {
      xs.push_back(randn({kB, kT, kC}, 7 + 100 * m, "x"));
      dys.push_back(randn({kB, kT, kC}, 8 + 100 * m, "dy"));
    }
    Checks checks(tp);
    run_local(tp, [&](ProcessGroup& pg) {
      const int r = pg.rank();
      LayerNorm ser("ln", kC);
      GroupGradSum par(std::make_unique<LayerNorm>("ln", kC), pg, Fault::kNone);
      init_module(ser);
      init_module(par);
      check_params(checks, r, par, ser, false, 0);
      perturb_module(ser);
      perturb_module(par);
      for (int m = 0; m < 2; ++m) {
        const std::string mb = std::string(" mb").append(std::to_string(m));
        const Pass s = run_pass(ser, xs[m], dys[m]);
        const Pass p =
            run_pass(par, tokens_of(xs[m], r, tp), tokens_of(dys[m], r, tp));
        checks.add(r, "y" + mb, rel_diff(p.y, tokens_of(s.y, r, tp)), 0);
        checks.add(r, "dx" + mb, rel_diff(p.dx, tokens_of(s.dx, r, tp)), 0);
      }
      check_params(checks, r, par, ser, true, kSumTol);
    });
    checks.expect_all(label);
  }
}

// exact: my tokens' mask is the serial mask on those elements, also for a
// micro-batch that does not start at sample 0.
TEST(Tp1dNorm, TokenSplitDropoutMaskEqualsSerial) {
  const Tensor x = randn({kB, kT, kC}, 9, "x");
  const Tensor dy = randn({kB, kT, kC}, 10, "dy");
  RunState run;
  run.training = true;
  run.seed = 3;
  run.step = 5;
  run.sample_offset = 6;
  Dropout ser("blocks.0.drop", 0.1f);
  const Pass s = run_pass(ser, x, dy, run);
  int64_t dropped = 0;
  for (int64_t i = 0; i < s.y.numel(); ++i)
    dropped += s.y.data()[i] == 0.0f;
  EXPECT_GT(dropped, 0) << "the serial mask drops nothing: test is vacuous";
  for (int tp : {2, 4}) {
    const std::string label = label_of("dropout", tp, true);
    SCOPED_TRACE(label);
    Checks checks(tp);
    run_local(tp, [&](ProcessGroup& pg) {
      const int r = pg.rank();
      TokenSplitDropout par("blocks.0.drop", 0.1f, pg, kT);
      const Pass p =
          run_pass(par, tokens_of(x, r, tp), tokens_of(dy, r, tp), run);
      checks.add(r, "y", rel_diff(p.y, tokens_of(s.y, r, tp)), 0);
      checks.add(r, "dx", rel_diff(p.dx, tokens_of(s.dx, r, tp)), 0);
      RunState eval = run;
      eval.training = false;
      const Tensor mine = tokens_of(x, r, tp);
      const Pass e = run_pass(par, mine, mine, eval);
      checks.add(r, "eval identity", rel_diff(e.y, mine), 0);
    });
    checks.expect_all(label);
  }
}

}  // namespace
}  // namespace ndt
