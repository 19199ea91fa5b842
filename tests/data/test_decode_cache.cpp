// Decode cache (data/decode_cache.h): an entry gives back exactly the
// bytes stored, from the mapped file and not the allocator; an entry cut
// short or corrupt, or one whose source changed, is not used; a store
// removes stale entries and old temporary files and nothing else; and
// read_idx_gz through a cache maps the entry on the second read, never
// stores a file that fails its checks, and never lets an entry hide an
// error the file itself has.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "base/atomic_file.h"
#include "base/error.h"
#include "data/byte_files.h"
#include "data/decode_cache.h"
#include "data/idx.h"
#include "tensor/memory.h"
#include "test_util.h"

namespace ndt {
namespace {

namespace fs = std::filesystem;
using test::expect_has;
using test::read_raw;
using test::TempDir;
using test::write_gz;
using test::write_raw;

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> out(n);
  uint32_t x = seed;
  for (auto& b : out) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return out;
}

// An IDX file of ubyte [rows, 28]: magic, big-endian dims, payload.
std::vector<uint8_t> idx_file(uint32_t rows, uint32_t seed) {
  std::vector<uint8_t> out = {0, 0, 0x08, 2};
  for (uint32_t d : {rows, 28u}) {
    for (int s = 24; s >= 0; s -= 8)
      out.push_back(static_cast<uint8_t>(d >> s));
  }
  const std::vector<uint8_t> payload = pattern(size_t{rows} * 28, seed);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  return std::vector<uint8_t>(t.data_u8(), t.data_u8() + t.numel());
}

// Requests the allocator has served so far.
int64_t allocations() {
  const MemoryStats s = memory_stats();
  return s.fresh_allocs + s.reused_allocs;
}

// The files in `dir` other than writers' temporary files.
std::vector<std::string> entries(const TempDir& dir, const std::string& sub) {
  std::vector<std::string> out;
  for (const auto& f : fs::directory_iterator(dir.sub(sub))) {
    const std::string name = f.path().filename().string();
    if (!temp_path_pid(name))
      out.push_back(f.path().string());
  }
  return out;
}

TEST(DecodeCache, StoredBytesComeBackExactlyFromTheMappedEntry) {
  TempDir dir;
  write_raw(dir.sub("src.gz"), {1, 2, 3});
  const std::vector<uint8_t> bytes = pattern(300001, 7);
  EXPECT_FALSE(find_decoded(dir.sub("cache"), dir.sub("src.gz")));
  ASSERT_TRUE(store_decoded(
      dir.sub("cache"), dir.sub("src.gz"), bytes.data(), bytes.size()));
  ASSERT_EQ(entries(dir, "cache").size(), 1u);
  EXPECT_EQ(
      fs::path(entries(dir, "cache")[0]).filename().string().rfind("src.", 0),
      0u);
  const int64_t before = allocations();
  std::optional<Tensor> t = find_decoded(dir.sub("cache"), dir.sub("src.gz"));
  ASSERT_TRUE(t);
  EXPECT_EQ(allocations(), before);
  EXPECT_EQ(t->tag(), MemTag::kData);
  EXPECT_EQ(bytes_of(*t), bytes);
  // Writing to the tensor copies the page; the entry stays as stored.
  t->data_u8()[5] ^= 0xff;
  t.reset();
  std::optional<Tensor> again =
      find_decoded(dir.sub("cache"), dir.sub("src.gz"));
  ASSERT_TRUE(again);
  EXPECT_EQ(bytes_of(*again), bytes);
}

TEST(DecodeCache, EntryCutShortOrCorruptIsNotUsed) {
  TempDir dir;
  write_raw(dir.sub("src.gz"), {1, 2, 3});
  const std::vector<uint8_t> bytes = pattern(5000, 3);
  ASSERT_TRUE(store_decoded(
      dir.sub("cache"), dir.sub("src.gz"), bytes.data(), bytes.size()));
  const std::string entry = entries(dir, "cache").at(0);
  const std::vector<uint8_t> good = read_raw(entry);
  ASSERT_TRUE(find_decoded(dir.sub("cache"), dir.sub("src.gz")));
  // One flipped bit in the bytes, in the recorded path, in the CRC, in
  // the tag; the entry cut short by one byte; an empty entry.
  for (size_t at :
       {size_t{0},
        size_t{2500},
        good.size() - 20,
        good.size() - 12,
        good.size() - 1}) {
    std::vector<uint8_t> bad = good;
    bad[at] ^= 1;
    write_raw(entry, bad);
    EXPECT_FALSE(find_decoded(dir.sub("cache"), dir.sub("src.gz")))
        << "bit flipped at byte " << at;
  }
  write_raw(entry, std::vector<uint8_t>(good.begin(), good.end() - 1));
  EXPECT_FALSE(find_decoded(dir.sub("cache"), dir.sub("src.gz")));
  write_raw(entry, {});
  EXPECT_FALSE(find_decoded(dir.sub("cache"), dir.sub("src.gz")));
  write_raw(entry, good);
  EXPECT_TRUE(find_decoded(dir.sub("cache"), dir.sub("src.gz")));
}

TEST(DecodeCache, ChangedSourceDoesNotMeetItsOldEntryWhichTheNextStoreRemoves) {
  TempDir dir;
  const std::string src = dir.sub("src.gz");
  write_raw(src, {1, 2, 3});
  const std::vector<uint8_t> old_bytes = pattern(4000, 1);
  ASSERT_TRUE(
      store_decoded(dir.sub("cache"), src, old_bytes.data(), old_bytes.size()));
  // Same size, new modification time: another file as far as the cache
  // knows.
  fs::last_write_time(src, fs::last_write_time(src) + std::chrono::seconds(5));
  EXPECT_FALSE(find_decoded(dir.sub("cache"), src));
  const std::vector<uint8_t> new_bytes = pattern(4000, 2);
  ASSERT_TRUE(
      store_decoded(dir.sub("cache"), src, new_bytes.data(), new_bytes.size()));
  EXPECT_EQ(entries(dir, "cache").size(), 1u);
  std::optional<Tensor> t = find_decoded(dir.sub("cache"), src);
  ASSERT_TRUE(t);
  EXPECT_EQ(bytes_of(*t), new_bytes);
}

TEST(DecodeCache, StoreRemovesEntriesOfGoneSourcesAndOldTemporariesOnly) {
  TempDir dir;
  const std::string cache = dir.sub("cache");
  write_raw(dir.sub("a.gz"), {1});
  write_raw(dir.sub(".b.tmp-12.gz"), {2});  // an entry, not a temporary
  write_raw(dir.sub("c.gz"), {3});
  const std::vector<uint8_t> bytes = pattern(1000, 5);
  for (const char* s : {"a.gz", ".b.tmp-12.gz"})
    ASSERT_TRUE(store_decoded(cache, dir.sub(s), bytes.data(), bytes.size()));
  ASSERT_EQ(entries(dir, "cache").size(), 2u);
  // A file that is not an entry, a writer's temporary file that died two
  // hours ago and one of a writer still at work.
  write_raw(cache + "/notes.txt", {'h', 'i'});
  write_raw(cache + "/.x.0123456789abcdef.tmp-1", {0});
  write_raw(cache + "/.y.0123456789abcdef.tmp-2", {0});
  const auto two_hours_ago =
      fs::file_time_type::clock::now() - std::chrono::hours(2);
  fs::last_write_time(cache + "/.x.0123456789abcdef.tmp-1", two_hours_ago);
  for (const std::string& e : entries(dir, "cache"))
    fs::last_write_time(e, two_hours_ago);
  fs::remove(dir.sub("a.gz"));
  ASSERT_TRUE(
      store_decoded(cache, dir.sub("c.gz"), bytes.data(), bytes.size()));
  EXPECT_FALSE(find_decoded(cache, dir.sub("a.gz")));
  EXPECT_TRUE(find_decoded(cache, dir.sub(".b.tmp-12.gz")));
  EXPECT_TRUE(find_decoded(cache, dir.sub("c.gz")));
  EXPECT_EQ(entries(dir, "cache").size(), 3u);  // b, c, notes.txt
  EXPECT_TRUE(fs::exists(cache + "/notes.txt"));
  EXPECT_FALSE(fs::exists(cache + "/.x.0123456789abcdef.tmp-1"));
  EXPECT_TRUE(fs::exists(cache + "/.y.0123456789abcdef.tmp-2"));
}

TEST(DecodeCache, UnwritableDirectoryStoresNothing) {
  TempDir dir;
  write_raw(dir.sub("src.gz"), {1});
  write_raw(dir.sub("plain"), {1});
  const std::vector<uint8_t> bytes = pattern(100, 9);
  EXPECT_FALSE(store_decoded(
      dir.sub("plain/cache"), dir.sub("src.gz"), bytes.data(), bytes.size()));
  EXPECT_FALSE(store_decoded(
      dir.sub("cache"), dir.sub("missing.gz"), bytes.data(), bytes.size()));
  EXPECT_FALSE(fs::exists(dir.sub("cache")));
}

TEST(DecodeCache, DefaultDirectoryFollowsXdgThenHome) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string saved_xdg = xdg ? xdg : "", saved_home = home ? home : "";
  setenv("XDG_CACHE_HOME", "/x/cache", 1);
  setenv("HOME", "/h", 1);
  EXPECT_EQ(default_decode_cache_dir(), "/x/cache/ndtrain");
  setenv("XDG_CACHE_HOME", "relative", 1);
  EXPECT_EQ(default_decode_cache_dir(), "/h/.cache/ndtrain");
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(default_decode_cache_dir(), "/h/.cache/ndtrain");
  unsetenv("HOME");
  EXPECT_EQ(default_decode_cache_dir(), "");
  if (xdg)
    setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
  if (home)
    setenv("HOME", saved_home.c_str(), 1);
}

