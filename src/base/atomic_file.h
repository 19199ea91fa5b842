// Crash-safe file output: write to a temporary name, fsync, rename.
//
// A reader either sees the old file or the complete new one, never a
// half-written one (DESIGN.md principle 8). FileWriter is a checked,
// unbuffered writer that also keeps a running byte count and zlib crc32 of
// what it wrote, so callers can record checksums without re-reading.
// write_file_atomic builds on it; directory-level atomicity (checkpoint
// step directories) uses temp_path_for, fsync_dir and rename_replacing.
// System-call failures throw ndt::Error naming the path and strerror.
// Not thread-safe per object; POSIX (Linux) only.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace ndt {

// Write-only file descriptor with checked writes, byte count and crc32.
class FileWriter {
 public:
  // Creates or truncates `path` (mode 0644).
  explicit FileWriter(std::string path);
  // Closes the file if still open, ignoring errors (use sync_and_close()).
  ~FileWriter();
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  // Writes all `bytes` bytes (retries short writes and EINTR).
  void write(const void* data, size_t bytes);
  // fsync()s and closes the file; throws if either fails.
  void sync_and_close();

  const std::string& path() const {
    return path_;
  }
  // Bytes written so far.
  uint64_t bytes() const {
    return bytes_;
  }
  // zlib crc32 of the bytes written so far.
  uint32_t crc32() const {
    return crc_;
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t bytes_ = 0;
  uint32_t crc_ = 0;
};

// "<dir>/.<name>.tmp-<pid>" for "<dir>/<name>": a hidden sibling of `path`
// (same filesystem, so rename() is atomic).
std::string temp_path_for(const std::string& path);

// The writer's pid when file name `name` is one temp_path_for gives
// (".<name>.tmp-<digits>"), else nullopt: how a directory's owner tells
// the temp files of writers that died from its own files.
std::optional<long> temp_path_pid(const std::string& name);

// Writes `path` atomically: `fill` writes the contents to a FileWriter on
// temp_path_for(path); the temp file is fsync()ed, renamed over `path`, and
// the parent directory is fsync()ed. On any exception the temp file is
// removed and `path` is left untouched.
void write_file_atomic(
    const std::string& path, const std::function<void(FileWriter&)>& fill);

// fsync()s a directory so that renames and creations inside it are durable.
void fsync_dir(const std::string& dir);

// Renames `from` to `to`, both in the same directory. When `to` is an
// existing directory it is replaced atomically where the filesystem allows
// (renameat2 RENAME_EXCHANGE, then the old contents are deleted); otherwise
// the old `to` is first moved aside to a hidden temp name, so `to` is
// never a mixture of old and new. fsync()s the parent directory.
void rename_replacing(const std::string& from, const std::string& to);

namespace detail {
// rename_replacing's fallback when RENAME_EXCHANGE is unsupported: moves
// an existing directory `to` aside, renames `from` to `to`, fsync()s the
// parent and deletes the old directory. Exposed for tests.
void rename_dir_via_aside(const std::string& from, const std::string& to);
}  // namespace detail

}  // namespace ndt
