#include "data/fashion_mnist.h"

#include <algorithm>

#include "base/check.h"
#include "data/idx.h"
#include "tensor/rng.h"

namespace ndt {
namespace {

constexpr int kSide = 28;
constexpr int kClasses = 10;

// Checks that batch tensors match the dataset; a mismatch is a caller bug.
void check_batch(
    const ImageDataset& ds,
    int64_t B,
    const Tensor& images,
    const Tensor& labels) {
  const Shape& s = ds.pixels.shape();
  NDT_ASSERT(
      images.dtype() == DType::kF32 &&
          images.shape() == Shape({B, s[1], s[2], s[3]}),
      "image batch ",
      shape_str(images.shape()),
      " for B=",
      B,
      " and dataset ",
      shape_str(s));
  NDT_ASSERT(
      labels.dtype() == DType::kI32 && labels.shape() == Shape({B}),
      "label batch ",
      shape_str(labels.shape()),
      " for B=",
      B);
}

void check_index(const ImageDataset& ds, int64_t b, int64_t i) {
  NDT_ASSERT(
      i >= 0 && i < ds.size(),
      "sample index ",
      i,
      " at batch row ",
      b,
      " outside dataset of ",
      ds.size());
}

}  // namespace

int64_t ImageDataset::size() const {
  return labels.defined() ? labels.numel() : 0;
}

ImageDataset load_fashion_mnist(
    const std::string& dir, bool train, const std::string& cache_dir) {
  const std::string prefix = dir + "/" + (train ? "train" : "t10k");
  const std::string images_path = prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = prefix + "-labels-idx1-ubyte.gz";
  IdxArray img = read_idx_gz(images_path, kIdxUbyte, 3, cache_dir);
  IdxArray lab = read_idx_gz(labels_path, kIdxUbyte, 1, cache_dir);
  NDT_CHECK(
      img.dims[1] == kSide && img.dims[2] == kSide,
      DataError,
      images_path,
      ": images are ",
      img.dims[1],
      "x",
      img.dims[2],
      ", expected 28x28");
  const int64_t N = img.dims[0];
  NDT_CHECK(
      N > 0,
      DataError,
      images_path,
      ": holds no images (the header says 0); a ",
      train ? "training" : "test",
      " set needs at least one");
  NDT_CHECK(
      lab.dims[0] == N,
      DataError,
      labels_path,
      ": ",
      lab.dims[0],
      " labels but ",
      images_path,
      " holds ",
      N,
      " images");

  ImageDataset ds;
  ds.num_classes = kClasses;
  ds.labels = Tensor({N}, MemTag::kData, DType::kI32);
  int32_t* labels = ds.labels.data_i32();
  const uint8_t* lab_bytes = lab.data.data_u8();
  for (int64_t i = 0; i < N; ++i) {
    NDT_CHECK(
        lab_bytes[i] < kClasses,
        DataError,
        labels_path,
        ": label ",
        int(lab_bytes[i]),
        " at index ",
        i,
        " is out of range, expected 0..",
        kClasses - 1);
    labels[i] = lab_bytes[i];
  }

  // One table lookup per pixel when a batch is gathered: the same float
  // for a byte value everywhere.
  for (int v = 0; v < 256; ++v) {
    ds.value[v] =
        (static_cast<float>(v) / 255.0f - kFashionMnistMean) / kFashionMnistStd;
  }
  ds.background = ds.value[0];
  ds.pixels = img.data.view({N, 1, kSide, kSide});
  return ds;
}

void gather_images(
    const ImageDataset& ds,
    const int64_t* indices,
    int64_t B,
    Tensor& images,
    Tensor& labels) {
  check_batch(ds, B, images, labels);
  const int64_t per = ds.pixels.numel() / std::max<int64_t>(ds.size(), 1);
  const uint8_t* src = ds.pixels.data_u8();
  const int32_t* src_labels = ds.labels.data_i32();
  float* dst = images.data();
  int32_t* dst_labels = labels.data_i32();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t i = indices[b];
    check_index(ds, b, i);
    const uint8_t* in = src + i * per;
    float* out = dst + b * per;
    for (int64_t k = 0; k < per; ++k)
      out[k] = ds.value[in[k]];
    dst_labels[b] = src_labels[i];
  }
}

void gather_images_augmented(
    const ImageDataset& ds,
    const int64_t* indices,
    int64_t B,
    uint64_t key,
    uint64_t sample_offset,
    bool flip,
    int shift,
    Tensor& images,
    Tensor& labels) {
  check_batch(ds, B, images, labels);
  NDT_CHECK(shift >= 0, ConfigError, "augmentation shift ", shift, " < 0");
  const int64_t C = ds.pixels.dim(1), H = ds.pixels.dim(2);
  const int64_t W = ds.pixels.dim(3);
  const int64_t span = 2 * int64_t{shift} + 1;
  const uint8_t* src = ds.pixels.data_u8();
  const int32_t* src_labels = ds.labels.data_i32();
  float* dst = images.data();
  int32_t* dst_labels = labels.data_i32();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t i = indices[b];
    check_index(ds, b, i);
    // One 64-bit draw per sample: bit 0 flips, bits 8.. and 32.. shift.
    const uint64_t r = rng_u64(key, sample_offset + static_cast<uint64_t>(b));
    const bool mirror = flip && (r & 1);
    const int64_t dx = static_cast<int64_t>((r >> 8) % span) - shift;
    const int64_t dy = static_cast<int64_t>((r >> 32) % span) - shift;
    // out(y, x) = in(y - dy, x' - dx) with x' = mirror ? W-1-x : x; pixels
    // shifted in from outside the image are the background.
    for (int64_t c = 0; c < C; ++c) {
      const uint8_t* in = src + ((i * C + c) * H) * W;
      float* out = dst + ((b * C + c) * H) * W;
      for (int64_t y = 0; y < H; ++y) {
        const int64_t sy = y - dy;
        float* row = out + y * W;
        if (sy < 0 || sy >= H) {
          std::fill(row, row + W, ds.background);
          continue;
        }
        const uint8_t* in_row = in + sy * W;
        for (int64_t x = 0; x < W; ++x) {
          const int64_t sx = (mirror ? W - 1 - x : x) - dx;
          row[x] = (sx >= 0 && sx < W) ? ds.value[in_row[sx]] : ds.background;
        }
      }
    }
    dst_labels[b] = src_labels[i];
  }
}

}  // namespace ndt