TEST(DecodeCache, ReadIdxStoresOnceThenMapsTheEntry) {
  TempDir dir;
  const std::vector<uint8_t> file = idx_file(500, 11);
  write_gz(dir.sub("f.gz"), file);
  const IdxArray first =
      read_idx_gz(dir.sub("f.gz"), kIdxUbyte, 2, dir.sub("c"));
  ASSERT_EQ(entries(dir, "c").size(), 1u);
  const int64_t before = allocations();
  const IdxArray second =
      read_idx_gz(dir.sub("f.gz"), kIdxUbyte, 2, dir.sub("c"));
  EXPECT_EQ(allocations(), before);  // mapped, not decoded
  EXPECT_EQ(second.dims, (std::vector<int64_t>{500, 28}));
  EXPECT_EQ(bytes_of(second.data), bytes_of(first.data));
  EXPECT_EQ(
      bytes_of(second.data),
      std::vector<uint8_t>(file.begin() + 12, file.end()));
}

TEST(DecodeCache, ReadIdxDecodesAgainPastACorruptEntryAndRewritesIt) {
  TempDir dir;
  const std::vector<uint8_t> file = idx_file(300, 12);
  write_gz(dir.sub("f.gz"), file);
  (void)read_idx_gz(dir.sub("f.gz"), kIdxUbyte, 2, dir.sub("c"));
  const std::string entry = entries(dir, "c").at(0);
  std::vector<uint8_t> bad = read_raw(entry);
  bad[100] ^= 0x40;
  write_raw(entry, bad);
  const IdxArray a = read_idx_gz(dir.sub("f.gz"), kIdxUbyte, 2, dir.sub("c"));
  EXPECT_EQ(
      bytes_of(a.data), std::vector<uint8_t>(file.begin() + 12, file.end()));
  std::optional<Tensor> whole = find_decoded(dir.sub("c"), dir.sub("f.gz"));
  ASSERT_TRUE(whole);
  EXPECT_EQ(bytes_of(*whole), file);
}

