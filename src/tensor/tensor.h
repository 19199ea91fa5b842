// Tensor: a shape plus contiguous, reference-counted host storage.
//
// Element types are fp32 (activations, parameters), int32 (token ids,
// labels) and uint8 (raw image pixels, decoded when a batch is gathered).
// Storage comes from the caching allocator (memory.h) and carries
// a MemTag, or is held by an owner outside it (Tensor::borrowed: a file
// mapped into memory). Copies of a Tensor share storage; clone() copies data.
// There is no autograd here: modules save what backward needs in a Context.
// The device tag is always kCpu for now; it exists so a CUDA backend can
// be added without changing callers.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "tensor/memory.h"

namespace ndt {

using Shape = std::vector<int64_t>;

enum class DType { kF32, kI32, kU8 };
// Bytes of one element of `dtype`.
int64_t dtype_bytes(DType dtype);
enum class Device { kCpu };

std::string shape_str(const Shape& shape);
int64_t shape_numel(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  // Uninitialised storage for `shape`.
  explicit Tensor(
      Shape shape, MemTag tag = MemTag::kActs, DType dtype = DType::kF32);

  static Tensor zeros(
      Shape shape, MemTag tag = MemTag::kActs, DType dtype = DType::kF32);
  // `shape` elements at `ptr`, memory the allocator does not own and its
  // ledger does not count (MemTag::kData): `owner` keeps it valid and is
  // released with the last tensor sharing the storage.
  static Tensor borrowed(
      void* ptr, Shape shape, DType dtype, std::shared_ptr<void> owner);

  bool defined() const {
    return storage_ != nullptr;
  }
  const Shape& shape() const {
    return shape_;
  }
  int ndim() const {
    return static_cast<int>(shape_.size());
  }
  // Dimension i; negative i counts from the end.
  int64_t dim(int i) const;
  int64_t numel() const {
    return numel_;
  }
  DType dtype() const {
    return dtype_;
  }
  Device device() const {
    return Device::kCpu;
  }
  MemTag tag() const;

  float* data();
  const float* data() const;
  int32_t* data_i32();
  const int32_t* data_i32() const;
  uint8_t* data_u8();
  const uint8_t* data_u8() const;

  // Same storage, new shape with the same element count.
  Tensor view(Shape shape) const;
  // Same storage: `shape` elements starting `offset` elements into this
  // tensor (e.g. a parameter's gradient inside a flat bucket).
  Tensor slice(int64_t offset, Shape shape) const;
  // Rows [first, first + n) along dim 0 (a batch's samples), sharing
  // storage.
  Tensor rows(int64_t first, int64_t n) const;
  // Deep copy into fresh storage with `tag`.
  Tensor clone(MemTag tag) const;
  void zero_();
  void fill_(float value);
  // Copies elements from `src` (same numel and dtype).
  void copy_(const Tensor& src);

 private:
  void* raw() const;  // first element, any dtype
  struct Storage {
    void* ptr = nullptr;
    size_t bytes = 0;
    MemTag tag = MemTag::kOther;
    std::shared_ptr<void> owner;  // set: not the allocator's block
    ~Storage();
  };
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // elements from the start of storage_
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
};

}  // namespace ndt
