// Reading and writing the safetensors format (huggingface/safetensors).
//
// Layout of a file:
//   [8 bytes] N, the header length, unsigned little-endian
//   [N bytes] JSON header: {"__metadata__": {string: string},
//             "<name>": {"dtype": "F32"|"I32", "shape": [...],
//                        "data_offsets": [begin, end]}, ...}
//             padded with spaces so the buffer starts 8-byte aligned
//   [rest]    the byte buffer; offsets are relative to its start
// Tensors are written in the given order with contiguous offsets. Only the
// two dtypes ndtrain's Tensor holds are supported (F32, I32); data is
// little-endian. The reader validates every field against the file size
// and throws CheckpointError naming the file and the problem; it never
// reads outside the file or allocates more than the file holds.
// Resharding and the checkpoint directory layout live in checkpoint.h.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace ndt {

class FileWriter;

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

// What a safetensors header declares of one tensor.
struct TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
};

// Writes a safetensors file one tensor at a time, so that the caller never
// holds them all: the constructor validates the specs (as write_safetensors
// does) and writes the header; write() appends the next tensor's data in
// the specs' order. `out` is written as write_safetensors_to writes it.
class SafetensorsWriter {
 public:
  SafetensorsWriter(
      FileWriter& out,
      const std::string& path,
      std::vector<TensorSpec> specs,
      const std::map<std::string, std::string>& metadata);
  // The next tensor; its dtype and shape must be its spec's.
  void write(const Tensor& t);
  // Checks that every declared tensor was written.
  void finish() const;

 private:
  FileWriter& out_;
  std::string path_;
  std::vector<TensorSpec> specs_;
  size_t next_ = 0;
};

// Reads a safetensors file one tensor at a time: the constructor reads and
// validates the header against the file (as read_safetensors does) and
// keeps the file open; read() reads one tensor.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  // In file (data offset) order.
  const std::vector<TensorSpec>& tensors() const {
    return specs_;
  }
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }
  // The index of the tensor called `name` in tensors(), or -1.
  int64_t find(const std::string& name) const;
  // Tensor i of tensors(), MemTag::kOther.
  Tensor read(size_t i) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::vector<TensorSpec> specs_;
  std::vector<uint64_t> offsets_;  // of each tensor's data in the file
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` (in order) and `metadata` to `path` atomically (temp
// file + fsync + rename + fsync of the directory). Names must be unique,
// non-empty and not "__metadata__"; tensors must be defined. Throws
// CheckpointError on bad input and ndt::Error on I/O failure.
void write_safetensors(
    const std::string& path,
    const std::vector<NamedTensor>& tensors,
    const std::map<std::string, std::string>& metadata);

// Writes the same bytes as write_safetensors to an open writer, without
// the temp file, fsync or rename: for callers that provide atomicity at a
// higher level (save_checkpoint builds a whole directory, then renames it).
// `path` is the file's final path, used in error messages. Validates the
// input before writing anything.
void write_safetensors_to(
    FileWriter& out,
    const std::string& path,
    const std::vector<NamedTensor>& tensors,
    const std::map<std::string, std::string>& metadata);

struct SafetensorsFile {
  std::vector<NamedTensor> tensors;  // in file (data offset) order
  std::map<std::string, std::string> metadata;

  // The tensor called `name`, or nullptr.
  const Tensor* find(const std::string& name) const;
};

// Reads and validates a safetensors file. Tensors get MemTag::kOther (they
// are staging copies; callers copy_() them into parameters or state).
SafetensorsFile read_safetensors(const std::string& path);

}  // namespace ndt
