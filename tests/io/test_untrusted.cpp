// Untrusted input at the unit level: deeply nested JSON in manifests,
// safetensors headers and stored configs (each once overflowed the stack
// through a recursive dump or conversion), manifests that are not small
// regular files, negative or wrapped steps, and names with control
// characters in messages.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "base/error.h"
#include "io/checkpoint.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "io/untrusted.h"
#include "test_util.h"

namespace ndt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::read_bytes;
using test::TempDir;
using test::write_bytes;

std::string nested(int depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

template <typename E>
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception of the expected type";
  return "";
}

// A saved checkpoint whose manifest text is replaced by `edit(text)`.
std::string checkpoint_with_manifest(
    const TempDir& root,
    const std::function<std::string(const std::string&)>& edit) {
  Checkpoint c;
  c.manifest = {{"note", "x"}};
  c.model = {{"w", test::randn({4, 3}, 1, "w")}};
  c.optimizer = {{"w.exp_avg", test::randn({4, 3}, 1, "m")}};
  std::string dir = save_checkpoint(root.str(), 2, c);
  std::string path = dir + "/manifest.json";
  write_bytes(path, edit(read_bytes(path)));
  return dir;
}

std::string replace(
    std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos)
    text.replace(at, from.size(), to);
  return text;
}

TEST(Untrusted, DepthScanIgnoresBracketsInStrings) {
  EXPECT_EQ(json_depth_exceeded_at("[[1]]", 2), std::string::npos);
  EXPECT_EQ(json_depth_exceeded_at("[[[1]]]", 2), 2u);
  EXPECT_EQ(
      json_depth_exceeded_at(R"({"a": "[[[[\"[[["})", 1), std::string::npos);
  EXPECT_EQ(json_depth_exceeded_at(R"({"a\\": [[1]]})", 2), 9u);
  EXPECT_EQ(json_depth_exceeded_at(nested(100000), 64), 64u);
}

TEST(Untrusted, PrintableEscapesControlCharacters) {
  EXPECT_EQ(
      printable(std::string("a\0b\x1b[31m\\", 9)), "a\\x00b\\x1b[31m\\\\");
  EXPECT_EQ(printable(std::string(300, 'x'), 10), std::string(10, 'x') + "...");
}

TEST(Untrusted, ExcerptIsBounded) {
  json deep = json::parse(nested(60));
  EXPECT_EQ(json_excerpt(deep), "[[[[...]]]]");
  json wide = json::array();
  for (int i = 0; i < 1000; ++i)
    wide.push_back(i);
  EXPECT_LE(json_excerpt(wide, 40).size(), 43u);
  EXPECT_EQ(json_excerpt(json("a\x1b")), "\"a\\x1b\"");
}

TEST(UntrustedManifest, DeepFormatFilesOrConfigIsAnError) {
  TempDir root;
  for (const auto& [from, to] : {
           std::pair<std::string, std::string>{
               "\"ndtrain-checkpoint-v1\"", nested(100000)},
           {"\"files\": {", "\"files\": {\"x\": " + nested(100000) + ", "},
           {"\"note\": \"x\"", "\"config\": {\"a\": " + nested(20000) + "}"},
       }) {
    std::string dir = checkpoint_with_manifest(
        root, [&](const std::string& t) { return replace(t, from, to); });
    std::string msg = error_of<CheckpointError>([&] { load_checkpoint(dir); });
    EXPECT_NE(msg.find("deeper than 64 levels"), std::string::npos) << msg;
    EXPECT_NE(msg.find("manifest.json"), std::string::npos) << msg;
  }
}

TEST(UntrustedManifest, NegativeOrWrappedStepIsAnError) {
  for (const char* step : {"-1", "-1000", "18446744073709551615", "1.5"}) {
    TempDir root;
    std::string dir = checkpoint_with_manifest(root, [&](const std::string& t) {
      return replace(t, "\"step\": 2", std::string("\"step\": ") + step);
    });
    fs::rename(dir, root.sub("ck"));
    std::string msg =
        error_of<CheckpointError>([&] { load_checkpoint(root.sub("ck")); });
    EXPECT_NE(msg.find("expected a non-negative integer"), std::string::npos)
        << msg;
  }
}

TEST(UntrustedManifest, OnlySmallRegularFiles) {
  TempDir root;
  std::string dir =
      checkpoint_with_manifest(root, [](const std::string& t) { return t; });
  std::string manifest = dir + "/manifest.json";
  fs::remove(manifest);
  fs::create_symlink("/dev/zero", manifest);
  std::string msg = error_of<CheckpointError>([&] { load_checkpoint(dir); });
  EXPECT_NE(msg.find("is not a regular file"), std::string::npos) << msg;

  fs::remove(manifest);
  ASSERT_EQ(::mkfifo(manifest.c_str(), 0600), 0);
  msg = error_of<CheckpointError>([&] { load_checkpoint(dir); });  // no hang
  EXPECT_NE(msg.find("is not a regular file"), std::string::npos) << msg;

  fs::remove(manifest);
  write_bytes(manifest, "{}");
  fs::resize_file(manifest, kMaxManifestBytes + 1);
  msg = error_of<CheckpointError>([&] { load_checkpoint(dir); });
  EXPECT_NE(msg.find("more than the limit"), std::string::npos) << msg;
}

TEST(UntrustedManifest, ControlCharactersInFileNamesAreEscaped) {
  TempDir root;
  std::string dir = checkpoint_with_manifest(root, [](const std::string& t) {
    return replace(t, "\"files\": {", "\"files\": {\"a\\u0000\\u001b\": {}, ");
  });
  std::string msg = error_of<CheckpointError>([&] { load_checkpoint(dir); });
  EXPECT_NE(msg.find("'a\\x00\\x1b'"), std::string::npos) << msg;
}

TEST(UntrustedSafetensors, DeepShapeOrOffsetsIsAnError) {
  for (const char* field : {"shape", "data_offsets"}) {
    TempDir dir;
    std::string header = std::string("{\"t\": {\"dtype\": \"F32\", \"") +
                         field + "\": " + nested(100000) + "}}";
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i)
      bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    std::string path = dir.sub("deep.safetensors");
    write_bytes(path, bytes + header);
    std::string msg =
        error_of<CheckpointError>([&] { read_safetensors(path); });
    EXPECT_NE(msg.find("nests JSON deeper than 64"), std::string::npos) << msg;
  }
}

TEST(UntrustedSafetensors, FifoIsRefusedWithoutWaiting) {
  TempDir dir;
  std::string path = dir.sub("fifo.safetensors");
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  std::string msg = error_of<CheckpointError>([&] { read_safetensors(path); });
  EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
}

TEST(UntrustedConfig, DeepJsonConfigIsAnError) {
  json j = json::parse("{\"train\": {\"steps\": " + nested(20000) + "}}");
  std::string msg = error_of<ConfigError>([&] { config_from_json(j); });
  EXPECT_NE(msg.find("nests deeper than 64"), std::string::npos) << msg;
}

}  // namespace
}  // namespace ndt
