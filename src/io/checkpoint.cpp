#include "io/checkpoint.h"

#include <signal.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>

#include "base/atomic_file.h"
#include "base/check.h"
#include "io/untrusted.h"

namespace ndt {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kManifestFile = "manifest.json";
constexpr std::string_view kStepPrefix = "step-";

// N for a directory named exactly "step-<N>" (decimal, no sign, no leading
// zeros, fits int64); nullopt for anything else, including temp dirs.
std::optional<int64_t> parse_step_name(std::string_view name) {
  if (name.substr(0, kStepPrefix.size()) != kStepPrefix)
    return std::nullopt;
  std::string_view digits = name.substr(kStepPrefix.size());
  if (digits.empty() || (digits.size() > 1 && digits[0] == '0')) {
    return std::nullopt;
  }
  for (char c : digits) {
    if (c < '0' || c > '9')
      return std::nullopt;
  }
  int64_t step = 0;
  auto [ptr, ec] =
      std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || ptr != digits.data() + digits.size()) {
    return std::nullopt;
  }
  return step;
}

std::string join(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / name).string();
}

void remove_quietly(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}

// Temp directories ".step-<N>.tmp-<pid>" of saves whose process is gone
// (killed mid-write): nothing will finish or remove them but us. A live
// pid's (another job writing into the same root) are left alone.
void remove_stale_temps(const std::string& root) {
  std::error_code ec;
  fs::directory_iterator it(root, ec);
  if (ec)
    return;
  for (const auto& entry : it) {
    std::string name = entry.path().filename().string();
    const std::optional<long> pid = temp_path_pid(name);
    if (!name.starts_with(".step-") || !pid || *pid <= 0)
      continue;
    const bool alive =
        ::kill(static_cast<pid_t>(*pid), 0) == 0 || errno == EPERM;
    if (!alive || *pid == static_cast<long>(::getpid()))
      remove_quietly(entry.path().string());
  }
}

// zlib crc32 of a whole file, read in 1 MiB chunks.
uint32_t file_crc32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  NDT_CHECK(in, CheckpointError, "cannot open checkpoint file ", path);
  uLong crc = ::crc32(0L, Z_NULL, 0);
  std::vector<char> buf(size_t{1} << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    std::streamsize n = in.gcount();
    if (n > 0) {
      crc = ::crc32(
          crc,
          reinterpret_cast<const Bytef*>(buf.data()),
          static_cast<uInt>(n));
    }
  }
  NDT_CHECK(in.eof(), CheckpointError, "read error in checkpoint file ", path);
  return static_cast<uint32_t>(crc);
}

// Verifies one file listed in the manifest's "files" against its entry.
void verify_file(
    const std::string& dir, const std::string& name, const json& entry) {
  std::string manifest_path = join(dir, kManifestFile);
  NDT_CHECK(
      !name.empty() && name != "." && name != ".." &&
          name.find('/') == std::string::npos &&
          name.find('\0') == std::string::npos && name != kManifestFile,
      CheckpointError,
      "checkpoint ",
      manifest_path,
      " lists an invalid file name '",
      printable(name),
      "'");
  NDT_CHECK(
      entry.is_object() && entry.contains("bytes") &&
          entry["bytes"].is_number_unsigned() && entry.contains("crc32") &&
          entry["crc32"].is_number_unsigned() &&
          entry["crc32"].get<uint64_t>() <= 0xffffffffull,
      CheckpointError,
      "checkpoint ",
      manifest_path,
      ": files[\"",
      printable(name),
      "\"] is ",
      json_excerpt(entry),
      ", expected {\"bytes\": n, \"crc32\": c}");
  uint64_t want_bytes = entry["bytes"].get<uint64_t>();
  uint64_t want_crc = entry["crc32"].get<uint64_t>();

  std::string path = join(dir, name);
  std::error_code ec;
  auto status = fs::status(path, ec);
  NDT_CHECK(
      fs::exists(status),
      CheckpointError,
      "checkpoint ",
      path,
      " is missing (listed in ",
      kManifestFile,
      ")");
  NDT_CHECK(
      fs::is_regular_file(status),
      CheckpointError,
      "checkpoint ",
      path,
      " is not a regular file");
  uint64_t bytes = fs::file_size(path, ec);
  NDT_CHECK(
      !ec,
      CheckpointError,
      "cannot get the size of checkpoint ",
      path,
      ": ",
      ec.message());
  NDT_CHECK(
      bytes >= want_bytes,
      CheckpointError,
      "checkpoint ",
      path,
      " is truncated: ",
      bytes,
      " bytes, manifest says ",
      want_bytes);
  NDT_CHECK(
      bytes == want_bytes,
      CheckpointError,
      "checkpoint ",
      path,
      " is corrupt: ",
      bytes,
      " bytes, manifest says ",
      want_bytes);
  uint32_t crc = file_crc32(path);
  NDT_CHECK(
      crc == want_crc,
      CheckpointError,
      "checkpoint ",
      path,
      " is corrupt: crc32 mismatch (expected ",
      want_crc,
      ", found ",
      crc,
      ")");
}

}  // namespace

