#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>
#include <utility>

#include "base/atomic_file.h"
#include "base/check.h"
#include "io/untrusted.h"

namespace ndt {
namespace {

using nlohmann::json;

// Tensor bytes are copied to and from the file as they are in memory.
static_assert(
    std::endian::native == std::endian::little,
    "safetensors data is little-endian; add byte swapping for this host");

// Same cap as the reference implementation: a larger header is garbage, and
// the cap bounds what a corrupt length field can make us allocate.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr uint64_t kElemBytes = 4;  // F32 and I32
// No tensor ndtrain handles has more; bounds the work and messages.
constexpr size_t kMaxDims = 16;

// Files hold F32 and I32 only (parameters, optimizer state, token ids);
// uint8 tensors (raw pixels) never reach a file.
const char* dtype_name(DType dtype) {
  NDT_ASSERT(dtype != DType::kU8, "safetensors: uint8 tensors are not stored");
  return dtype == DType::kF32 ? "F32" : "I32";
}

const void* tensor_bytes(const Tensor& t) {
  NDT_ASSERT(
      t.dtype() != DType::kU8, "safetensors: uint8 tensors are not stored");
  return t.dtype() == DType::kF32 ? static_cast<const void*>(t.data())
                                  : static_cast<const void*>(t.data_i32());
}

void* tensor_bytes(Tensor& t) {
  return const_cast<void*>(tensor_bytes(std::as_const(t)));
}

// Closes a file descriptor on scope exit.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0)
      ::close(fd);
  }
};

// Reads exactly `bytes` bytes at `offset`; false on a short read.
bool pread_all(int fd, void* dst, uint64_t bytes, uint64_t offset, int* err) {
  auto* p = static_cast<unsigned char*>(dst);
  while (bytes > 0) {
    size_t chunk = static_cast<size_t>(std::min<uint64_t>(bytes, 1ull << 30));
    ssize_t n = ::pread(fd, p, chunk, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      *err = n < 0 ? errno : 0;
      return false;
    }
    p += n;
    bytes -= static_cast<uint64_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

// One validated header entry.
struct Entry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// Builds "safetensors file <path> is invalid: <what>" errors.
class Invalid {
 public:
  explicit Invalid(const std::string& path) : path_(path) {}
  template <typename... Args>
  [[noreturn]] void fail(const Args&... args) const {
    throw CheckpointError(
        detail::str_cat("safetensors file ", path_, " is invalid: ", args...));
  }

 private:
  const std::string& path_;
};

// Reads exactly `bytes` bytes at `offset` or fails naming the read.
void read_or_fail(
    int fd,
    void* dst,
    uint64_t bytes,
    uint64_t offset,
    const Invalid& invalid) {
  int err = 0;
  if (!pread_all(fd, dst, bytes, offset, &err)) {
    invalid.fail(
        "read of ",
        bytes,
        " bytes at offset ",
        offset,
        " failed: ",
        err ? std::system_category().message(err) : "unexpected end of file");
  }
}

// Parses the header, rejecting duplicate keys (nlohmann keeps the last one
// silently, which would hide a duplicated tensor name).
json parse_header(const std::string& text, const Invalid& invalid) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  std::string dup;
  size_t dup_level = 0;
  json::parser_callback_t cb = [&](int /*depth*/,
                                   json::parse_event_t event,
                                   json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!keys.empty())
          keys.pop_back();
        break;
      case json::parse_event_t::key: {
        auto key = parsed.get<std::string>();
        if (!keys.empty() && !keys.back().insert(key).second && dup.empty()) {
          dup = key;
          dup_level = keys.size();
        }
        break;
      }
      default:
        break;
    }
    return true;
  };
  // nlohmann stops at a NUL byte as if at the end of input; anything after
  // it would be silently ignored.
  if (size_t nul = text.find('\0'); nul != std::string::npos) {
    invalid.fail("header holds a NUL byte at offset ", nul);
  }
  // Deep nesting would overflow the stack of anything that walks the value
  // recursively (dump, copy, compare).
  if (size_t deep = json_depth_exceeded_at(text, kMaxJsonDepth);
      deep != std::string::npos) {
    invalid.fail(
        "header nests JSON deeper than ",
        kMaxJsonDepth,
        " levels (at byte ",
        deep,
        " of the header)");
  }
  json header;
  try {
    header = json::parse(text, cb);
  } catch (const json::exception& e) {
    invalid.fail("header is not valid JSON (", e.what(), ")");
  }
  if (!dup.empty()) {
    if (dup_level == 1)
      invalid.fail("duplicate tensor name '", printable(dup), "'");
    invalid.fail("duplicate key '", printable(dup), "' in the header");
  }
  if (!header.is_object()) {
    invalid.fail("header is not a JSON object but ", header.type_name());
  }
  return header;
}

