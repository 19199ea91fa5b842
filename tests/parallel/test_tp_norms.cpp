// Norms under tensor parallelism equal the serial norms: the global
// gradient norm used for clipping (each tp-sharded parameter summed over
// the tp group, each replicated one counted once) and LAMB's per-tensor
// trust ratios, for a GPT built by Tp1dBuilder at tp 2 and 4, with and
// without sequence-split regions, against the same GPT built serially.
//
// Both runs see the same batch and the same parameter values (counter-RNG
// init), so the gradients agree up to fp32 summation order (row-parallel
// layers add partial products in a different order): tolerance relative
// 1e-6 on the norm and on every trust ratio. Counting a replicated
// parameter tp times, or a shard once, is off by a factor of order 1.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "comm/local_process_group.h"
#include "nn/model.h"
#include "optim/grad_norm.h"
#include "optim/lamb.h"
#include "parallel/tp1d_builder.h"
#include "tensor/rng.h"

namespace ndt {
namespace {

constexpr double kTol = 1e-6;
constexpr uint64_t kSeed = 11;

GptOptions options() {
  GptOptions o;
  o.vocab = 16;
  o.seq_len = 8;
  o.dim = 16;
  o.depth = 2;
  o.heads = 4;
  o.mlp_dim = 32;
  o.dropout = 0.1f;
  o.init_std = 0.1f;
  return o;
}

struct Norms {
  double grad_norm = 0;
  std::vector<double> ratios;  // LAMB trust ratio per parameter
};

// One forward/backward of `model` on a fixed batch, then the clipping norm
// and one LAMB step's trust ratios.
Norms run(Model& model, const AxisSumFn& sum) {
  const int B = 4, T = options().seq_len;
  Tensor ids({B, T}, MemTag::kData, DType::kI32);
  Tensor targets({B, T}, MemTag::kData, DType::kI32);
  for (int i = 0; i < B * T; ++i) {
    ids.data_i32()[i] = static_cast<int32_t>(rng_u64(3, i) % 16);
    targets.data_i32()[i] = static_cast<int32_t>(rng_u64(4, i) % 16);
  }
  model.init(kSeed);
  Context ctx;
  ctx.run.seed = kSeed;
  ctx.run.step = 1;
  LossStats stats;
  model.forward_backward(ids, targets, ctx, 1.0f / (B * T), stats);
  Norms n;
  n.grad_norm = clip_grad_norm(model.parameters(), 0.0, sum);
  LambOptions lo;
  lo.weight_decay = 0.01f;
  Lamb lamb(model.parameters(), lo, sum);
  lamb.step(1e-3f);
  n.ratios = lamb.last_ratios();
  return n;
}

TEST(TpNorms, GradNormAndLambRatiosEqualSerial) {
  SerialBuilder serial;
  auto ref_model = build_gpt(options(), serial);
  const Norms ref = run(*ref_model, nullptr);
  ASSERT_GT(ref.grad_norm, 0);
  for (int tp : {2, 4}) {
    for (bool seq : {false, true}) {
      SCOPED_TRACE("tp " + std::to_string(tp) + (seq ? " seq" : ""));
      std::vector<Norms> got(tp);
      run_local(tp, [&](ProcessGroup& g) {
        Tp1dBuilder b(g, seq, options().seq_len);
        auto model = build_gpt(options(), b);
        AxisSumFn sum =
            [&g](const std::vector<std::string>& axes, double* v, int64_t n) {
              ASSERT_EQ(axes, std::vector<std::string>{"tp"});
              g.all_reduce(v, n);
            };
        got[g.rank()] = run(*model, sum);
      });
      for (int r = 0; r < tp; ++r) {
        EXPECT_NEAR(got[r].grad_norm, ref.grad_norm, kTol * ref.grad_norm);
        ASSERT_EQ(got[r].ratios.size(), ref.ratios.size());
        for (size_t i = 0; i < ref.ratios.size(); ++i) {
          EXPECT_NEAR(got[r].ratios[i], ref.ratios[i], kTol * ref.ratios[i])
              << "parameter " << ref_model->parameters()[i]->name;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ndt