CheckpointWriter::CheckpointWriter(
    const std::string& root,
    int64_t step,
    std::vector<TensorSpec> model,
    std::vector<TensorSpec> optimizer)
    : step_(step) {
  NDT_CHECK(
      step >= 0,
      CheckpointError,
      "cannot save checkpoint under ",
      root,
      ": step ",
      step,
      " is negative");
  std::error_code ec;
  fs::create_directories(root, ec);
  NDT_CHECK(
      !ec,
      Error,
      "cannot create checkpoint directory ",
      root,
      ": ",
      ec.message());
  final_dir_ = join(root, detail::str_cat(kStepPrefix, step));
  // Hidden and not named step-<N>: list_checkpoints() never reports it.
  tmp_dir_ = temp_path_for(final_dir_);
  // Ours from earlier (a dead process with our pid, or a failed save) and
  // those of dead processes are stale.
  remove_stale_temps(root);
  remove_quietly(tmp_dir_);
  fs::create_directory(tmp_dir_, ec);
  NDT_CHECK(
      !ec,
      Error,
      "cannot create temp checkpoint directory ",
      tmp_dir_,
      ": ",
      ec.message());
  try {
    model_file_ = std::make_unique<FileWriter>(join(tmp_dir_, kModelFile));
    model_ = std::make_unique<SafetensorsWriter>(
        *model_file_,
        join(final_dir_, kModelFile),
        std::move(model),
        std::map<std::string, std::string>{});
    optimizer_file_ =
        std::make_unique<FileWriter>(join(tmp_dir_, kOptimizerFile));
    optimizer_ = std::make_unique<SafetensorsWriter>(
        *optimizer_file_,
        join(final_dir_, kOptimizerFile),
        std::move(optimizer),
        std::map<std::string, std::string>{});
  } catch (...) {
    discard();
    throw;
  }
}

CheckpointWriter::~CheckpointWriter() {
  if (!finished_)
    discard();
}

void CheckpointWriter::discard() {
  optimizer_.reset();
  optimizer_file_.reset();
  model_.reset();
  model_file_.reset();
  remove_quietly(tmp_dir_);
}

void CheckpointWriter::write_model(const Tensor& t) {
  model_->write(t);
}

void CheckpointWriter::write_optimizer(const Tensor& t) {
  optimizer_->write(t);
}

std::string CheckpointWriter::finish(json manifest) {
  if (manifest.is_null())
    manifest = json::object();
  NDT_CHECK(
      manifest.is_object(),
      CheckpointError,
      "cannot save checkpoint ",
      final_dir_,
      ": manifest must be a JSON object, got ",
      manifest.type_name());
  json files = json::object();
  for (const auto& [name, w, f] :
       {std::tuple{kModelFile, model_.get(), model_file_.get()},
        std::tuple{kOptimizerFile, optimizer_.get(), optimizer_file_.get()}}) {
    w->finish();
    f->sync_and_close();
    files[name] = {{"bytes", f->bytes()}, {"crc32", f->crc32()}};
  }
  manifest["format"] = kCheckpointFormat;
  manifest["step"] = step_;
  manifest["files"] = files;
  // The manifest is written last: a directory holding one is complete.
  std::string text = manifest.dump(2) + "\n";
  FileWriter out(join(tmp_dir_, kManifestFile));
  out.write(text.data(), text.size());
  out.sync_and_close();
  fsync_dir(tmp_dir_);
  rename_replacing(tmp_dir_, final_dir_);
  finished_ = true;
  return final_dir_;
}

std::string save_checkpoint(
    const std::string& root, int64_t step, const Checkpoint& ckpt) {
  NDT_CHECK(
      ckpt.manifest.is_null() || ckpt.manifest.is_object(),
      CheckpointError,
      "cannot save checkpoint under ",
      root,
      ": manifest must be a JSON object, got ",
      ckpt.manifest.type_name());
  std::vector<TensorSpec> specs[2];
  const std::vector<NamedTensor>* files[2] = {&ckpt.model, &ckpt.optimizer};
  for (int f = 0; f < 2; ++f) {
    for (const NamedTensor& nt : *files[f]) {
      NDT_CHECK(
          nt.tensor.defined(),
          CheckpointError,
          "cannot save checkpoint under ",
          root,
          ": tensor '",
          nt.name,
          "' is undefined");
      specs[f].push_back({nt.name, nt.tensor.dtype(), nt.tensor.shape()});
    }
  }
  CheckpointWriter w(root, step, std::move(specs[0]), std::move(specs[1]));
  for (const NamedTensor& nt : ckpt.model)
    w.write_model(nt.tensor);
  for (const NamedTensor& nt : ckpt.optimizer)
    w.write_optimizer(nt.tensor);
  return w.finish(ckpt.manifest);
}

