// Checkpoint directories: bit-exact round trip, manifest contents, atomic
// save (leftover temp dirs of a crashed save are ignored and never look
// complete), replacement of an existing step, writing and reading one
// tensor at a time, and detection of truncated, corrupt or missing files
// with messages naming the file. All exact.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "io/checkpoint.h"
#include "test_util.h"

namespace ndt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using test::read_bytes;
using test::TempDir;
using test::write_bytes;

uint32_t crc32_of(const std::string& bytes) {
  return static_cast<uint32_t>(::crc32(
      0L,
      reinterpret_cast<const Bytef*>(bytes.data()),
      static_cast<uInt>(bytes.size())));
}

std::string tensor_bytes(const Tensor& t) {
  const void* p = t.dtype() == DType::kF32
                      ? static_cast<const void*>(t.data())
                      : static_cast<const void*>(t.data_i32());
  return std::string(static_cast<const char*>(p), t.numel() * 4);
}

void expect_same(
    const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].tensor.dtype(), b[i].tensor.dtype()) << a[i].name;
    EXPECT_EQ(a[i].tensor.shape(), b[i].tensor.shape()) << a[i].name;
    EXPECT_EQ(tensor_bytes(a[i].tensor), tensor_bytes(b[i].tensor))
        << a[i].name;
  }
}

void expect_checkpoint_error(
    const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected CheckpointError";
  } catch (const CheckpointError& e) {
    std::string msg = e.what();
    for (const auto& part : parts) {
      EXPECT_NE(msg.find(part), std::string::npos)
          << "message lacks \"" << part << "\": " << msg;
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected CheckpointError, got: " << e.what();
  }
}

Checkpoint sample_checkpoint(uint64_t seed) {
  Checkpoint c;
  c.manifest = {{"model", "gpt"}, {"lr", 0.001}, {"layers", {1, 2}}};
  c.model = {
      {"wte", test::randn({16, 8}, seed, "wte")},
      {"h.0.ln.weight", test::randn({8}, seed, "ln")},
  };
  Tensor count({1}, MemTag::kOther, DType::kI32);
  count.data_i32()[0] = static_cast<int32_t>(seed);
  c.optimizer = {
      {"wte.exp_avg", test::randn({16, 8}, seed, "m")},
      {"step", count},
  };
  return c;
}

// Names of the entries of `dir`, sorted.
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(Checkpoint, RoundTripIsBitExact) {
  TempDir root;
  Checkpoint c = sample_checkpoint(20);
  std::string dir = save_checkpoint(root.str(), 20, c);
  EXPECT_EQ(dir, root.sub("step-20"));
  EXPECT_EQ(
      entries(dir),
      (std::vector<std::string>{
          "manifest.json", "model.safetensors", "optimizer.safetensors"}));
  EXPECT_EQ(entries(root.str()), (std::vector<std::string>{"step-20"}));

  Checkpoint loaded = load_checkpoint(dir);
  expect_same(loaded.model, c.model);
  expect_same(loaded.optimizer, c.optimizer);
  EXPECT_EQ(loaded.manifest["model"], "gpt");
  EXPECT_EQ(loaded.manifest["lr"], 0.001);
  EXPECT_EQ(loaded.manifest["layers"], json({1, 2}));
  EXPECT_EQ(loaded.manifest["format"], "ndtrain-checkpoint-v1");
  EXPECT_EQ(loaded.manifest["step"], 20);
  // Trailing slash is accepted.
  expect_same(load_checkpoint(dir + "/").model, c.model);
}

std::vector<TensorSpec> specs_of(const std::vector<NamedTensor>& ts) {
  std::vector<TensorSpec> out;
  for (const NamedTensor& t : ts)
    out.push_back({t.name, t.tensor.dtype(), t.tensor.shape()});
  return out;
}

