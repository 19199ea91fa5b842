// Per-tensor norms from Layout (optim/layer_norms.h): axis-set grouping,
// the serial path, and sharded blocks on threads (thread_mesh.h) against
// the norms of the whole tensors. Tolerance: 1e-12 relative (double sums
// in a different order).
#include <gtest/gtest.h>

#include <cmath>

#include "base/error.h"
#include "ops/ops.h"
#include "optim/layer_norms.h"
#include "test_util.h"
#include "thread_mesh.h"

namespace ndt {
namespace {

using test::replicate;
using test::shard;

Parameter make_param(
    const std::string& name, Shape global, std::vector<Placement> placements) {
  Layout layout{std::move(global), std::move(placements)};
  Parameter p(name, layout.local_shape(), true, {});
  p.layout = layout;
  p.value.fill_(1.0f);
  return p;
}

TEST(LayerNorms, ShardedAxesIgnoreReplicasAndWholeShards) {
  Layout l{
      {8, 12},
      {shard("tp", 0, 2, 1),
       replicate("sp"),
       shard("dp", 1, 2, 0),
       shard("pp", 1, 1, 0)}};
  EXPECT_EQ(sharded_axes(l), (std::vector<std::string>{"dp", "tp"}));
  EXPECT_TRUE(sharded_axes(Layout::full({4})).empty());
  EXPECT_TRUE(sharded_axes(Layout{{4}, {replicate("tp")}}).empty());
}

// One call per distinct axis set, sets in sorted order, members in
// parameter order with k values each; replicated/whole params untouched.
TEST(LayerNorms, ReducerGroupsByAxisSet) {
  Parameter a = make_param("a", {4, 6}, {shard("tp", 0, 2, 0)});
  Parameter b = make_param("b", {4, 6}, {replicate("tp")});
  Parameter c =
      make_param("c", {4, 6}, {shard("tp", 0, 2, 1), shard("dp", 1, 2, 0)});
  Parameter d = make_param("d", {4, 6}, {shard("tp", 1, 2, 0)});
  Parameter e =
      make_param("e", {4, 6}, {shard("dp", 1, 3, 0), shard("tp", 0, 2, 1)});
  std::vector<std::vector<std::string>> seen_axes;
  std::vector<std::vector<double>> seen_data;
  AxisSumFn times_two =
      [&](const std::vector<std::string>& axes, double* data, int64_t n) {
        seen_axes.push_back(axes);
        seen_data.emplace_back(data, data + n);
        for (int64_t i = 0; i < n; ++i)
          data[i] *= 2;
      };
  PerTensorReducer r({&a, &b, &c, &d, &e}, times_two);
  EXPECT_EQ(r.num_groups(), 2u);
  std::vector<double> v = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  r.reduce(v.data(), 2);
  ASSERT_EQ(seen_axes.size(), 2u);
  EXPECT_EQ(seen_axes[0], (std::vector<std::string>{"dp", "tp"}));
  EXPECT_EQ(seen_data[0], (std::vector<double>{5, 6, 9, 10}));
  EXPECT_EQ(seen_axes[1], (std::vector<std::string>{"tp"}));
  EXPECT_EQ(seen_data[1], (std::vector<double>{1, 2, 7, 8}));
  EXPECT_EQ(v, (std::vector<double>{2, 4, 3, 4, 10, 12, 14, 16, 18, 20}));
}

TEST(LayerNorms, SerialNeverCallsSum) {
  Parameter a("a", {3, 4}, true, {});
  Parameter b("b", {5}, false, {});
  for (int i = 0; i < 12; ++i)
    a.value.data()[i] = 0.5f * i;
  for (int i = 0; i < 5; ++i)
    b.value.data()[i] = -1.0f * i;
  int calls = 0;
  AxisSumFn count = [&](const std::vector<std::string>&, double*, int64_t) {
    ++calls;
  };
  std::vector<double> n2 =
      layer_norms_squared({&a, &b}, {&a.value, &b.value}, count);
  EXPECT_EQ(calls, 0);
  EXPECT_DOUBLE_EQ(n2[0], 0.25 * 506);  // 0.25 * sum i^2, i < 12
  EXPECT_DOUBLE_EQ(n2[1], 30.0);
  // nullptr is the serial AxisSumFn.
  EXPECT_EQ(layer_norms_squared({&a}, {&a.value}, nullptr)[0], n2[0]);
}

TEST(LayerNorms, ShardedWithoutSumFnIsABug) {
  Parameter a = make_param("a", {4, 6}, {shard("tp", 0, 2, 0)});
  EXPECT_THROW(layer_norms_squared({&a}, {&a.value}, nullptr), Error);
  EXPECT_THROW(PerTensorReducer({&a}, nullptr), Error);
  // Replicated only: no sum needed.
  Parameter b = make_param("b", {4, 6}, {replicate("tp")});
  EXPECT_NO_THROW(layer_norms_squared({&b}, {&b.value}, nullptr));
}

// Each rank's layer_norms_squared of its blocks equals ||whole||^2, for
// values and grads; the tp-replicated "ln" is not multiplied by tp.
void check_sharded_norms(int tp, int dp) {
  test::ThreadMesh mesh({"tp", "dp"}, {tp, dp});
  std::vector<test::ShardSpec> specs = test::sharded_specs(mesh, 0);
  std::vector<double> want_v, want_g;
  for (const test::ShardSpec& s : specs) {
    want_v.push_back(ops::sum_squares(test::global_value(s)));
    want_g.push_back(ops::sum_squares(test::global_grad(s, 0)));
  }
  std::vector<std::vector<double>> got_v(mesh.size()), got_g(mesh.size());
  mesh.run([&](int rank) {
    auto specs_r = test::sharded_specs(mesh, rank);
    auto owned = test::make_sharded_params(specs_r);
    std::vector<Parameter*> params;
    std::vector<const Tensor*> values, grads;
    for (size_t i = 0; i < owned.size(); ++i) {
      Parameter* p = owned[i].get();
      p->grad.copy_(
          test::local_block(test::global_grad(specs_r[i], 0), p->layout));
      params.push_back(p);
      values.push_back(&p->value);
      grads.push_back(&p->grad);
    }
    AxisSumFn sum = mesh.sum_fn(rank);
    got_v[rank] = layer_norms_squared(params, values, sum);
    got_g[rank] = layer_norms_squared(params, grads, sum);
  });
  for (int r = 0; r < mesh.size(); ++r) {
    // Two axis sets ({tp}, {dp, tp}), one call each per quantity.
    EXPECT_EQ(mesh.calls(r), dp > 1 ? 4 : 2) << "rank " << r;
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_NEAR(got_v[r][i], want_v[i], 1e-12 * want_v[i])
          << specs[i].name << " rank " << r << " tp " << tp << " dp " << dp;
      EXPECT_NEAR(got_g[r][i], want_g[i], 1e-12 * want_g[i])
          << specs[i].name << " rank " << r << " tp " << tp << " dp " << dp;
    }
  }
}

TEST(LayerNorms, ShardedMatchesWholeTensor) {
  check_sharded_norms(2, 1);
  check_sharded_norms(2, 2);
  check_sharded_norms(4, 2);
}

}  // namespace
}  // namespace ndt
