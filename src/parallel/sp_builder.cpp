#include "parallel/sp_builder.h"

#include "base/check.h"
#include "parallel/ring_attention.h"
#include "parallel/ring_self_attention.h"
#include "parallel/sp_dropout.h"
#include "parallel/sp_embedding.h"
#include "parallel/token_split_layers.h"
#include "parallel/tp1d_builder.h"
#include "parallel/tp1d_embedding.h"
#include "parallel/ulysses_attention.h"

namespace ndt {
namespace {

// A loss head that needs every token (pooling): forward all-gathers my
// tokens and only sp rank 0 runs the serial head, so its loss and its
// parameter gradients count once; backward broadcasts rank 0's input
// gradient and keeps my tokens.
class RootHead final : public LossHead {
 public:
  RootHead(
      std::unique_ptr<LossHead> inner, ProcessGroup& sp, const SeqShard& shard)
      : inner_(std::move(inner)), sp_(sp), shard_(shard) {}

  void forward(
      const Tensor& x,
      const Tensor& targets,
      Context& ctx,
      LossStats& stats) override {
    const int64_t B = x.dim(0), Tl = x.dim(1), C = x.dim(2);
    const int N = sp_.size();
    Tensor parts({N, B, Tl, C}, MemTag::kComm);
    sp_.all_gather(x.data(), parts.data(), B * Tl * C);
    Tensor all({B, shard_.T_global(), C}, MemTag::kActs);
    for (int r = 0; r < N; ++r)
      put_tokens(
          parts.slice(r * B * Tl * C, {B, Tl, C}), all, shard_.of_rank(r));
    ctx.ints = {B, shard_.T_global(), C};
    if (sp_.rank() == 0)
      inner_->forward(all, targets, ctx.child(0), stats);
  }

  Tensor backward(Context& ctx, float scale) override {
    Tensor dall;
    if (sp_.rank() == 0)
      dall = inner_->backward(ctx.child(0), scale);
    else
      dall = Tensor(
          {ctx.ints.at(0), ctx.ints.at(1), ctx.ints.at(2)}, MemTag::kActs);
    sp_.broadcast(dall.data(), dall.numel(), 0);
    return take_tokens(dall, shard_);
  }

  void collect_parameters(std::vector<Parameter*>& out) override {
    inner_->collect_parameters(out);
  }

 private:
  std::unique_ptr<LossHead> inner_;
  ProcessGroup& sp_;
  SeqShard shard_;
};

void check_shard(const SeqShard& shard, const ProcessGroup& sp) {
  NDT_ASSERT(
      shard.rank() == sp.rank() && shard.size() == sp.size(),
      "shard of rank ",
      shard.rank(),
      "/",
      shard.size(),
      " on sp rank ",
      sp.rank(),
      "/",
      sp.size());
}

}  // namespace

SpBuilder::SpBuilder(
    ProcessGroup& sp,
    SpAttention attention,
    const SeqShard& shard,
    ProcessGroup& tp,
    bool token_split)
    : sp_(sp),
      attention_(attention),
      shard_(shard),
      tp_(&tp),
      token_split_(token_split),
      head_split_(tp.size()) {
  NDT_ASSERT(!token_split || tp.size() > 1, "token split without tp");
  check_shard(shard, sp);
  if (tp.size() > 1) {
    per_token_ =
        std::make_unique<Tp1dBuilder>(tp, token_split, shard.T_local());
  } else {
    per_token_ = std::make_unique<SerialBuilder>();
  }
}

SpBuilder::SpBuilder(
    ProcessGroup& sp,
    SpAttention attention,
    const SeqShard& shard,
    std::unique_ptr<Builder> grid,
    int head_split)
    : sp_(sp),
      attention_(attention),
      shard_(shard),
      tp_(nullptr),
      head_split_(head_split),
      per_token_(std::move(grid)) {
  check_shard(shard, sp);
}

std::unique_ptr<Module> SpBuilder::linear(
    const std::string& name,
    int in_features,
    int out_features,
    bool bias,
    Act act,
    LinearRole role,
    float init_std) {
  return per_token_->linear(
      name, in_features, out_features, bias, act, role, init_std);
}

std::unique_ptr<Module> SpBuilder::layernorm(const std::string& name, int C) {
  return per_token_->layernorm(name, C);
}

std::unique_ptr<LossHead> SpBuilder::lm_head(const LmHeadOptions& options) {
  return per_token_->lm_head(options);
}

// heads: the model's; tensor parallelism keeps heads / head_split_ of
// them.
std::unique_ptr<Module> SpBuilder::attention_core(int heads, bool causal) {
  NDT_ASSERT(heads % head_split_ == 0, heads, " heads over ", head_split_);
  heads /= head_split_;
  // Only ring attention runs on the zig-zag split.
  NDT_ASSERT(
      attention_ == SpAttention::kRing ||
          shard_.split() == SeqSplit::kContiguous,
      to_string(attention_),
      " attention on the ",
      to_string(shard_.split()),
      " split");
  switch (attention_) {
    case SpAttention::kRsa:
      return std::make_unique<RingSelfAttention>(heads, causal, sp_);
    case SpAttention::kRing:
      return std::make_unique<RingAttention>(
          heads, causal, sp_, shard_.split());
    case SpAttention::kUlysses:
      return std::make_unique<UlyssesAttention>(heads, causal, sp_);
  }
  NDT_ASSERT(false, "invalid SpAttention ", static_cast<int>(attention_));
  return nullptr;
}

std::unique_ptr<Module> SpBuilder::dropout(const std::string& name, float p) {
  if (!tp_)
    return per_token_->dropout(name, p);
  SpDropoutSplit split;
  if (token_split_)
    split = {.token_part = tp_->rank(), .token_parts = tp_->size()};
  return std::make_unique<SpDropout>(name, p, shard_, split);
}

std::unique_ptr<LossHead> SpBuilder::classifier_head(
    const ClassifierHeadOptions& options) {
  NDT_ASSERT(options.pool != HeadPool::kNone, "classifier head on tokens");
  if (!tp_) {
    return std::make_unique<RootHead>(
        per_token_->classifier_head(options), sp_, shard_);
  }
  auto root =
      std::make_unique<RootHead>(serial_.classifier_head(options), sp_, shard_);
  if (token_split_)
    return std::make_unique<GatheredHead>(
        std::move(root), *tp_, shard_.T_local());
  return root;
}

std::unique_ptr<Module> SpBuilder::token_embedding(
    const std::string& name, int vocab, int seq_len, int C, float init_std) {
  if (!tp_)
    return per_token_->token_embedding(name, vocab, seq_len, C, init_std);
  if (tp_->size() > 1) {
    return std::make_unique<VocabParallelEmbedding>(
        name, vocab, seq_len, C, init_std, *tp_, token_split_, shard_);
  }
  return std::make_unique<SpTokenEmbedding>(
      name, vocab, seq_len, C, init_std, shard_);
}

std::unique_ptr<Module> SpBuilder::patch_embedding(
    const PatchEmbeddingOptions& options) {
  if (!tp_) {
    return std::make_unique<SpTokensOf>(
        per_token_->patch_embedding(options), shard_);
  }
  auto mine =
      std::make_unique<SpTokensOf>(serial_.patch_embedding(options), shard_);
  if (token_split_)
    return std::make_unique<SplitOutput>(std::move(mine), *tp_);
  return mine;
}

}  // namespace ndt
