#include "data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace ndt {

MappedFile::MappedFile(const std::string& path, Mode mode) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error_ = errno;
    return;
  }
  struct stat st {};
  const bool sized = fstat(fd, &st) == 0;
  if (!sized || st.st_size <= 0) {
    error_ = sized ? EINVAL : errno;
    close(fd);
    return;
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* map =
      mode == Mode::kReadAll
          ? mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0)
          : mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  error_ = map == MAP_FAILED ? errno : 0;
  close(fd);
  if (map != MAP_FAILED) {
    data_ = static_cast<uint8_t*>(map);
    size_ = size;
  }
}

MappedFile::~MappedFile() {
  if (data_ != nullptr)
    munmap(data_, size_);
}

}  // namespace ndt
