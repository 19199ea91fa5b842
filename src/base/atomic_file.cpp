#include "base/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "base/check.h"

namespace ndt {
namespace fs = std::filesystem;

namespace {

std::string errno_str(int err) {
  return std::system_category().message(err);
}

// Parent directory of `path` ("." for a bare file name).
std::string parent_dir(const std::string& path) {
  fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

// Removes `path` (file or directory tree), ignoring errors: used on paths
// that failed halfway, where the original error is the one to report.
void remove_quietly(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}

}  // namespace

FileWriter::FileWriter(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    int err = errno;
    throw Error(detail::str_cat(
        "cannot create ", path_, " for writing: ", errno_str(err)));
  }
  crc_ = static_cast<uint32_t>(::crc32(0L, Z_NULL, 0));
}

FileWriter::~FileWriter() {
  if (fd_ >= 0)
    ::close(fd_);
}

void FileWriter::write(const void* data, size_t bytes) {
  NDT_ASSERT(fd_ >= 0, "write to closed file ", path_);
  const auto* p = static_cast<const unsigned char*>(data);
  size_t left = bytes;
  while (left > 0) {
    // Linux writes at most ~2 GiB per call; zlib's crc32 takes a uInt.
    size_t chunk = std::min<size_t>(left, size_t{1} << 30);
    ssize_t n = ::write(fd_, p, chunk);
    if (n < 0) {
      int err = errno;
      if (err == EINTR)
        continue;
      throw Error(
          detail::str_cat("write to ", path_, " failed: ", errno_str(err)));
    }
    crc_ = static_cast<uint32_t>(
        ::crc32(crc_, p, static_cast<uInt>(static_cast<size_t>(n))));
    p += n;
    left -= static_cast<size_t>(n);
    bytes_ += static_cast<uint64_t>(n);
  }
}

void FileWriter::sync_and_close() {
  NDT_ASSERT(fd_ >= 0, "sync_and_close on closed file ", path_);
  int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    throw Error(
        detail::str_cat("fsync of ", path_, " failed: ", errno_str(err)));
  }
  if (::close(fd) != 0) {
    int err = errno;
    throw Error(
        detail::str_cat("close of ", path_, " failed: ", errno_str(err)));
  }
}

std::string temp_path_for(const std::string& path) {
  fs::path p(path);
  std::string name = p.filename().string();
  NDT_ASSERT(
      !name.empty(), "temp_path_for needs a file name, got '", path, "'");
  fs::path tmp =
      p.parent_path() /
      detail::str_cat(".", name, ".tmp-", static_cast<long>(::getpid()));
  return tmp.string();
}

std::optional<long> temp_path_pid(const std::string& name) {
  const size_t at = name.rfind(".tmp-");
  if (!name.starts_with('.') || at == std::string::npos)
    return std::nullopt;
  // Digits only, to the end: no sign, no empty pid.
  const char* first = name.data() + at + 5;
  const char* last = name.data() + name.size();
  if (first == last || *first < '0' || *first > '9')
    return std::nullopt;
  long pid = 0;
  const auto [ptr, err] = std::from_chars(first, last, pid);
  if (err != std::errc() || ptr != last)
    return std::nullopt;
  return pid;
}

void write_file_atomic(
    const std::string& path, const std::function<void(FileWriter&)>& fill) {
  std::string tmp = temp_path_for(path);
  try {
    FileWriter out(tmp);
    fill(out);
    out.sync_and_close();
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      int err = errno;
      throw Error(detail::str_cat(
          "cannot rename ", tmp, " to ", path, ": ", errno_str(err)));
    }
  } catch (...) {
    remove_quietly(tmp);
    throw;
  }
  fsync_dir(parent_dir(path));
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    throw Error(detail::str_cat(
        "cannot open directory ", dir, " to fsync it: ", errno_str(err)));
  }
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) {
    throw Error(detail::str_cat(
        "fsync of directory ", dir, " failed: ", errno_str(err)));
  }
}

void rename_replacing(const std::string& from, const std::string& to) {
  std::string parent = parent_dir(to);
  std::error_code ec;
  bool to_is_dir = fs::is_directory(fs::symlink_status(to, ec));
  if (!to_is_dir) {
    // Absent or a plain file: rename() replaces atomically.
    if (std::rename(from.c_str(), to.c_str()) != 0) {
      int err = errno;
      throw Error(detail::str_cat(
          "cannot rename ", from, " to ", to, ": ", errno_str(err)));
    }
    fsync_dir(parent);
    return;
  }
  // `to` is a directory. Swap the two atomically; `from` then holds the old
  // contents, which are deleted once the swap is durable.
  if (::renameat2(
          AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) {
    fsync_dir(parent);
    remove_quietly(from);
    return;
  }
  int err = errno;
  if (err != EINVAL && err != ENOSYS && err != EOPNOTSUPP) {
    throw Error(detail::str_cat(
        "cannot exchange ", from, " with ", to, ": ", errno_str(err)));
  }
  // No RENAME_EXCHANGE on this filesystem.
  detail::rename_dir_via_aside(from, to);
}

namespace detail {

void rename_dir_via_aside(const std::string& from, const std::string& to) {
  // A crash in between leaves no `to` at all (and a hidden `.old`
  // directory), never a mixture of old and new files.
  std::string old = temp_path_for(to) + ".old";
  remove_quietly(old);
  if (std::rename(to.c_str(), old.c_str()) != 0) {
    int err = errno;
    throw Error(
        str_cat("cannot move ", to, " aside to ", old, ": ", errno_str(err)));
  }
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    int err = errno;
    std::rename(old.c_str(), to.c_str());  // best effort: put it back
    throw Error(
        str_cat("cannot rename ", from, " to ", to, ": ", errno_str(err)));
  }
  fsync_dir(parent_dir(to));
  remove_quietly(old);
}

}  // namespace detail

}  // namespace ndt
