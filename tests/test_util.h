// Helpers shared by the test binaries: deterministic tensors, comparisons
// finite-difference gradient checks and temporary directories.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace ndt::test {

// Tensor filled with normal(0, std) numbers from the counter RNG.
Tensor randn(Shape shape, uint64_t seed, std::string_view name, float std = 1);
// int32 tensor with element i = (i * mul + add) % modulo (token ids,
// labels).
Tensor int_tensor(Shape shape, int modulo, int mul, int add);
// Largest |a - b| / (atol + rtol * |b|) over elements (<= 1 means close).
double close_ratio(const Tensor& a, const Tensor& b, double atol, double rtol);
// Sum of a[i] * b[i] in double: the scalar loss sum(y * r) of gradient
// checks, whose gradient with respect to y is r.
double dot(const Tensor& a, const Tensor& b);
// Largest |a - b|.
double max_abs_diff(const Tensor& a, const Tensor& b);
// max |a - b| / max |b| (b all zero: divided by 1e-30, so any difference
// fails); infinity when the shapes differ. The per-tensor measure of the
// parallel-layer tests.
double rel_diff(const Tensor& a, const Tensor& b);
// Block (i, j) of t cut into q x q blocks over its first and last
// dimensions (a copy): the block of 2D tensor-parallel rank (i, j) of an
// activation [B, .., C] (samples of row-block i, features of column-block
// j) or of a matrix [R, C].
Tensor grid_block(const Tensor& t, int q, int i, int j);
// Block (r, j) of t cut into `rows` blocks over its first dimension and
// `cols` over its last (2.5D: the samples of row-block r = k q + i of all
// d q grid rows).
Tensor grid_block(const Tensor& t, int rows, int r, int cols, int j);
// Expects each of `parts` in `msg` (an error message); a gtest failure
// names the missing part.
void expect_has(const std::string& msg, const std::vector<std::string>& parts);
// Path under the source tree, e.g. source_path("tests/fixtures/x.bin").
std::string source_path(const std::string& rel);

// Reads a text fixture written by tests/fixtures/make_op_fixtures.py:
// per tensor a line "<name> <ndim> <dims...>" then a line of values. All
// tensors come back as fp32 (MemTag::kOther). Fails the calling test (gtest
// ADD_FAILURE) and returns what it read so far on a malformed file.
std::map<std::string, Tensor> read_fixture(const std::string& path);

// A fresh directory under the system temp dir, removed with its contents.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const {
    return path_;
  }
  std::string str() const {
    return path_.string();
  }
  // Path of `rel` inside the directory.
  std::string sub(const std::string& rel) const {
    return (path_ / rel).string();
  }
  // Names of the directory's entries, sorted.
  std::vector<std::string> entries() const;

 private:
  std::filesystem::path path_;
};

// The whole file at `path` as bytes (empty when it cannot be read).
std::string read_bytes(const std::string& path);
// `bytes` into `path`, replacing what it held.
void write_bytes(const std::string& path, const std::string& bytes);

// Checks the analytic gradient `grad` of a scalar function `loss` of `x`
// against central differences in double precision. `loss` is evaluated with
// x perturbed in place (fp32), step `h`. Returns the largest error ratio
// |num - ana| / (atol + rtol * |num|) over `samples` elements chosen
// deterministically (all when samples <= 0 or >= numel).
double grad_check(
    Tensor& x,
    const Tensor& grad,
    const std::function<double()>& loss,
    double h,
    double atol,
    double rtol,
    int samples = -1);

}  // namespace ndt::test