TEST(Checkpoint, WriterAndReaderStreamWhatSaveAndLoadMove) {
  // Tensor by tensor: the same bytes in every file as save_checkpoint,
  // and each tensor read alone equals the whole load's.
  TempDir whole, streamed;
  const Checkpoint c = sample_checkpoint(3);
  const std::string want = save_checkpoint(whole.str(), 3, c);
  CheckpointWriter w(
      streamed.str(), 3, specs_of(c.model), specs_of(c.optimizer));
  // The files are written independently: interleave them.
  w.write_optimizer(c.optimizer[0].tensor);
  w.write_model(c.model[0].tensor);
  w.write_model(c.model[1].tensor);
  w.write_optimizer(c.optimizer[1].tensor);
  EXPECT_TRUE(list_checkpoints(streamed.str()).empty());  // until finished
  const std::string got = w.finish(c.manifest);
  EXPECT_EQ(got, streamed.sub("step-3"));
  for (const char* f :
       {"manifest.json", "model.safetensors", "optimizer.safetensors"}) {
    EXPECT_EQ(read_bytes(got + "/" + f), read_bytes(want + "/" + f)) << f;
  }
  const CheckpointReader r(got);
  EXPECT_EQ(r.manifest()["step"], 3);
  for (const auto& [file, ts] :
       {std::pair{&r.model(), &c.model},
        std::pair{&r.optimizer(), &c.optimizer}}) {
    ASSERT_EQ(file->tensors().size(), ts->size());
    for (const NamedTensor& t : *ts) {
      const int64_t i = file->find(t.name);
      ASSERT_GE(i, 0) << t.name;
      expect_same({{t.name, file->read(static_cast<size_t>(i))}}, {t});
    }
  }
  EXPECT_EQ(r.model().find("absent"), -1);
}

TEST(Checkpoint, UnfinishedWriterLeavesNoTrace) {
  TempDir root;
  const Checkpoint c = sample_checkpoint(4);
  save_checkpoint(root.str(), 4, c);
  {
    CheckpointWriter w(root.str(), 4, specs_of(c.model), specs_of(c.optimizer));
    w.write_model(c.model[0].tensor);
    // A tensor other than the one declared next is a bug in the caller.
    EXPECT_THROW(w.write_model(c.model[0].tensor), Error);
    // So is finishing before every declared tensor is written.
    EXPECT_THROW(w.finish(c.manifest), Error);
  }
  EXPECT_EQ(entries(root.str()), (std::vector<std::string>{"step-4"}));
  expect_same(load_checkpoint(root.sub("step-4")).model, c.model);
}

TEST(Checkpoint, ManifestRecordsSizeAndCrcOfEachFile) {
  TempDir root;
  std::string dir = save_checkpoint(root.str(), 5, sample_checkpoint(5));
  json m = json::parse(read_bytes(dir + "/manifest.json"));
  for (const char* name : {"model.safetensors", "optimizer.safetensors"}) {
    std::string bytes = read_bytes(dir + "/" + name);
    EXPECT_EQ(m["files"][name]["bytes"], bytes.size()) << name;
    EXPECT_EQ(m["files"][name]["crc32"], crc32_of(bytes)) << name;
  }
  EXPECT_EQ(m["files"].size(), 2u);
  EXPECT_EQ(m["format"], kCheckpointFormat);
  EXPECT_EQ(m["step"], 5);
}

TEST(Checkpoint, NullManifestAndEmptyTensorLists) {
  TempDir root;
  Checkpoint c;
  std::string dir = save_checkpoint(root.str(), 0, c);
  Checkpoint loaded = load_checkpoint(dir);
  EXPECT_TRUE(loaded.model.empty());
  EXPECT_TRUE(loaded.optimizer.empty());
  EXPECT_EQ(loaded.manifest["step"], 0);
}

TEST(Checkpoint, SaveCreatesNestedRoot) {
  TempDir tmp;
  std::string root = tmp.sub("runs/x/checkpoints");
  std::string dir = save_checkpoint(root, 3, sample_checkpoint(3));
  EXPECT_EQ(latest_checkpoint(root), dir);
}

TEST(Checkpoint, SaveRejectsBadInput) {
  TempDir root;
  expect_checkpoint_error(
      [&] { save_checkpoint(root.str(), -1, sample_checkpoint(1)); },
      {"step -1 is negative"});
  Checkpoint c = sample_checkpoint(1);
  c.manifest = json::array({1});
  expect_checkpoint_error(
      [&] { save_checkpoint(root.str(), 1, c); },
      {"manifest must be a JSON object, got array"});
  EXPECT_TRUE(entries(root.str()).empty());
}

TEST(Checkpoint, FailedSaveLeavesNoTraceAndKeepsOldStep) {
  TempDir root;
  Checkpoint good = sample_checkpoint(7);
  save_checkpoint(root.str(), 7, good);
  Checkpoint bad = sample_checkpoint(8);
  bad.optimizer.push_back(bad.optimizer[0]);  // duplicate name
  expect_checkpoint_error(
      [&] { save_checkpoint(root.str(), 7, bad); },
      {"cannot write " + root.sub("step-7/optimizer.safetensors"),
       "duplicate tensor name 'wte.exp_avg'"});
  EXPECT_EQ(entries(root.str()), (std::vector<std::string>{"step-7"}));
  expect_same(load_checkpoint(root.sub("step-7")).model, good.model);
}

