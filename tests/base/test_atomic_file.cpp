// Atomic file helpers: FileWriter's byte count and crc32, write_file_atomic
// (replace, or leave the old file untouched on failure), and both paths of
// directory replacement (RENAME_EXCHANGE and the move-aside fallback).
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/atomic_file.h"
#include "base/error.h"
#include "test_util.h"

namespace ndt {
namespace {

namespace fs = std::filesystem;

using test::read_bytes;
using test::TempDir;
using test::write_bytes;

TEST(AtomicFile, FileWriterCountsBytesAndCrc) {
  TempDir dir;
  std::string path = dir.sub("f");
  std::string a = "hello ", b(3000, 'x');
  FileWriter out(path);
  out.write(a.data(), a.size());
  out.write(b.data(), b.size());
  out.write(nullptr, 0);
  out.sync_and_close();
  std::string all = a + b;
  EXPECT_EQ(read_bytes(path), all);
  EXPECT_EQ(out.bytes(), all.size());
  EXPECT_EQ(
      out.crc32(),
      ::crc32(
          0L,
          reinterpret_cast<const Bytef*>(all.data()),
          static_cast<uInt>(all.size())));
}

TEST(AtomicFile, TempPathIsHiddenSibling) {
  EXPECT_EQ(
      temp_path_for("/a/b/step-3"),
      "/a/b/.step-3.tmp-" + std::to_string(::getpid()));
  EXPECT_EQ(temp_path_for("x"), ".x.tmp-" + std::to_string(::getpid()));
}

TEST(AtomicFile, TempPathPidTellsTempNames) {
  const std::string tmp = fs::path(temp_path_for("/a/b/x.1")).filename();
  EXPECT_EQ(temp_path_pid(tmp), static_cast<long>(::getpid()));
  EXPECT_EQ(temp_path_pid(".step-3.tmp-0"), 0L);
  for (const char* name :
       {"x.tmp-12",
        ".x.tmp-",
        ".x.tmp-12a",
        ".b.tmp-12.gz",
        ".x.tmp--12",
        ".x.tmp-99999999999999999999999",
        "x"})
    EXPECT_EQ(temp_path_pid(name), std::nullopt) << name;
}

TEST(AtomicFile, WriteReplacesAndLeavesNoTemp) {
  TempDir dir;
  std::string path = dir.sub("f.txt");
  write_bytes(path, "old");
  write_file_atomic(path, [](FileWriter& out) { out.write("new", 3); });
  EXPECT_EQ(read_bytes(path), "new");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"f.txt"}));
}

TEST(AtomicFile, FailedWriteKeepsOldFile) {
  TempDir dir;
  std::string path = dir.sub("f.txt");
  write_bytes(path, "old");
  EXPECT_THROW(
      write_file_atomic(
          path,
          [](FileWriter& out) {
            out.write("partial", 7);
            throw std::runtime_error("fill failed");
          }),
      std::runtime_error);
  EXPECT_EQ(read_bytes(path), "old");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"f.txt"}));
}

TEST(AtomicFile, ErrorsNameThePath) {
  TempDir dir;
  std::string path = dir.sub("missing/f.txt");
  try {
    FileWriter out(path);
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_THROW(fsync_dir(dir.sub("missing")), Error);
}

// Fills directory `d` with one file `name` holding `text`.
void make_dir(
    const std::string& d, const std::string& name, const std::string& text) {
  fs::create_directories(d);
  write_bytes(d + "/" + name, text);
}

TEST(AtomicFile, RenameReplacingDirectory) {
  TempDir dir;
  make_dir(dir.sub(".new"), "a", "1");
  rename_replacing(dir.sub(".new"), dir.sub("target"));  // absent target
  EXPECT_EQ(read_bytes(dir.sub("target/a")), "1");

  make_dir(dir.sub(".new"), "b", "2");
  rename_replacing(dir.sub(".new"), dir.sub("target"));  // existing target
  EXPECT_FALSE(fs::exists(dir.sub("target/a")));
  EXPECT_EQ(read_bytes(dir.sub("target/b")), "2");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"target"}));
}

TEST(AtomicFile, RenameDirViaAsideFallback) {
  TempDir dir;
  make_dir(dir.sub("target"), "a", "1");
  make_dir(dir.sub(".new"), "b", "2");
  detail::rename_dir_via_aside(dir.sub(".new"), dir.sub("target"));
  EXPECT_FALSE(fs::exists(dir.sub("target/a")));
  EXPECT_EQ(read_bytes(dir.sub("target/b")), "2");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"target"}));
  // A missing source leaves the target in place.
  EXPECT_THROW(
      detail::rename_dir_via_aside(dir.sub(".absent"), dir.sub("target")),
      Error);
  EXPECT_EQ(read_bytes(dir.sub("target/b")), "2");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"target"}));
}

TEST(AtomicFile, RenameReplacingFile) {
  TempDir dir;
  write_bytes(dir.sub("t"), "old");
  write_bytes(dir.sub(".t.new"), "new");
  rename_replacing(dir.sub(".t.new"), dir.sub("t"));
  EXPECT_EQ(read_bytes(dir.sub("t")), "new");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"t"}));
}

}  // namespace
}  // namespace ndt
