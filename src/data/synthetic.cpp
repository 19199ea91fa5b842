#include "data/synthetic.h"

#include "base/check.h"
#include "tensor/rng.h"

namespace ndt {

// Each call draws from a sub-stream per step; element e of the batch uses
// counter e, so a run is reproducible from (seed, step) alone.
void synthetic_images(
    uint64_t seed,
    int64_t step,
    int64_t B,
    int C,
    int H,
    int W,
    int classes,
    Tensor& images,
    Tensor& labels) {
  NDT_ASSERT(classes > 0, "classes ", classes);
  NDT_ASSERT(
      images.dtype() == DType::kF32 &&
          images.shape() == Shape({B, int64_t{C}, int64_t{H}, int64_t{W}}),
      "images ",
      shape_str(images.shape()));
  NDT_ASSERT(
      labels.dtype() == DType::kI32 && labels.shape() == Shape({B}),
      "labels ",
      shape_str(labels.shape()));
  const uint64_t s = static_cast<uint64_t>(step);
  const uint64_t image_key = rng_subkey(rng_key(seed, "synthetic_images"), s);
  const uint64_t label_key = rng_subkey(rng_key(seed, "synthetic_labels"), s);
  rng_fill_normal(images.data(), images.numel(), image_key, 0, 0.0f, 1.0f);
  int32_t* lab = labels.data_i32();
  for (int64_t b = 0; b < B; ++b) {
    lab[b] = static_cast<int32_t>(
        rng_u64(label_key, static_cast<uint64_t>(b)) %
        static_cast<uint64_t>(classes));
  }
}

void synthetic_tokens(
    uint64_t seed,
    int64_t step,
    int64_t B,
    int64_t T,
    int V,
    Tensor& tokens,
    Tensor& targets) {
  NDT_ASSERT(V > 0, "vocabulary ", V);
  NDT_ASSERT(
      tokens.dtype() == DType::kI32 && tokens.shape() == Shape({B, T}),
      "tokens ",
      shape_str(tokens.shape()));
  NDT_ASSERT(
      targets.dtype() == DType::kI32 && targets.shape() == Shape({B, T}),
      "targets ",
      shape_str(targets.shape()));
  const uint64_t key = rng_subkey(
      rng_key(seed, "synthetic_tokens"), static_cast<uint64_t>(step));
  const uint64_t v = static_cast<uint64_t>(V);
  int32_t* tok = tokens.data_i32();
  int32_t* tgt = targets.data_i32();
  // Row b is the sequence at counters b * (T + 1) .. b * (T + 1) + T.
  for (int64_t b = 0; b < B; ++b) {
    const uint64_t base = static_cast<uint64_t>(b * (T + 1));
    int32_t prev = static_cast<int32_t>(rng_u64(key, base) % v);
    for (int64_t t = 0; t < T; ++t) {
      const int32_t next = static_cast<int32_t>(
          rng_u64(key, base + static_cast<uint64_t>(t) + 1) % v);
      tok[b * T + t] = prev;
      tgt[b * T + t] = next;
      prev = next;
    }
  }
}

}  // namespace ndt