TEST(Checkpoint, OverwriteExistingStep) {
  TempDir root;
  save_checkpoint(root.str(), 10, sample_checkpoint(1));
  // A different set of tensors under the same step.
  Checkpoint second = sample_checkpoint(2);
  second.model.pop_back();
  second.manifest["run"] = "second";
  std::string dir = save_checkpoint(root.str(), 10, second);
  Checkpoint loaded = load_checkpoint(dir);
  expect_same(loaded.model, second.model);
  expect_same(loaded.optimizer, second.optimizer);
  EXPECT_EQ(loaded.manifest["run"], "second");
  EXPECT_EQ(entries(root.str()), (std::vector<std::string>{"step-10"}));
  EXPECT_EQ(entries(dir).size(), 3u);
}

TEST(Checkpoint, ListSortsNumericallyAndIgnoresOtherEntries) {
  TempDir root;
  for (int64_t step : {100, 20, 3}) {
    save_checkpoint(root.str(), step, sample_checkpoint(step));
  }
  fs::create_directories(root.sub("step-abc"));
  fs::create_directories(root.sub("step-07"));
  fs::create_directories(root.sub("step-"));
  fs::create_directories(root.sub("step-99999999999999999999"));
  fs::create_directories(root.sub(".step-200.tmp-12345"));
  fs::create_directories(root.sub("other"));
  write_bytes(root.sub("step-500"), "a file, not a directory");
  EXPECT_EQ(
      list_checkpoints(root.str()),
      (std::vector<std::string>{
          root.sub("step-3"), root.sub("step-20"), root.sub("step-100")}));
  EXPECT_EQ(latest_checkpoint(root.str()), root.sub("step-100"));
}

TEST(Checkpoint, ListOfMissingOrEmptyRoot) {
  TempDir root;
  EXPECT_TRUE(list_checkpoints(root.str()).empty());
  EXPECT_EQ(latest_checkpoint(root.str()), "");
  EXPECT_TRUE(list_checkpoints(root.sub("absent")).empty());
  EXPECT_EQ(latest_checkpoint(root.sub("absent")), "");
  write_bytes(root.sub("file"), "x");
  expect_checkpoint_error(
      [&] { list_checkpoints(root.sub("file")); }, {"is not a directory"});
}

// A save that died before its rename leaves a hidden temp dir (tensor files
// written, no manifest yet): it is not listed and does not load.
TEST(Checkpoint, LeftoverTempDirOfCrashedSaveIsIgnored) {
  TempDir root;
  save_checkpoint(root.str(), 20, sample_checkpoint(20));
  int other_pid = 99999;  // a pid that no process has now
  while (other_pid == ::getpid() || ::kill(other_pid, 0) == 0 ||
         errno == EPERM) {
    ++other_pid;
  }
  std::string crashed = root.sub(".step-30.tmp-" + std::to_string(other_pid));
  fs::create_directories(crashed);
  fs::copy_file(
      root.sub("step-20/model.safetensors"), crashed + "/model.safetensors");
  write_bytes(crashed + "/optimizer.safetensors", "partial");

  EXPECT_EQ(
      list_checkpoints(root.str()),
      (std::vector<std::string>{root.sub("step-20")}));
  EXPECT_EQ(latest_checkpoint(root.str()), root.sub("step-20"));
  expect_checkpoint_error(
      [&] { load_checkpoint(crashed); },
      {crashed, "incomplete", "manifest.json is missing"});

  // A temp dir of a live process (our parent) is another save in flight:
  // left alone. The next save removes the dead process's stale dir.
  std::string live =
      root.sub(".step-40.tmp-" + std::to_string(static_cast<int>(::getppid())));
  fs::create_directories(live);
  save_checkpoint(root.str(), 30, sample_checkpoint(30));
  EXPECT_EQ(latest_checkpoint(root.str()), root.sub("step-30"));
  EXPECT_FALSE(fs::exists(crashed));
  EXPECT_TRUE(fs::exists(live));
}

TEST(CheckpointCorrupt, FlippedDataByteIsCrcMismatch) {
  for (const char* name : {"model.safetensors", "optimizer.safetensors"}) {
    TempDir root;
    std::string dir = save_checkpoint(root.str(), 20, sample_checkpoint(20));
    std::string path = dir + "/" + name;
    std::string bytes = read_bytes(path);
    bytes[bytes.size() - 5] ^= 0x10;  // inside the last tensor's data
    write_bytes(path, bytes);
    // The file itself still parses: only the manifest checksum catches it.
    EXPECT_NO_THROW(read_safetensors(path));
    expect_checkpoint_error(
        [&] { load_checkpoint(dir); },
        {"checkpoint " + path + " is corrupt: crc32 mismatch (expected "});
  }
}

