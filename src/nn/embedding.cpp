#include "nn/embedding.h"

#include <cmath>
#include <cstring>

#include "base/check.h"
#include "ops/ops.h"

namespace ndt {

Tensor Flatten::forward(const Tensor& x, Context& ctx) {
  (void)ctx;
  return x.view({x.dim(0), x.numel() / x.dim(0)});
}

Tensor Flatten::backward(const Tensor& dy, Context& ctx) {
  (void)dy;
  (void)ctx;
  return Tensor();
}

TokenEmbedding::TokenEmbedding(
    const std::string& name, int vocab, int max_tokens, int C, float init_std)
    : C_(C),
      tokens_(
          name + ".tokens.weight", {vocab, C}, true, {Init::kNormal, init_std}),
      positions_(
          name + ".positions.weight",
          {max_tokens, C},
          false,
          {Init::kNormal, init_std}) {}

// ids [B, T]; saved {ids}.
Tensor TokenEmbedding::forward(const Tensor& ids, Context& ctx) {
  int64_t B = ids.dim(0), T = ids.dim(1);
  NDT_ASSERT(T <= positions_.value.dim(0), "sequence longer than positions");
  Tensor y({B, T, C_}, MemTag::kActs);
  ops::embedding_forward(y, ids.view({B * T}), tokens_.value);
  // Positions are a bias over the flattened [T*C] row of each sample.
  Tensor pos = positions_.value.view({positions_.value.numel()});
  Tensor rows = y.view({B, T * C_});
  if (T == positions_.value.dim(0)) {
    ops::bias_add_forward(rows, pos);
  } else {
    Tensor part({T * C_}, MemTag::kActs);
    std::memcpy(part.data(), pos.data(), T * C_ * 4);
    ops::bias_add_forward(rows, part);
  }
  ctx.saved = {ids};
  return y;
}

Tensor TokenEmbedding::backward(const Tensor& dy, Context& ctx) {
  const Tensor& ids = ctx.saved.at(0);
  int64_t B = ids.dim(0), T = ids.dim(1);
  ops::embedding_backward(
      tokens_.grad, dy.view({B * T, C_}), ids.view({B * T}));
  if (T == positions_.grad.dim(0)) {
    Tensor dpos = positions_.grad.view({T * C_});
    ops::bias_add_backward(dpos, dy.view({B, T * C_}));
  } else {
    Tensor part = Tensor::zeros({T * C_}, MemTag::kActs);
    ops::bias_add_backward(part, dy.view({B, T * C_}));
    float* g = positions_.grad.data();
    for (int64_t i = 0; i < T * C_; ++i)
      g[i] += part.data()[i];
  }
  ctx.saved.clear();
  return Tensor();
}

void TokenEmbedding::collect_parameters(std::vector<Parameter*>& out) {
  out.push_back(&tokens_);
  out.push_back(&positions_);
}

PatchEmbedding::PatchEmbedding(const PatchEmbeddingOptions& o)
    : options_(o),
      num_patches_((o.image_size / o.patch) * (o.image_size / o.patch)),
      weight_(
          o.name + ".patch.weight",
          {o.dim, o.channels, o.patch, o.patch},
          true,
          {Init::kNormal,
           1.0f / std::sqrt(float(o.channels * o.patch * o.patch))}),
      bias_(o.name + ".patch.bias", {o.dim}, false, {Init::kZeros}),
      cls_(
          o.name + ".cls_token",
          {1, 1, o.cls_token ? o.dim : 0},
          false,
          {Init::kNormal, o.init_std}),
      positions_(
          o.name + ".positions",
          {1, num_patches_ + (o.cls_token ? 1 : 0), o.dim},
          false,
          {Init::kNormal, o.init_std}) {
  NDT_ASSERT(o.image_size % o.patch == 0);
}

// images [B, Cin, H, W]; saved {patches [B, NP, Cin*P*P]}.
Tensor PatchEmbedding::forward(const Tensor& images, Context& ctx) {
  const int64_t B = images.dim(0), D = options_.dim, NP = num_patches_;
  const int64_t K = options_.channels * options_.patch * options_.patch;
  const int64_t Tok = tokens();
  const int64_t first = options_.cls_token ? 1 : 0;
  Tensor patches({B, NP, K}, MemTag::kActs);
  ops::patchify_forward(patches, images, options_.patch);
  Tensor emb({B, NP, D}, MemTag::kActs);
  ops::linear_forward(emb, patches, weight_.value.view({D, K}), bias_.value);
  Tensor y({B, Tok, D}, MemTag::kActs);
  for (int64_t b = 0; b < B; ++b) {
    float* dst = y.data() + b * Tok * D;
    if (first)
      std::memcpy(dst, cls_.value.data(), D * 4);
    std::memcpy(dst + first * D, emb.data() + b * NP * D, NP * D * 4);
  }
  Tensor rows = y.view({B, Tok * D});
  ops::bias_add_forward(rows, positions_.value.view({Tok * D}));
  ctx.saved = {patches};
  return y;
}

Tensor PatchEmbedding::backward(const Tensor& dy, Context& ctx) {
  const Tensor& patches = ctx.saved.at(0);
  const int64_t B = dy.dim(0), D = options_.dim, NP = num_patches_;
  const int64_t K = patches.dim(2), Tok = tokens();
  const int64_t first = options_.cls_token ? 1 : 0;
  Tensor dpos = positions_.grad.view({Tok * D});
  ops::bias_add_backward(dpos, dy.view({B, Tok * D}));
  Tensor demb({B, NP, D}, MemTag::kActs);
  for (int64_t b = 0; b < B; ++b) {
    const float* src = dy.data() + b * Tok * D;
    if (first) {
      float* g = cls_.grad.data();
      for (int64_t c = 0; c < D; ++c)
        g[c] += src[c];
    }
    std::memcpy(demb.data() + b * NP * D, src + first * D, NP * D * 4);
  }
  Tensor none;
  Tensor dw = weight_.grad.view({D, K});
  ops::linear_backward(
      none, dw, bias_.grad, demb, patches, weight_.value.view({D, K}));
  ctx.saved.clear();
  return Tensor();
}

void PatchEmbedding::collect_parameters(std::vector<Parameter*>& out) {
  out.push_back(&weight_);
  out.push_back(&bias_);
  if (options_.cls_token)
    out.push_back(&cls_);
  out.push_back(&positions_);
}

}  // namespace ndt