// Reads a non-negative integer that fits in int64.
bool get_size(const json& v, uint64_t* out) {
  if (!v.is_number_unsigned())
    return false;
  uint64_t x = v.get<uint64_t>();
  if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return false;
  }
  *out = x;
  return true;
}

Entry parse_entry(
    const std::string& name,
    const json& v,
    uint64_t buffer_bytes,
    const Invalid& invalid) {
  Entry e;
  e.name = name;
  const std::string shown = printable(name);
  if (!v.is_object()) {
    invalid.fail(
        "tensor '",
        shown,
        "': entry is ",
        v.type_name(),
        ", expected an object with dtype, shape, data_offsets");
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(field)) {
      invalid.fail("tensor '", shown, "' has no \"", field, "\"");
    }
  }

  const json& dtype = v["dtype"];
  if (!dtype.is_string()) {
    invalid.fail(
        "tensor '",
        shown,
        "': dtype is ",
        dtype.type_name(),
        ", expected a string");
  }
  const auto& dtype_str = dtype.get_ref<const std::string&>();
  if (dtype_str == "F32") {
    e.dtype = DType::kF32;
  } else if (dtype_str == "I32") {
    e.dtype = DType::kI32;
  } else {
    invalid.fail(
        "tensor '",
        shown,
        "' has unsupported dtype '",
        printable(dtype_str),
        "' (supported: F32, I32)");
  }

  const json& shape = v["shape"];
  if (!shape.is_array()) {
    invalid.fail(
        "tensor '",
        shown,
        "': shape is ",
        shape.type_name(),
        ", expected an array of non-negative integers");
  }
  if (shape.size() > kMaxDims) {
    invalid.fail(
        "tensor '",
        shown,
        "': shape has ",
        shape.size(),
        " dims, at most ",
        kMaxDims,
        " are supported");
  }
  // Product of the non-zero dims, so that shape_numel() cannot overflow.
  uint64_t nonzero_product = 1;
  bool has_zero = false;
  for (const json& d : shape) {
    uint64_t dim = 0;
    if (!get_size(d, &dim)) {
      invalid.fail(
          "tensor '",
          shown,
          "': shape ",
          json_excerpt(shape),
          " holds ",
          json_excerpt(d),
          ", not a non-negative integer");
    }
    e.shape.push_back(static_cast<int64_t>(dim));
    if (dim == 0) {
      has_zero = true;
    } else if (
        __builtin_mul_overflow(nonzero_product, dim, &nonzero_product) ||
        nonzero_product >
            static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) /
                kElemBytes) {
      invalid.fail(
          "tensor '", shown, "': shape ", json_excerpt(shape), " is too large");
    }
  }
  uint64_t need_bytes = has_zero ? 0 : nonzero_product * kElemBytes;

  const json& offsets = v["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 ||
      !get_size(offsets[0], &e.begin) || !get_size(offsets[1], &e.end)) {
    invalid.fail(
        "tensor '",
        shown,
        "': data_offsets ",
        json_excerpt(offsets),
        " is not a pair [begin, end] of non-negative integers");
  }
  if (e.begin > e.end) {
    invalid.fail(
        "tensor '",
        shown,
        "': data_offsets [",
        e.begin,
        ", ",
        e.end,
        "] has begin after end");
  }
  if (e.end > buffer_bytes) {
    invalid.fail(
        "tensor '",
        shown,
        "': data_offsets [",
        e.begin,
        ", ",
        e.end,
        "] out of range: the data buffer has ",
        buffer_bytes,
        " bytes");
  }
  if (e.end - e.begin != need_bytes) {
    invalid.fail(
        "tensor '",
        shown,
        "': shape ",
        shape_str(e.shape),
        " of ",
        dtype_str,
        " needs ",
        need_bytes,
        " bytes but data_offsets [",
        e.begin,
        ", ",
        e.end,
        "] span ",
        e.end - e.begin);
  }
  return e;
}