TEST(CheckpointCorrupt, TruncatedFile) {
  TempDir root;
  std::string dir = save_checkpoint(root.str(), 20, sample_checkpoint(20));
  std::string path = dir + "/model.safetensors";
  std::string bytes = read_bytes(path);
  for (size_t cut : {size_t{0}, size_t{7}, size_t{100}, bytes.size() - 1}) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    write_bytes(path, bytes.substr(0, cut));
    expect_checkpoint_error(
        [&] { load_checkpoint(dir); },
        {"checkpoint " + path + " is truncated: " + std::to_string(cut) +
         " bytes, manifest says " + std::to_string(bytes.size())});
  }
  write_bytes(path, bytes + "junk");
  expect_checkpoint_error(
      [&] { load_checkpoint(dir); },
      {path + " is corrupt: " + std::to_string(bytes.size() + 4) +
       " bytes, manifest says " + std::to_string(bytes.size())});
  write_bytes(path, bytes);
  EXPECT_NO_THROW(load_checkpoint(dir));
}

TEST(CheckpointCorrupt, MissingFiles) {
  TempDir root;
  expect_checkpoint_error(
      [&] { load_checkpoint(root.sub("step-1")); },
      {root.sub("step-1"), "does not exist"});
  std::string dir = save_checkpoint(root.str(), 20, sample_checkpoint(20));
  fs::remove(dir + "/optimizer.safetensors");
  expect_checkpoint_error(
      [&] { load_checkpoint(dir); },
      {dir + "/optimizer.safetensors is missing"});
  fs::remove(dir + "/manifest.json");
  expect_checkpoint_error(
      [&] { load_checkpoint(dir); }, {"manifest.json is missing"});
}

TEST(CheckpointCorrupt, BadManifest) {
  TempDir root;
  std::string dir = save_checkpoint(root.str(), 20, sample_checkpoint(20));
  std::string path = dir + "/manifest.json";
  json good = json::parse(read_bytes(path));

  write_bytes(path, read_bytes(path).substr(0, 40));
  expect_checkpoint_error(
      [&] { load_checkpoint(dir); }, {path, "is not valid JSON"});

  write_bytes(path, "[1]");
  expect_checkpoint_error(
      [&] { load_checkpoint(dir); }, {path, "is not a JSON object"});

  json m = good;
  m["format"] = "something-else";
  write_bytes(path, m.dump());
  expect_checkpoint_error(
      [&] { load_checkpoint(dir); },
      {path,
       "has format \"something-else\"",
       "expected \"ndtrain-checkpoint-v1\""});
  m.erase("format");
  write_bytes(path, m.dump());
  expect_checkpoint_error(
      [&] { load_checkpoint(dir); }, {"has format (missing)"});

  m = good;
  m["step"] = 21;
  write_bytes(path, m.dump());
  expect_checkpoint_error(
      [&] { load_checkpoint(dir); },
      {"says step 21 but the directory is step-20"});

  m = good;
  m["files"].erase("model.safetensors");
  write_bytes(path, m.dump());
  expect_checkpoint_error(
      [&] { load_checkpoint(dir); }, {"does not list model.safetensors"});

  m = good;
  m["files"]["model.safetensors"].erase("crc32");
  write_bytes(path, m.dump());
  expect_checkpoint_error(
      [&] { load_checkpoint(dir); },
      {"files[\"model.safetensors\"]", "expected {\"bytes\": n"});

  m = good;
  m["files"]["../step-20/model.safetensors"] =
      good["files"]["model.safetensors"];
  write_bytes(path, m.dump());
  expect_checkpoint_error(
      [&] { load_checkpoint(dir); }, {"lists an invalid file name"});

  write_bytes(path, good.dump());
  EXPECT_NO_THROW(load_checkpoint(dir));
}

// A file whose manifest entry matches but whose contents are not valid
// safetensors is still rejected by the parser, naming the file.
TEST(CheckpointCorrupt, ConsistentManifestButInvalidSafetensors) {
  TempDir root;
  std::string dir = save_checkpoint(root.str(), 20, sample_checkpoint(20));
  std::string path = dir + "/model.safetensors";
  std::string garbage = std::string(8, '\0') + "garbage";
  write_bytes(path, garbage);
  json m = json::parse(read_bytes(dir + "/manifest.json"));
  m["files"]["model.safetensors"] = {
      {"bytes", garbage.size()}, {"crc32", crc32_of(garbage)}};
  write_bytes(dir + "/manifest.json", m.dump());
  expect_checkpoint_error(
      [&] { load_checkpoint(dir); }, {path, "header is not valid JSON"});
}

}  // namespace
}  // namespace ndt
