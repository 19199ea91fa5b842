#include "train/data_source.h"

#include "base/check.h"
#include "data/decode_cache.h"
#include "data/synthetic.h"
#include "tensor/rng.h"

namespace ndt {
namespace {

constexpr int64_t kSyntheticEvalSize = 1024;

}  // namespace

DataSource::DataSource(const Config& config) : config_(config) {
  const std::string& path = config.data.path;
  const uint64_t seed = config.train.seed;
  switch (config.data.name) {
    case DatasetKind::kFashionMnist: {
      std::string dir = path.empty() ? kFashionMnistDir : path;
      const DataConfig& d = config.data;
      const std::string cache = !d.cache ? ""
                                : d.cache_dir.empty()
                                    ? default_decode_cache_dir()
                                    : d.cache_dir;
      train_images_ = load_fashion_mnist(dir, true, cache);
      test_images_ = load_fashion_mnist(dir, false, cache);
      sampler_ = std::make_unique<GlobalSampler>(train_images_->size(), seed);
      aug_key_ = rng_key(seed, "data.augment");
      break;
    }
    case DatasetKind::kFortunes: {
      text_ = load_fortunes(path.empty() ? kFortunesDir : path);
      int64_t T = config.model.seq_len;
      NDT_CHECK(
          static_cast<int64_t>(text_->val.size()) > T + 1,
          DataError,
          "fortunes validation text (",
          text_->val.size(),
          " bytes) is shorter than model.seq_len + 1 = ",
          T + 1);
      text_key_ = rng_key(seed, "data.text_offsets");
      break;
    }
    case DatasetKind::kSynthetic:
      break;
  }
}

Tensor DataSource::make_input(int64_t B) const {
  const ModelConfig& m = config_.model;
  if (m.kind == ModelKind::kGpt) {
    return Tensor({B, m.seq_len}, MemTag::kData, DType::kI32);
  }
  return Tensor({B, m.channels, m.image_size, m.image_size}, MemTag::kData);
}

Tensor DataSource::make_targets(int64_t B) const {
  if (config_.model.kind == ModelKind::kGpt) {
    return Tensor({B, config_.model.seq_len}, MemTag::kData, DType::kI32);
  }
  return Tensor({B}, MemTag::kData, DType::kI32);
}

int64_t DataSource::train_size() const {
  if (train_images_)
    return train_images_->size();
  if (text_)
    return static_cast<int64_t>(text_->train.size()) / config_.model.seq_len;
  return kSyntheticEvalSize;
}

void DataSource::train_batch(
    int64_t first, int64_t B, Tensor& input, Tensor& targets) {
  const ModelConfig& m = config_.model;
  switch (config_.data.name) {
    case DatasetKind::kFashionMnist:
      indices_.resize(B);
      sampler_->indices(first, B, indices_.data());
      if (config_.data.augment) {
        gather_images_augmented(
            *train_images_,
            indices_.data(),
            B,
            aug_key_,
            first,
            true,
            config_.data.shift,
            input,
            targets);
      } else {
        gather_images(*train_images_, indices_.data(), B, input, targets);
      }
      return;
    case DatasetKind::kFortunes:
      gather_text_random(
          text_->train, m.seq_len, text_key_, first, B, input, targets);
      return;
    case DatasetKind::kSynthetic:
      // One fixed synthetic batch per size, generated once: benchmarks
      // time the step, not the random-number generator.
      if (!synth_input_.defined() || synth_input_.dim(0) != B) {
        synth_input_ = make_input(B);
        synth_targets_ = make_targets(B);
        if (m.kind == ModelKind::kGpt) {
          synthetic_tokens(
              config_.train.seed,
              0,
              B,
              m.seq_len,
              m.vocab,
              synth_input_,
              synth_targets_);
        } else {
          synthetic_images(
              config_.train.seed,
              0,
              B,
              m.channels,
              m.image_size,
              m.image_size,
              m.num_classes,
              synth_input_,
              synth_targets_);
        }
      }
      input.copy_(synth_input_);
      targets.copy_(synth_targets_);
      return;
  }
}

int64_t DataSource::eval_size() const {
  if (test_images_)
    return test_images_->size();
  if (text_)
    return num_text_windows(text_->val, config_.model.seq_len);
  return kSyntheticEvalSize;
}

void DataSource::eval_batch(
    int64_t first, int64_t B, Tensor& input, Tensor& targets) {
  switch (config_.data.name) {
    case DatasetKind::kFashionMnist:
      indices_.resize(B);
      for (int64_t i = 0; i < B; ++i)
        indices_[i] = first + i;
      gather_images(*test_images_, indices_.data(), B, input, targets);
      return;
    case DatasetKind::kFortunes:
      gather_text_windows(
          text_->val, config_.model.seq_len, first, B, input, targets);
      return;
    case DatasetKind::kSynthetic:
      train_batch(first, B, input, targets);
      return;
  }
}

}  // namespace ndt
