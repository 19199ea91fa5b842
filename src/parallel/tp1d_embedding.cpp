#include "parallel/tp1d_embedding.h"

#include <cstring>

#include "base/check.h"
#include "ops/ops.h"

namespace ndt {

Layout vocab_row_layout(int64_t vocab, int64_t C, const ProcessGroup& tp) {
  NDT_CHECK(
      vocab % tp.size() == 0,
      ConfigError,
      "vocabulary of ",
      vocab,
      " does not split over ",
      tp.size(),
      " tp ranks");
  Placement p;
  p.axis = "tp";
  p.kind = Placement::Kind::kShard;
  p.dim = 0;
  p.parts = tp.size();
  p.index = tp.rank();
  return Layout{{vocab, C}, {p}};
}

namespace {

Parameter vocab_table(
    const std::string& name,
    int vocab,
    int C,
    float init_std,
    const ProcessGroup& tp) {
  Layout layout = vocab_row_layout(vocab, C, tp);
  Parameter p(name, layout.local_shape(), true, {Init::kNormal, init_std});
  p.layout = std::move(layout);
  return p;
}

}  // namespace

VocabParallelEmbedding::VocabParallelEmbedding(
    const std::string& name,
    int vocab,
    int max_tokens,
    int C,
    float init_std,
    ProcessGroup& tp,
    bool token_split,
    std::optional<SeqShard> sp_tokens)
    : tp_(tp),
      token_split_(token_split),
      sp_tokens_(std::move(sp_tokens)),
      C_(C),
      V_local_(vocab / tp.size()),
      v_begin_(static_cast<int64_t>(tp.rank()) * (vocab / tp.size())),
      tokens_(vocab_table(name + ".tokens.weight", vocab, C, init_std, tp)),
      positions_(
          name + ".positions.weight",
          {max_tokens, C},
          false,
          {Init::kNormal, init_std}),
      reduce_(tp),
      scatter_(tp) {}

int64_t VocabParallelEmbedding::position(
    int64_t first, int64_t i, int64_t T) const {
  return sp_tokens_ ? sp_tokens_->global_position((first + i) % T)
                    : (first + i) % T;
}

// ids [B, T]; saved {ids}; child(0) is the reduction's context.
Tensor VocabParallelEmbedding::forward(const Tensor& ids, Context& ctx) {
  const int64_t B = ids.dim(0), T = ids.dim(1), N = B * T, C = C_;
  NDT_ASSERT(
      (sp_tokens_ ? sp_tokens_->T_global() : T) <= positions_.value.dim(0),
      "sequence longer than positions");
  NDT_CHECK(
      !token_split_ || N % tp_.size() == 0,
      ConfigError,
      "token split: ",
      N,
      " tokens do not split over ",
      tp_.size(),
      " tp ranks");
  const int64_t V = V_local_ * tp_.size();
  const int32_t* id = ids.data_i32();
  for (int64_t n = 0; n < N; ++n) {
    NDT_CHECK(
        id[n] >= 0 && id[n] < V,
        DataError,
        "embedding: id ",
        id[n],
        " at index ",
        n,
        " is outside the table range [0, ",
        V,
        ")");
  }
  // Partial sum over tp: my rows, zeros for ids held elsewhere.
  Tensor part({B, T, C}, MemTag::kActs);
  const float* table = tokens_.value.data();
  float* pp = part.data();
#pragma omp parallel for schedule(static) if (N * C >= (1 << 14))
  for (int64_t n = 0; n < N; ++n) {
    const int64_t row = id[n] - v_begin_;
    if (row >= 0 && row < V_local_)
      std::memcpy(pp + n * C, table + row * C, sizeof(float) * C);
    else
      std::memset(pp + n * C, 0, sizeof(float) * C);
  }
  Tensor y = token_split_ ? scatter_.forward(part, ctx.child(0))
                          : reduce_.forward(part, ctx.child(0));
  // Positions after the reduction (added once): y row i is global token
  // first + i. Same single fp32 add per element as the serial bias add.
  const int64_t rows = y.numel() / C;
  const int64_t first = token_split_ ? tp_.rank() * rows : 0;
  const float* pos = positions_.value.data();
  float* yp = y.data();
  for (int64_t i = 0; i < rows; ++i) {
    const float* pr = pos + position(first, i, T) * C;
    float* yr = yp + i * C;
    for (int64_t c = 0; c < C; ++c)
      yr[c] += pr[c];
  }
  ctx.saved = {ids};
  return y;
}

Tensor VocabParallelEmbedding::backward(const Tensor& dy, Context& ctx) {
  const Tensor& ids = ctx.saved.at(0);
  const int64_t B = ids.dim(0), T = ids.dim(1), N = B * T, C = C_;
  // All tokens' gradient, the same on every rank: any token may hit my rows.
  Tensor dfull = token_split_ ? scatter_.backward(dy, ctx.child(0))
                              : reduce_.backward(dy, ctx.child(0));
  NDT_ASSERT(dfull.numel() == N * C, shape_str(dfull.shape()));
  // Token rows in my vocabulary range, added in token order like the serial
  // embedding_backward (so the sums are bitwise the serial ones).
  const int32_t* id = ids.data_i32();
  const float* g = dfull.data();
  float* dt = tokens_.grad.data();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t row = id[n] - v_begin_;
    if (row < 0 || row >= V_local_)
      continue;
    float* dst = dt + row * C;
    const float* src = g + n * C;
    for (int64_t c = 0; c < C; ++c)
      dst[c] += src[c];
  }
  // Positions: from the full gradient, exactly as TokenEmbedding does, so
  // the replicated gradient is complete on every rank without a reduction.
  if (T == positions_.grad.dim(0) && !sp_tokens_) {
    Tensor dpos = positions_.grad.view({T * C});
    ops::bias_add_backward(dpos, dfull.view({B, T * C}));
  } else {
    Tensor part = Tensor::zeros({T * C}, MemTag::kActs);
    ops::bias_add_backward(part, dfull.view({B, T * C}));
    float* gp = positions_.grad.data();
    for (int64_t j = 0; j < T; ++j) {
      float* dst = gp + position(0, j, T) * C;
      const float* src = part.data() + j * C;
      for (int64_t c = 0; c < C; ++c)
        dst[c] += src[c];
    }
  }
  ctx.saved.clear();
  return Tensor();
}

void VocabParallelEmbedding::collect_parameters(std::vector<Parameter*>& out) {
  out.push_back(&tokens_);
  out.push_back(&positions_);
}

}  // namespace ndt
