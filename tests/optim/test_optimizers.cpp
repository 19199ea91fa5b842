// Optimizers against torch.optim (fixture written by
// tests/fixtures/make_optim_fixtures.py), LR schedules, gradient clipping
// and exact state round trips.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "base/error.h"
#include "ops/ops.h"
#include "optim/adamw.h"
#include "optim/grad_norm.h"
#include "optim/lr_scaling.h"
#include "optim/lr_schedule.h"
#include "optim/sgd.h"
#include "test_util.h"

namespace ndt {
namespace {

constexpr int kN = 10;
constexpr int kSteps = 4;

double p0(int which, int i) {
  return std::sin(1.3 * i + which) * 0.5;
}
double grad_at(int which, int t, int i) {
  return std::cos(0.7 * i + 1.1 * t + which) * (0.3 + 0.1 * which);
}

struct Params {
  Parameter a{"a", {kN}, true, {}};
  Parameter b{"b", {kN}, false, {}};
  std::vector<Parameter*> list() {
    return {&a, &b};
  }
  Params() {
    for (int i = 0; i < kN; ++i) {
      a.value.data()[i] = static_cast<float>(p0(0, i));
      b.value.data()[i] = static_cast<float>(p0(1, i));
    }
  }
  void set_grads(int t) {
    for (int i = 0; i < kN; ++i) {
      a.grad.data()[i] = static_cast<float>(grad_at(0, t, i));
      b.grad.data()[i] = static_cast<float>(grad_at(1, t, i));
    }
  }
};

std::map<std::string, std::vector<std::vector<float>>> reference() {
  std::ifstream f(test::source_path("tests/fixtures/optim_reference.txt"));
  EXPECT_TRUE(f.good());
  std::map<std::string, std::vector<std::vector<float>>> out;
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream is(line);
    std::string name;
    int which, n;
    is >> name >> which >> n;
    std::vector<float> v(n);
    for (float& x : v)
      is >> x;
    out[name].push_back(v);
  }
  return out;
}

// fp32 against torch's fp32: same formulas, different operation order;
// 4 steps stay within 2e-6 absolute.
void expect_matches(
    const std::string& name, Optimizer& opt, Params& ps, float lr) {
  for (int t = 0; t < kSteps; ++t) {
    ps.set_grads(t);
    opt.step(lr);
  }
  auto ref = reference().at(name);
  ASSERT_EQ(ref.size(), 2u);
  for (int i = 0; i < kN; ++i) {
    EXPECT_NEAR(ps.a.value.data()[i], ref[0][i], 2e-6) << name << " a " << i;
    EXPECT_NEAR(ps.b.value.data()[i], ref[1][i], 2e-6) << name << " b " << i;
  }
}

TEST(Optimizers, SgdMatchesTorch) {
  {
    Params ps;
    Sgd opt(ps.list(), {0.0f, false, 0.0f});
    expect_matches("sgd_plain", opt, ps, 0.1f);
  }
  {
    Params ps;
    Sgd opt(ps.list(), {0.9f, false, 0.05f});
    expect_matches("sgd_momentum_wd", opt, ps, 0.1f);
  }
  {
    Params ps;
    Sgd opt(ps.list(), {0.8f, true, 0.05f});
    expect_matches("sgd_nesterov_wd", opt, ps, 0.1f);
  }
}

TEST(Optimizers, AdamWMatchesTorch) {
  {
    Params ps;
    AdamW opt(ps.list(), {0.9f, 0.999f, 1e-8f, 0.1f});
    expect_matches("adamw", opt, ps, 0.01f);
  }
  {
    Params ps;
    AdamW opt(ps.list(), {0.8f, 0.95f, 1e-6f, 0.3f});
    expect_matches("adamw_betas", opt, ps, 0.02f);
  }
}

// exact: saving and loading state changes no arithmetic.
TEST(Optimizers, StateRoundTripIsExact) {
  Params a, b;
  AdamW oa(a.list(), {});
  AdamW ob(b.list(), {});
  for (int t = 0; t < 2; ++t) {
    a.set_grads(t);
    oa.step(0.01f);
  }
  NamedState st;
  for (auto& [n, t] : oa.state())
    st.emplace_back(n, t.clone(MemTag::kOther));
  b.a.value.copy_(a.a.value);
  b.b.value.copy_(a.b.value);
  ob.load_state(st, oa.step_count());
  for (int t = 2; t < 4; ++t) {
    a.set_grads(t);
    b.set_grads(t);
    oa.step(0.01f);
    ob.step(0.01f);
  }
  EXPECT_EQ(test::max_abs_diff(a.a.value, b.a.value), 0.0);
  EXPECT_EQ(test::max_abs_diff(a.b.value, b.b.value), 0.0);
  EXPECT_EQ(oa.state().size(), 4u);
  EXPECT_EQ(oa.state()[0].first, "a.exp_avg");
}

// step_with_grad_squares is step plus each grad's sum of squares (AdamW
// sums in its update's pass, SGD through the default, a pass of its own
// first): values and state stay bitwise equal to step's, and the sums
// equal the grads' squares summed in double (relative 1e-12: only the
// order differs). Sizes cover one chunk, several chunks with a ragged
// tail, and 1-2 threads.
TEST(Optimizers, StepWithGradSquaresEqualsStep) {
  const int before = ops::num_threads();
  for (int threads : {1, 2}) {
    ops::set_num_threads(threads);
    for (int64_t n : {int64_t{37}, int64_t{300007}}) {
      auto make = [n](const char* name, int which) {
        auto p =
            std::make_unique<Parameter>(name, Shape{n}, which == 0, InitSpec{});
        for (int64_t i = 0; i < n; ++i)
          p->value.data()[i] = static_cast<float>(p0(which, int(i % 997)));
        return p;
      };
      auto a1 = make("a", 0), b1 = make("b", 1);
      auto a2 = make("a", 0), b2 = make("b", 1);
      std::vector<Parameter*> l1{a1.get(), b1.get()}, l2{a2.get(), b2.get()};
      AdamW o1(l1, {}), o2(l2, {});
      Sgd s1(l1, {0.9f, false, 0.05f}), s2(l2, {0.9f, false, 0.05f});
      for (int t = 0; t < 3; ++t) {
        for (int k = 0; k < 2; ++k) {
          for (int64_t i = 0; i < n; ++i) {
            const float g = float(grad_at(k, t, int(i % 1009))) *
                            (1.0f + float(i % 7) * 0.25f);
            l1[k]->grad.data()[i] = g;
            l2[k]->grad.data()[i] = g;
          }
        }
        std::vector<double> want;
        for (Parameter* p : l1) {
          double s = 0;
          for (int64_t i = 0; i < n; ++i)
            s += double(p->grad.data()[i]) * p->grad.data()[i];
          want.push_back(s);
        }
        std::vector<double> got;
        Optimizer& fused = t % 2 == 0 ? static_cast<Optimizer&>(o2) : s2;
        (t % 2 == 0 ? static_cast<Optimizer&>(o1) : s1).step(0.01f);
        fused.step_with_grad_squares(0.01f, got);
        ASSERT_EQ(got.size(), 2u);
        for (int k = 0; k < 2; ++k) {
          EXPECT_NEAR(got[k], want[k], 1e-12 * want[k])
              << "threads " << threads << " n " << n << " t " << t;
          EXPECT_EQ(test::max_abs_diff(l1[k]->value, l2[k]->value), 0.0)
              << "threads " << threads << " n " << n << " t " << t;
        }
      }
      for (size_t q = 0; q < o1.state().size(); ++q) {
        EXPECT_EQ(
            test::max_abs_diff(o1.state()[q].second, o2.state()[q].second),
            0.0);
      }
    }
  }
  ops::set_num_threads(before);
}

TEST(Optimizers, LoadStateRejectsWrongShapes) {
  Params a;
  AdamW opt(a.list(), {});
  NamedState st = opt.state();
  st[1].second = Tensor::zeros({3});
  EXPECT_THROW(opt.load_state(st, 1), CheckpointError);
  st.pop_back();
  EXPECT_THROW(opt.load_state(st, 1), CheckpointError);
}

TEST(LrSchedule, WarmupThenDecays) {
  LrScheduleOptions o;
  o.lr = 1.0f;
  o.warmup = 10;
  o.total = 110;
  o.min_ratio = 0.1f;
  o.decay = LrDecay::kCosine;
  EXPECT_FLOAT_EQ(lr_at(o, 0), 0.1f);
  EXPECT_FLOAT_EQ(lr_at(o, 9), 1.0f);
  EXPECT_FLOAT_EQ(lr_at(o, 10), 1.0f);
  EXPECT_NEAR(lr_at(o, 60), 0.55f, 1e-6);
  EXPECT_NEAR(lr_at(o, 110), 0.1f, 1e-6);
  o.decay = LrDecay::kLinear;
  EXPECT_NEAR(lr_at(o, 60), 0.55f, 1e-6);
  o.decay = LrDecay::kPolynomial;
  o.power = 2;
  EXPECT_NEAR(lr_at(o, 60), 0.1f + 0.9f * 0.25f, 1e-6);
  o.decay = LrDecay::kConstant;
  EXPECT_FLOAT_EQ(lr_at(o, 100), 1.0f);
}

TEST(LrScaling, FollowsTheBatchRatio) {
  EXPECT_FLOAT_EQ(scaled_lr(0.1f, LrScaling::kNone, 1024, 128), 0.1f);
  EXPECT_FLOAT_EQ(scaled_lr(0.1f, LrScaling::kLinear, 1024, 128), 0.8f);
  EXPECT_FLOAT_EQ(
      scaled_lr(0.1f, LrScaling::kSqrt, 1024, 128),
      static_cast<float>(0.1 * std::sqrt(8.0)));
  EXPECT_FLOAT_EQ(scaled_lr(0.1f, LrScaling::kLinear, 64, 128), 0.05f);
  EXPECT_FLOAT_EQ(scaled_lr(0.1f, LrScaling::kSqrt, 32, 128), 0.05f);
}

TEST(GradNorm, ClipScalesToMaxNorm) {
  Params ps;
  ps.set_grads(0);
  double sq = 0;
  for (Parameter* p : ps.list()) {
    for (int i = 0; i < kN; ++i)
      sq += double(p->grad.data()[i]) * p->grad.data()[i];
  }
  EXPECT_NEAR(grad_norm(ps.list()), std::sqrt(sq), 1e-9);
  double before = clip_grad_norm(ps.list(), 0.5);
  EXPECT_NEAR(before, std::sqrt(sq), 1e-9);
  EXPECT_NEAR(grad_norm(ps.list()), 0.5, 1e-5);
  // Below the limit: untouched.
  EXPECT_NEAR(clip_grad_norm(ps.list(), 10.0), 0.5, 1e-5);
  EXPECT_NEAR(grad_norm(ps.list()), 0.5, 1e-5);
}

}  // namespace
}  // namespace ndt
