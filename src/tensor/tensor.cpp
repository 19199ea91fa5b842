#include "tensor/tensor.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "base/check.h"

namespace ndt {

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      os << ", ";
    os << shape[i];
  }
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    NDT_ASSERT(d >= 0, "negative dimension in ", shape_str(shape));
    n *= d;
  }
  return n;
}

int64_t dtype_bytes(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return sizeof(float);
    case DType::kI32:
      return sizeof(int32_t);
    case DType::kU8:
      return sizeof(uint8_t);
  }
  NDT_ASSERT(false, "invalid DType ", static_cast<int>(dtype));
  return 0;
}

Tensor::Storage::~Storage() {
  if (!owner)
    mem_free(ptr, bytes, tag);
}

Tensor::Tensor(Shape shape, MemTag tag, DType dtype)
    : shape_(std::move(shape)), dtype_(dtype) {
  numel_ = shape_numel(shape_);
  storage_ = std::make_shared<Storage>();
  storage_->bytes =
      static_cast<size_t>(std::max<int64_t>(numel_, 1) * dtype_bytes(dtype_));
  storage_->tag = tag;
  storage_->ptr = mem_alloc(storage_->bytes, tag);
}

Tensor Tensor::zeros(Shape shape, MemTag tag, DType dtype) {
  Tensor t(std::move(shape), tag, dtype);
  t.zero_();
  return t;
}

Tensor Tensor::borrowed(
    void* ptr, Shape shape, DType dtype, std::shared_ptr<void> owner) {
  NDT_ASSERT(ptr != nullptr && owner != nullptr, "borrowed memory needs both");
  Tensor t;
  t.shape_ = std::move(shape);
  t.numel_ = shape_numel(t.shape_);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>();
  t.storage_->ptr = ptr;
  t.storage_->bytes = static_cast<size_t>(t.numel_ * dtype_bytes(dtype));
  t.storage_->tag = MemTag::kData;
  t.storage_->owner = std::move(owner);
  return t;
}

int64_t Tensor::dim(int i) const {
  int n = ndim();
  if (i < 0)
    i += n;
  NDT_ASSERT(i >= 0 && i < n, "dim ", i, " of shape ", shape_str(shape_));
  return shape_[i];
}

uint8_t* Tensor::data_u8() {
  NDT_ASSERT(dtype_ == DType::kU8, "tensor is not uint8");
  return storage_ ? static_cast<uint8_t*>(storage_->ptr) + offset_ : nullptr;
}

const uint8_t* Tensor::data_u8() const {
  NDT_ASSERT(dtype_ == DType::kU8, "tensor is not uint8");
  return storage_ ? static_cast<const uint8_t*>(storage_->ptr) + offset_
                  : nullptr;
}

MemTag Tensor::tag() const {
  NDT_ASSERT(storage_, "undefined tensor");
  return storage_->tag;
}

float* Tensor::data() {
  NDT_ASSERT(dtype_ == DType::kF32, "tensor is not fp32");
  return storage_ ? static_cast<float*>(storage_->ptr) + offset_ : nullptr;
}

const float* Tensor::data() const {
  NDT_ASSERT(dtype_ == DType::kF32, "tensor is not fp32");
  return storage_ ? static_cast<const float*>(storage_->ptr) + offset_
                  : nullptr;
}

int32_t* Tensor::data_i32() {
  NDT_ASSERT(dtype_ == DType::kI32, "tensor is not int32");
  return storage_ ? static_cast<int32_t*>(storage_->ptr) + offset_ : nullptr;
}

const int32_t* Tensor::data_i32() const {
  NDT_ASSERT(dtype_ == DType::kI32, "tensor is not int32");
  return storage_ ? static_cast<const int32_t*>(storage_->ptr) + offset_
                  : nullptr;
}

Tensor Tensor::view(Shape shape) const {
  NDT_ASSERT(
      shape_numel(shape) == numel_,
      "cannot view ",
      shape_str(shape_),
      " as ",
      shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::rows(int64_t first, int64_t n) const {
  const int64_t per = numel_ / dim(0);
  Shape s = shape_;
  s[0] = n;
  return slice(first * per, std::move(s));
}

Tensor Tensor::slice(int64_t offset, Shape shape) const {
  int64_t n = shape_numel(shape);
  NDT_ASSERT(
      offset >= 0 && offset + n <= numel_,
      "slice of ",
      n,
      " elements at ",
      offset,
      " outside ",
      shape_str(shape_));
  Tensor t = *this;
  t.offset_ = offset_ + offset;
  t.shape_ = std::move(shape);
  t.numel_ = n;
  return t;
}

Tensor Tensor::clone(MemTag tag) const {
  Tensor t(shape_, tag, dtype_);
  if (numel_ > 0)
    std::memcpy(t.raw(), raw(), numel_ * dtype_bytes(dtype_));
  return t;
}

void Tensor::zero_() {
  if (numel_ > 0)
    std::memset(raw(), 0, numel_ * dtype_bytes(dtype_));
}

void Tensor::fill_(float value) {
  float* p = data();
  std::fill(p, p + numel_, value);
}

void Tensor::copy_(const Tensor& src) {
  NDT_ASSERT(
      src.numel_ == numel_ && src.dtype_ == dtype_,
      "copy_ from ",
      shape_str(src.shape_),
      " into ",
      shape_str(shape_));
  if (numel_ > 0)
    std::memcpy(raw(), src.raw(), numel_ * dtype_bytes(dtype_));
}

void* Tensor::raw() const {
  return static_cast<char*>(storage_->ptr) + offset_ * dtype_bytes(dtype_);
}

}  // namespace ndt