void parse_metadata(
    const json& v,
    std::map<std::string, std::string>* out,
    const Invalid& invalid) {
  if (!v.is_object()) {
    invalid.fail(
        "__metadata__ is ", v.type_name(), ", expected an object of strings");
  }
  for (const auto& [key, value] : v.items()) {
    if (!value.is_string()) {
      invalid.fail(
          "__metadata__ value for '",
          printable(key),
          "' is ",
          value.type_name(),
          ", expected a string");
    }
    (*out)[key] = value.get<std::string>();
  }
}

}  // namespace

const Tensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& nt : tensors) {
    if (nt.name == name)
      return &nt.tensor;
  }
  return nullptr;
}

SafetensorsWriter::SafetensorsWriter(
    FileWriter& out,
    const std::string& path,
    std::vector<TensorSpec> specs,
    const std::map<std::string, std::string>& metadata)
    : out_(out), path_(path), specs_(std::move(specs)) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty())
    header["__metadata__"] = metadata;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const TensorSpec& spec : specs_) {
    NDT_CHECK(
        !spec.name.empty() && spec.name != "__metadata__",
        CheckpointError,
        "cannot write ",
        path,
        ": invalid tensor name '",
        spec.name,
        "'");
    NDT_CHECK(
        names.insert(spec.name).second,
        CheckpointError,
        "cannot write ",
        path,
        ": duplicate tensor name '",
        spec.name,
        "'");
    uint64_t bytes =
        static_cast<uint64_t>(shape_numel(spec.shape)) * kElemBytes;
    header[spec.name] = {
        {"dtype", dtype_name(spec.dtype)},
        {"shape", spec.shape},
        {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(detail::str_cat(
        "cannot write ",
        path,
        ": a tensor name or metadata string is not valid UTF-8 (",
        e.what(),
        ")"));
  }
  // Pad with spaces so the data buffer starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<unsigned char>(n >> (8 * i));
  out_.write(len, sizeof(len));
  out_.write(text.data(), text.size());
}

void SafetensorsWriter::write(const Tensor& t) {
  NDT_ASSERT(next_ < specs_.size(), path_, ": more tensors than declared");
  const TensorSpec& spec = specs_[next_++];
  NDT_ASSERT(
      t.defined() && t.dtype() == spec.dtype && t.shape() == spec.shape,
      path_,
      ": tensor '",
      spec.name,
      "' is not the ",
      shape_str(spec.shape),
      " ",
      dtype_name(spec.dtype),
      " declared");
  if (t.numel() > 0)
    out_.write(tensor_bytes(t), static_cast<size_t>(t.numel()) * kElemBytes);
}

void SafetensorsWriter::finish() const {
  NDT_ASSERT(
      next_ == specs_.size(),
      path_,
      ": ",
      next_,
      " of ",
      specs_.size(),
      " declared tensors written");
}

void write_safetensors_to(
    FileWriter& out,
    const std::string& path,
    const std::vector<NamedTensor>& tensors,
    const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  for (const auto& nt : tensors) {
    NDT_CHECK(
        nt.tensor.defined(),
        CheckpointError,
        "cannot write ",
        path,
        ": tensor '",
        nt.name,
        "' is undefined");
    specs.push_back({nt.name, nt.tensor.dtype(), nt.tensor.shape()});
  }
  SafetensorsWriter w(out, path, std::move(specs), metadata);
  for (const auto& nt : tensors)
    w.write(nt.tensor);
  w.finish();
}

void write_safetensors(
    const std::string& path,
    const std::vector<NamedTensor>& tensors,
    const std::map<std::string, std::string>& metadata) {
  write_file_atomic(path, [&](FileWriter& out) {
    write_safetensors_to(out, path, tensors, metadata);
  });
}

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  Invalid invalid(path_);
  // O_NONBLOCK: a FIFO opens at once and fails the regular-file check
  // below instead of waiting for a writer; regular files ignore the flag.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    NDT_CHECK(
        err != ENOENT,
        CheckpointError,
        "safetensors file ",
        path,
        " does not exist");
    throw CheckpointError(detail::str_cat(
        "cannot open safetensors file ",
        path,
        ": ",
        std::system_category().message(err)));
  }
  FdCloser closer{fd};  // released once the header is valid
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    invalid.fail("not a regular file");
  }
  uint64_t file_bytes = static_cast<uint64_t>(st.st_size);

  if (file_bytes < 8) {
    invalid.fail(
        "the file has ",
        file_bytes,
        " bytes, shorter than the 8-byte header length");
  }
  unsigned char len[8];
  read_or_fail(fd, len, 8, 0, invalid);
  uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i)
    header_bytes |= uint64_t{len[i]} << (8 * i);
  if (header_bytes > file_bytes - 8) {
    invalid.fail(
        "header length ",
        header_bytes,
        " is larger than the file (",
        file_bytes,
        " bytes)");
  }
  if (header_bytes > kMaxHeaderBytes) {
    invalid.fail(
        "header length ",
        header_bytes,
        " exceeds the limit of ",
        kMaxHeaderBytes,
        " bytes");
  }
  std::string text(header_bytes, '\0');
  read_or_fail(fd, text.data(), header_bytes, 8, invalid);
  json header = parse_header(text, invalid);

  uint64_t data_start = 8 + header_bytes;
  uint64_t buffer_bytes = file_bytes - data_start;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      parse_metadata(value, &metadata_, invalid);
    } else {
      entries.push_back(parse_entry(name, value, buffer_bytes, invalid));
    }
  }

  // The entries, in offset order, must tile the buffer exactly.
  std::stable_sort(
      entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
      });
  uint64_t covered = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < covered) {
      invalid.fail(
          "tensor '",
          printable(e.name),
          "' data_offsets [",
          e.begin,
          ", ",
          e.end,
          "] overlap tensor '",
          printable(prev->name),
          "' [",
          prev->begin,
          ", ",
          prev->end,
          "]");
    }
    if (e.begin > covered) {
      invalid.fail(
          "gap of ",
          e.begin - covered,
          " unused bytes in the data buffer before tensor '",
          printable(e.name),
          "' (offset ",
          covered,
          ")");
    }
    covered = e.end;
    prev = &e;
  }
  if (covered != buffer_bytes) {
    invalid.fail(
        "tensors cover ",
        covered,
        " bytes but the data buffer has ",
        buffer_bytes,
        " bytes");
  }

  for (const Entry& e : entries) {
    index_[e.name] = specs_.size();
    specs_.push_back({e.name, e.dtype, e.shape});
    offsets_.push_back(data_start + e.begin);
  }
  fd_ = fd;
  closer.fd = -1;
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0)
    ::close(fd_);
}

int64_t SafetensorsReader::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? -1 : static_cast<int64_t>(it->second);
}

Tensor SafetensorsReader::read(size_t i) const {
  NDT_ASSERT(i < specs_.size());
  const TensorSpec& spec = specs_[i];
  Tensor t(spec.shape, MemTag::kOther, spec.dtype);
  const uint64_t bytes = static_cast<uint64_t>(t.numel()) * kElemBytes;
  if (bytes > 0)
    read_or_fail(fd_, tensor_bytes(t), bytes, offsets_[i], Invalid(path_));
  return t;
}

SafetensorsFile read_safetensors(const std::string& path) {
  SafetensorsReader r(path);
  SafetensorsFile f;
  f.metadata = r.metadata();
  for (size_t i = 0; i < r.tensors().size(); ++i)
    f.tensors.push_back({r.tensors()[i].name, r.read(i)});
  return f;
}

}  // namespace ndt