CheckpointReader::CheckpointReader(const std::string& dir) {
  std::error_code ec;
  NDT_CHECK(
      fs::is_directory(dir, ec),
      CheckpointError,
      "checkpoint directory ",
      dir,
      fs::exists(dir, ec) ? " is not a directory" : " does not exist");
  std::string manifest_path = join(dir, kManifestFile);
  NDT_CHECK(
      fs::exists(manifest_path, ec),
      CheckpointError,
      "checkpoint ",
      dir,
      " is incomplete or not a checkpoint: ",
      kManifestFile,
      " is missing");

  {
    // The manifest has no checksum of its own: bound what it can cost
    // (size, nesting) before parsing.
    std::string text =
        read_small_file(manifest_path, kMaxManifestBytes, "checkpoint");
    size_t deep = json_depth_exceeded_at(text, kMaxJsonDepth);
    NDT_CHECK(
        deep == std::string::npos,
        CheckpointError,
        "checkpoint ",
        manifest_path,
        " nests JSON deeper than ",
        kMaxJsonDepth,
        " levels (at byte ",
        deep,
        ")");
    try {
      manifest_ = json::parse(text);
    } catch (const json::exception& e) {
      throw CheckpointError(detail::str_cat(
          "checkpoint ", manifest_path, " is not valid JSON (", e.what(), ")"));
    }
  }
  const json& m = manifest_;
  NDT_CHECK(
      m.is_object(),
      CheckpointError,
      "checkpoint ",
      manifest_path,
      " is not a JSON object");
  NDT_CHECK(
      m.contains("format") && m["format"].is_string() &&
          m["format"].get<std::string>() == kCheckpointFormat,
      CheckpointError,
      "checkpoint ",
      manifest_path,
      " has format ",
      m.contains("format") ? json_excerpt(m["format"])
                           : std::string("(missing)"),
      ", expected \"",
      kCheckpointFormat,
      "\"");
  NDT_CHECK(
      m.contains("step") && m["step"].is_number_integer() &&
          (m["step"].is_number_unsigned()
               ? m["step"].get<uint64_t>() <=
                     uint64_t(std::numeric_limits<int64_t>::max())
               : m["step"].get<int64_t>() >= 0),
      CheckpointError,
      "checkpoint ",
      manifest_path,
      " has \"step\" ",
      m.contains("step") ? json_excerpt(m["step"]) : std::string("(missing)"),
      ", expected a non-negative integer");
  fs::path dir_path(dir);
  if (!dir_path.has_filename())
    dir_path = dir_path.parent_path();
  std::optional<int64_t> dir_step =
      parse_step_name(dir_path.filename().string());
  NDT_CHECK(
      !dir_step || *dir_step == m["step"].get<int64_t>(),
      CheckpointError,
      "checkpoint ",
      manifest_path,
      " says step ",
      m["step"].get<int64_t>(),
      " but the directory is step-",
      dir_step.value_or(0));
  NDT_CHECK(
      m.contains("files") && m["files"].is_object(),
      CheckpointError,
      "checkpoint ",
      manifest_path,
      " has no \"files\" object");
  for (const char* name : {kModelFile, kOptimizerFile}) {
    NDT_CHECK(
        m["files"].contains(name),
        CheckpointError,
        "checkpoint ",
        manifest_path,
        " does not list ",
        name,
        " in \"files\"");
  }
  // Every listed file is checked before any is parsed.
  for (const auto& [name, entry] : m["files"].items()) {
    verify_file(dir, name, entry);
  }
  model_ = std::make_unique<SafetensorsReader>(join(dir, kModelFile));
  optimizer_ = std::make_unique<SafetensorsReader>(join(dir, kOptimizerFile));
}

Checkpoint load_checkpoint(const std::string& dir) {
  CheckpointReader r(dir);
  Checkpoint ckpt;
  ckpt.manifest = r.manifest();
  for (const auto& [out, in] :
       {std::pair{&ckpt.model, &r.model()},
        std::pair{&ckpt.optimizer, &r.optimizer()}}) {
    for (size_t i = 0; i < in->tensors().size(); ++i)
      out->push_back({in->tensors()[i].name, in->read(i)});
  }
  return ckpt;
}

std::vector<std::string> list_checkpoints(const std::string& root) {
  std::error_code ec;
  if (!fs::exists(root, ec))
    return {};
  NDT_CHECK(
      fs::is_directory(root, ec),
      CheckpointError,
      "checkpoint root ",
      root,
      " is not a directory");
  std::vector<std::pair<int64_t, std::string>> found;
  fs::directory_iterator it(root, ec);
  NDT_CHECK(
      !ec,
      CheckpointError,
      "cannot list checkpoint root ",
      root,
      ": ",
      ec.message());
  for (const auto& entry : it) {
    std::optional<int64_t> step =
        parse_step_name(entry.path().filename().string());
    if (step && entry.is_directory(ec)) {
      found.emplace_back(*step, entry.path().string());
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> paths;
  paths.reserve(found.size());
  for (auto& [step, path] : found)
    paths.push_back(std::move(path));
  return paths;
}

std::string latest_checkpoint(const std::string& root) {
  std::vector<std::string> all = list_checkpoints(root);
  return all.empty() ? std::string() : all.back();
}

}  // namespace ndt
