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
