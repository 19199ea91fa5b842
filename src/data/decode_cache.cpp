#include "data/decode_cache.h"

#include <fcntl.h>
#include <libdeflate.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "base/atomic_file.h"
#include "base/error.h"
#include "data/mapped_file.h"

namespace ndt {
namespace {

namespace fs = std::filesystem;

constexpr char kTag[8] = {'N', 'D', 'T', 'D', 'E', 'C', '0', '1'};
// Path length, CRC-32, tag.
constexpr size_t kTailBytes = 16;
constexpr size_t kMaxPathBytes = 4096;
// Temporary files older than this are left by writers that died.
constexpr auto kStaleTemp = std::chrono::hours(1);

// FNV-1a, 64 bits.
uint64_t mix(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

struct Entry {
  std::string source;  // canonical path of the source
  std::string path;    // of the entry
};

// The entry for `source`, or nullopt when the source cannot be
// identified.
std::optional<Entry> entry_for(
    const std::string& dir, const std::string& source) {
  std::error_code ec;
  const fs::path canon = fs::canonical(source, ec);
  struct stat st {};
  if (ec || stat(canon.c_str(), &st) != 0)
    return std::nullopt;
  Entry e;
  e.source = canon.string();
  if (e.source.size() > kMaxPathBytes)
    return std::nullopt;
  const uint64_t id[] = {
      static_cast<uint64_t>(st.st_dev),
      static_cast<uint64_t>(st.st_ino),
      static_cast<uint64_t>(st.st_size),
      static_cast<uint64_t>(st.st_mtim.tv_sec),
      static_cast<uint64_t>(st.st_mtim.tv_nsec)};
  uint64_t h = mix(14695981039346656037ull, e.source.data(), e.source.size());
  h = mix(h, id, sizeof id);
  std::string name = canon.filename().string();
  if (name.size() > 3 && name.compare(name.size() - 3, 3, ".gz") == 0)
    name.resize(name.size() - 3);
  char hex[20];
  std::snprintf(
      hex, sizeof hex, ".%016llx", static_cast<unsigned long long>(h));
  e.path = dir + "/" + name + hex;
  return e;
}

void put_u32(uint8_t* out, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint32_t get_u32(const uint8_t* in) {
  return uint32_t{in[0]} | uint32_t{in[1]} << 8 | uint32_t{in[2]} << 16 |
         uint32_t{in[3]} << 24;
}

// The source path a file of ours in the cache records, read from its end;
// nullopt for any other file.
std::optional<std::string> recorded_source(const std::string& file) {
  const int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return std::nullopt;
  std::optional<std::string> out;
  struct stat st {};
  uint8_t tail[kTailBytes];
  if (fstat(fd, &st) == 0 && st.st_size >= off_t{kTailBytes} &&
      pread(fd, tail, kTailBytes, st.st_size - off_t{kTailBytes}) ==
          ssize_t{kTailBytes} &&
      std::memcmp(tail + 8, kTag, sizeof kTag) == 0) {
    const uint32_t len = get_u32(tail);
    std::string path(len, '\0');
    const off_t at = st.st_size - off_t{kTailBytes} - off_t{len};
    if (len <= kMaxPathBytes && at >= 0 &&
        pread(fd, path.data(), len, at) == ssize_t(len))
      out = std::move(path);
  }
  close(fd);
  return out;
}

// Removes the entries in `dir` whose source is gone or is not the file
// it was (the entry's name differs from the one the source has now), and
// temporary files of ours older than kStaleTemp.
void prune(const std::string& dir) {
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (const fs::directory_entry& f : fs::directory_iterator(dir, ec)) {
    std::error_code fec;
    if (!f.is_regular_file(fec))
      continue;
    const std::string path = f.path().string();
    if (temp_path_pid(f.path().filename().string())) {  // a writer's
      const auto written = f.last_write_time(fec);
      if (!fec && now - written > kStaleTemp)
        fs::remove(f.path(), fec);
      continue;
    }
    const std::optional<std::string> source = recorded_source(path);
    if (!source)
      continue;
    const std::optional<Entry> now_entry = entry_for(dir, *source);
    if (!now_entry ||
        fs::path(now_entry->path).filename() != f.path().filename())
      fs::remove(f.path(), fec);
  }
}

}  // namespace

std::optional<Tensor> find_decoded(
    const std::string& dir, const std::string& source) {
  const std::optional<Entry> e = entry_for(dir, source);
  if (!e)
    return std::nullopt;
  auto file = std::make_shared<MappedFile>(e->path, MappedFile::Mode::kPrivate);
  const size_t room = e->source.size() + kTailBytes;
  if (!file->ok() || file->size() <= room)
    return std::nullopt;
  const size_t n = file->size() - room;
  const uint8_t* tail = file->data() + file->size() - kTailBytes;
  if (std::memcmp(tail + 8, kTag, sizeof kTag) != 0 ||
      get_u32(tail) != e->source.size() ||
      std::memcmp(file->data() + n, e->source.data(), e->source.size()) != 0 ||
      get_u32(tail + 4) != libdeflate_crc32(0, file->data(), n))
    return std::nullopt;
  uint8_t* bytes = file->data();
  return Tensor::borrowed(
      bytes, {static_cast<int64_t>(n)}, DType::kU8, std::move(file));
}

bool store_decoded(
    const std::string& dir,
    const std::string& source,
    const uint8_t* bytes,
    int64_t n) {
  const std::optional<Entry> e = entry_for(dir, source);
  std::error_code ec;
  if (!e || n <= 0 || (fs::create_directories(dir, ec), ec))
    return false;
  prune(dir);
  try {
    write_file_atomic(e->path, [&](FileWriter& out) {
      out.write(bytes, static_cast<size_t>(n));
      uint8_t tail[kTailBytes];
      put_u32(tail, static_cast<uint32_t>(e->source.size()));
      put_u32(tail + 4, out.crc32());  // of the bytes: the same CRC-32
      std::memcpy(tail + 8, kTag, sizeof kTag);
      out.write(e->source.data(), e->source.size());
      out.write(tail, kTailBytes);
    });
  } catch (const Error&) {
    return false;  // best effort; write_file_atomic leaves nothing behind
  }
  return true;
}

std::string default_decode_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/')
    return std::string(xdg) + "/ndtrain";
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] != '\0')
    return std::string(home) + "/.cache/ndtrain";
  return "";
}

}  // namespace ndt
