// A whole file mapped into memory, unmapped with the object: the bytes
// come straight from the page cache, shared by every process on the host
// that maps the same file, with no copy and no fresh pages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ndt {

class MappedFile {
 public:
  enum class Mode {
    // Read only, page tables filled in one call (MAP_POPULATE): for a file
    // read once from start to end.
    kReadAll,
    // Writable private pages (a write copies the page, the file is never
    // changed), mapped as they are first read: for a dataset that lives as
    // long as the run.
    kPrivate,
  };

  // Never throws: on failure ok() is false and error() is the errno of
  // the step that failed (open, fstat or mmap); an empty file fails with
  // EINVAL.
  MappedFile(const std::string& path, Mode mode);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  bool ok() const {
    return data_ != nullptr;
  }
  int error() const {
    return error_;
  }
  uint8_t* data() const {
    return data_;
  }
  size_t size() const {
    return size_;
  }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int error_ = 0;
};

}  // namespace ndt
