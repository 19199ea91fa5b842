// Checkpoint directories: <root>/step-<N>/ holding model.safetensors,
// optimizer.safetensors and manifest.json.
//
// Saving is atomic at the directory level: everything is built in a hidden
// <root>/.step-<N>.tmp-<pid>/, fsync()ed, then renamed to step-<N>, so a
// crash never leaves a step directory that looks complete (DESIGN.md
// principle 8). The manifest records each file's size and zlib crc32;
// loading verifies them before parsing, so truncation and bit rot are
// reported by file name. This file moves tensors as given: naming,
// gathering and resharding by Layout belong to the caller.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/atomic_file.h"
#include "io/safetensors.h"

namespace ndt {

inline constexpr const char* kCheckpointFormat = "ndtrain-checkpoint-v1";

struct Checkpoint {
  // Written as manifest.json: a JSON object (null counts as {}). On save,
  // "format", "step" and "files" are set (replacing any caller values);
  // "files" maps each safetensors file name to {"bytes": n, "crc32": c}.
  nlohmann::json manifest;
  std::vector<NamedTensor> model;      // "model.safetensors"
  std::vector<NamedTensor> optimizer;  // "optimizer.safetensors"
};

// Writes <root>/step-<step>/ atomically (creating <root> if needed) and
// returns its path. An existing step-<step> is replaced: readers see the
// old or the new directory, never a mixture. Throws CheckpointError on bad
// input (negative step, bad tensor names, non-object manifest) and
// ndt::Error on I/O failure; the temp directory is removed on failure.
std::string save_checkpoint(
    const std::string& root, int64_t step, const Checkpoint& ckpt);

// Writes <root>/step-<step>/ one tensor at a time, for writers that never
// hold the whole model: the tensors' names, dtypes and shapes are declared
// up front, then each file's tensors are appended in the declared order
// (the two files independently). finish() writes the manifest as
// save_checkpoint does and renames the directory into place; until then
// the directory is hidden, and a writer destroyed unfinished removes it.
// Throws as save_checkpoint does.
class CheckpointWriter {
 public:
  CheckpointWriter(
      const std::string& root,
      int64_t step,
      std::vector<TensorSpec> model,
      std::vector<TensorSpec> optimizer);
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  void write_model(const Tensor& t);
  void write_optimizer(const Tensor& t);
  // Returns the step directory.
  std::string finish(nlohmann::json manifest);

 private:
  // Closes the files and removes the temp directory.
  void discard();

  std::string final_dir_;
  std::string tmp_dir_;
  int64_t step_ = 0;
  bool finished_ = false;
  std::unique_ptr<FileWriter> model_file_, optimizer_file_;
  std::unique_ptr<SafetensorsWriter> model_, optimizer_;
};

// A step directory written by save_checkpoint, opened for reading one
// tensor at a time: the constructor makes every check load_checkpoint
// makes before it reads tensors (manifest, each file's size and crc32,
// both headers).
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& dir);
  const nlohmann::json& manifest() const {
    return manifest_;
  }
  const SafetensorsReader& model() const {
    return *model_;
  }
  const SafetensorsReader& optimizer() const {
    return *optimizer_;
  }

 private:
  nlohmann::json manifest_;
  std::unique_ptr<SafetensorsReader> model_, optimizer_;
};

// Loads a step directory written by save_checkpoint. Checks that
// manifest.json exists and is valid JSON with the right format tag and a
// step matching the directory name, then each listed file's size and crc32,
// then parses the safetensors files. Throws CheckpointError naming the
// file and the problem.
Checkpoint load_checkpoint(const std::string& dir);

// Paths of the step-<N> directories under `root`, sorted by N. Temp
// directories of unfinished saves are ignored; a missing root gives {}.
std::vector<std::string> list_checkpoints(const std::string& root);

// The last entry of list_checkpoints(root), or "" if there is none.
std::string latest_checkpoint(const std::string& root);

}  // namespace ndt
