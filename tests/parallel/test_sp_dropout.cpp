// SpDropout (parallel/sp_dropout.h) draws the serial Dropout's mask on
// every block a sequence-parallel layout holds: my tokens of the
// contiguous and the zig-zag split, cut further into 1D tensor
// parallelism's token blocks (parallel.tp_seq; a block may start
// mid-sample and mid-chunk) or into feature blocks (2D, 2.5D, 3D). Output
// and input gradient must equal the serial ones' block exactly (tolerance
// 0: the same mask and the same single multiply per element).
#include <gtest/gtest.h>

#include <string>

#include "nn/dropout.h"
#include "nn/seq_split.h"
#include "ops/ops.h"
#include "parallel/sp_dropout.h"
#include "test_util.h"

namespace ndt {
namespace {

using test::randn;
using test::rel_diff;

constexpr int64_t B = 3, T = 16, C = 12;

// Block `part` of `parts` of the flattened [B T_local, C] tokens.
Tensor token_block(const Tensor& mine, int part, int parts) {
  const int64_t rows = mine.numel() / C / parts;
  Tensor out({rows, C}, MemTag::kOther);
  out.copy_(mine.slice(part * rows * C, {rows, C}));
  return out;
}

// Feature block `block` of `blocks` of every token: [B, T_local, C/blocks].
Tensor feature_block(const Tensor& mine, int block, int blocks) {
  const int64_t w = C / blocks;
  Tensor out({mine.dim(0), mine.dim(1), w}, MemTag::kOther);
  Tensor o2 = out.view({mine.numel() / C, w});
  ops::copy_columns(o2, 0, mine.view({mine.numel() / C, C}), block * w, w);
  return out;
}

struct Split {
  SeqSplit seq;
  int sp;
  SpDropoutSplit cut;
};

void check(const Split& s) {
  SCOPED_TRACE(
      std::string(to_string(s.seq)) + " sp=" + std::to_string(s.sp) +
      " token parts " + std::to_string(s.cut.token_parts) + " feature blocks " +
      std::to_string(s.cut.feature_blocks));
  const Tensor x = randn({B, T, C}, 3, "x");
  const Tensor dy = randn({B, T, C}, 4, "dy");
  Dropout serial("blocks.1.mlp.drop", 0.3f);
  Context cs;
  cs.run.training = true;
  cs.run.seed = 11;
  cs.run.step = 5;
  cs.run.sample_offset = 7;
  const Tensor ys = serial.forward(x, cs);
  const Tensor dxs = serial.backward(dy, cs);
  const auto mine = [&](const Tensor& full, const SeqShard& shard) {
    const Tensor tokens = take_tokens(full, shard);
    if (s.cut.token_parts > 1)
      return token_block(tokens, s.cut.token_part, s.cut.token_parts);
    if (s.cut.feature_blocks > 1)
      return feature_block(tokens, s.cut.feature_block, s.cut.feature_blocks);
    return tokens;
  };
  for (int r = 0; r < s.sp; ++r) {
    const SeqShard shard(s.seq, T, r, s.sp);
    SpDropout par("blocks.1.mlp.drop", 0.3f, shard, s.cut);
    Context cp;
    cp.run = cs.run;
    const Tensor yp = par.forward(mine(x, shard), cp);
    const Tensor dxp = par.backward(mine(dy, shard), cp);
    EXPECT_EQ(rel_diff(yp, mine(ys, shard)), 0) << "y, sp rank " << r;
    EXPECT_EQ(rel_diff(dxp, mine(dxs, shard)), 0) << "dx, sp rank " << r;
  }
}

TEST(SpDropout, DrawsTheSerialMaskOnEveryBlock) {
  for (SeqSplit seq : {SeqSplit::kContiguous, SeqSplit::kZigzag}) {
    for (int sp : {1, 2, 4}) {
      check({seq, sp, {}});
      // 1D token split: the B T / sp tokens over 3 or 4 parts (at sp = 4,
      // 4 tokens per sample, 4 parts of 3 tokens cut samples and the
      // zig-zag chunks of 2).
      for (int parts : {3, 4}) {
        if (B * T / sp % parts != 0)
          continue;
        for (int part = 0; part < parts; ++part)
          check({seq, sp, {part, parts, 0, 1}});
      }
      // Feature blocks of 2D / 3D.
      for (int blocks : {2, 3}) {
        for (int block = 0; block < blocks; ++block)
          check({seq, sp, {0, 1, block, blocks}});
      }
    }
  }
}

}  // namespace
}  // namespace ndt
