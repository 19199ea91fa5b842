// Reader for the IDX format (MNIST and Fashion-MNIST) stored as .gz files.
//
// An IDX file is a 4-byte magic (0, 0, element type, number of dims), the
// dims as big-endian uint32, then the elements in row-major order. Only the
// raw bytes are returned, in a uint8 tensor; callers interpret them
// (fashion_mnist.cpp keeps the images' bytes as they are and turns the
// labels into int32). Every malformed input is a DataError naming the file
// and what was expected; nothing here guesses or repairs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace ndt {

// IDX element type code for unsigned bytes.
constexpr int kIdxUbyte = 0x08;

// A decoded IDX file: its dims and the raw element bytes (row-major).
struct IdxArray {
  std::vector<int64_t> dims;
  // uint8 [product of dims], MemTag::kData.
  Tensor data;
};

// Reads the gzip-compressed IDX file at `path`. Throws DataError naming the
// file when it is missing, not gzip, truncated or corrupt, when the magic's
// element type is not `expected_magic_type` (e.g. kIdxUbyte) or its dim
// count is not `expected_ndims`, when the payload is shorter than the header
// says, or when bytes follow the payload. Only ubyte is supported.
// With a `cache_dir` (data/decode_cache.h), the bytes come from the file's
// entry there when it has one that holds such an IDX file (the tensor then
// maps the entry); else the file is decoded and, once every check passed,
// stored there.
IdxArray read_idx_gz(
    const std::string& path,
    int expected_magic_type,
    int expected_ndims,
    const std::string& cache_dir = "");

}  // namespace ndt
