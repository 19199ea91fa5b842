// DataSource: the batches a run trains and evaluates on, for the dataset
// named in the config (Fashion-MNIST images, fortunes text, or synthetic
// benchmark data). Training batch `step` holds global samples
// [step * B, (step + 1) * B) of the deterministic sampler, so the batch
// depends only on (seed, step) and a resumed run sees the same data.
#pragma once

#include <memory>
#include <optional>

#include "data/fashion_mnist.h"
#include "data/fortunes.h"
#include "data/sampler.h"
#include "io/config.h"
#include "tensor/tensor.h"

namespace ndt {

class DataSource {
 public:
  explicit DataSource(const Config& config);

  // Preallocated input/target tensors for a batch of B samples.
  Tensor make_input(int64_t B) const;
  Tensor make_targets(int64_t B) const;

  // Training samples [first, first + B) of the global stream.
  void train_batch(int64_t first, int64_t B, Tensor& input, Tensor& targets);
  // Number of evaluation samples (test images or validation windows).
  int64_t eval_size() const;
  void eval_batch(int64_t first, int64_t B, Tensor& input, Tensor& targets);
  // Training samples in one epoch: the training images, or the windows of
  // model.seq_len tokens that tile the training text (the warmup unit of
  // optim.warmup_epochs).
  int64_t train_size() const;

 private:
  Config config_;
  std::optional<ImageDataset> train_images_;
  std::optional<ImageDataset> test_images_;
  std::optional<TextDataset> text_;
  std::unique_ptr<GlobalSampler> sampler_;
  std::vector<int64_t> indices_;
  uint64_t aug_key_ = 0;
  uint64_t text_key_ = 0;
  Tensor synth_input_;  // synthetic: the fixed batch
  Tensor synth_targets_;
};

}  // namespace ndt