TEST(DecodeCache, EntryNeverHidesAnErrorOfTheFile) {
  TempDir dir;
  write_gz(dir.sub("f.gz"), idx_file(10, 13));
  (void)read_idx_gz(dir.sub("f.gz"), kIdxUbyte, 2, dir.sub("c"));
  // The entry holds a 2-dim file; asked for 1 dim, the file is decoded
  // and its own error reported.
  try {
    (void)read_idx_gz(dir.sub("f.gz"), kIdxUbyte, 1, dir.sub("c"));
    FAIL() << "no DataError";
  } catch (const DataError& e) {
    expect_has(e.what(), {dir.sub("f.gz"), "wrong magic"});
  }
  // An entry whose bytes pass as the asked-for dims by size alone (a
  // 2-dim header whose next 4 bytes read as a third dim of 0) is not one.
  const std::vector<uint8_t> fake = {
      0, 0, 8, 2, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 0};
  ASSERT_TRUE(
      store_decoded(dir.sub("c"), dir.sub("f.gz"), fake.data(), fake.size()));
  EXPECT_THROW(
      (void)read_idx_gz(dir.sub("f.gz"), kIdxUbyte, 3, dir.sub("c")),
      DataError);
  // A file that fails its checks leaves no entry.
  std::vector<uint8_t> long_file = idx_file(10, 14);
  long_file.push_back(7);
  write_gz(dir.sub("g.gz"), long_file);
  EXPECT_THROW(
      (void)read_idx_gz(dir.sub("g.gz"), kIdxUbyte, 2, dir.sub("d")),
      DataError);
  EXPECT_FALSE(fs::exists(dir.sub("d")));
}

}  // namespace
}  // namespace ndt
