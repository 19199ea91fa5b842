// Fashion-MNIST (Xiao et al. 2017): 28x28 grey images in 10 classes,
// 60000 train and 10000 test samples, read from the original IDX .gz files.
//
// The whole split is kept as its raw bytes (one uint8 per pixel, a quarter
// of fp32: 47 MB for the train split on every rank); batches are gathered
// from it by index into caller-owned fp32 tensors, normalised on the way
// through a 256-entry table (no allocation per batch). Augmentation draws
// from the counter RNG keyed by the global sample index, so every
// data-parallel layout sees the same pixels.
// Dimension letters: N samples, B batch, C channels (1), H, W (28).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "tensor/tensor.h"

namespace ndt {

// Default location of the Fashion-MNIST .gz files.
constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
// Per-pixel statistics of the Fashion-MNIST train split (after x / 255).
constexpr float kFashionMnistMean = 0.2860f;
constexpr float kFashionMnistStd = 0.3530f;

// An in-memory image classification dataset.
struct ImageDataset {
  // [N, C, H, W] uint8, the pixels as stored in the file; MemTag::kData.
  Tensor pixels;
  // [N] int32 in [0, num_classes); MemTag::kData.
  Tensor labels;
  int num_classes = 10;
  // The normalised value of each byte, (v / 255 - mean) / std: what a
  // gathered batch holds for a pixel v.
  std::array<float, 256> value{};
  // value[0], a raw 0 (background) pixel; the padding value that
  // translation augmentation shifts in.
  float background = 0.0f;

  // Number of samples N.
  int64_t size() const;
};

// Loads the train (`train` true) or test split from `dir`, which holds
// {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz. Throws DataError naming
// the file when a file is missing or malformed, when the image dims are not
// 28x28, when image and label counts differ or when a label is >= 10.
// cache_dir: decoded copies of the files (read_idx_gz); empty: none.
ImageDataset load_fashion_mnist(
    const std::string& dir, bool train, const std::string& cache_dir = "");

// Copies samples indices[0..B) of `ds` into `images` [B, C, H, W] fp32
// (each pixel v as ds.value[v]) and `labels` [B] int32, both preallocated
// by the caller.
void gather_images(
    const ImageDataset& ds,
    const int64_t* indices,
    int64_t B,
    Tensor& images,
    Tensor& labels);

// As gather_images, with training augmentation: batch row b is global
// sample `sample_offset + b`; its random horizontal flip (when `flip`) and
// its translation by up to `shift` pixels in each direction (filled with
// ds.background) come from rng_u64(key, sample_offset + b) only, so the
// result does not depend on how the global batch is split across ranks.
void gather_images_augmented(
    const ImageDataset& ds,
    const int64_t* indices,
    int64_t B,
    uint64_t key,
    uint64_t sample_offset,
    bool flip,
    int shift,
    Tensor& images,
    Tensor& labels);

}  // namespace ndt
