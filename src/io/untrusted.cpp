#include "io/untrusted.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/check.h"

namespace ndt {
namespace {

// Containers deeper than this are shown as [...] / {...} in messages.
constexpr int kExcerptDepth = 3;

void append_excerpt(
    const nlohmann::json& v, int depth, size_t budget, std::string& out) {
  using Type = nlohmann::json::value_t;
  if (out.size() > budget)
    return;
  switch (v.type()) {
    case Type::object:
    case Type::array: {
      const bool object = v.type() == Type::object;
      if (v.empty()) {
        out += object ? "{}" : "[]";
        return;
      }
      if (depth >= kExcerptDepth) {
        out += object ? "{...}" : "[...]";
        return;
      }
      out += object ? "{" : "[";
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (out.size() > budget)
          return;
        if (!first)
          out += ", ";
        first = false;
        if (object) {
          out += '"';
          out += printable(it.key(), budget);
          out += "\": ";
        }
        append_excerpt(it.value(), depth + 1, budget, out);
      }
      out += object ? "}" : "]";
      return;
    }
    case Type::string:
      out += '"';
      out += printable(v.get_ref<const std::string&>(), budget);
      out += '"';
      return;
    case Type::binary:
      out += "<binary>";
      return;
    default:
      out += v.dump();  // a scalar: no recursion
      return;
  }
}

}  // namespace

size_t json_depth_exceeded_at(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped character cannot end the string
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string_view::npos;
}

std::string printable(std::string_view s, size_t max_chars) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (out.size() >= max_chars) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else if (c == '\\') {
      out += "\\\\";
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string json_excerpt(const nlohmann::json& v, size_t max_chars) {
  std::string out;
  append_excerpt(v, 0, max_chars, out);
  if (out.size() > max_chars) {
    out.resize(max_chars);
    out += "...";
  }
  return out;
}

std::string read_small_file(
    const std::string& path, uint64_t max_bytes, std::string_view what) {
  // O_NONBLOCK: opening a FIFO for reading must not wait for a writer.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    throw CheckpointError(detail::str_cat(
        "cannot open ", what, " ", printable(path), ": ", std::strerror(err)));
  }
  struct Closer {
    int fd;
    ~Closer() {
      ::close(fd);
    }
  } closer{fd};
  struct stat st;
  NDT_CHECK(
      ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode),
      CheckpointError,
      what,
      " ",
      printable(path),
      " is not a regular file");
  NDT_CHECK(
      static_cast<uint64_t>(st.st_size) <= max_bytes,
      CheckpointError,
      what,
      " ",
      printable(path),
      " is ",
      st.st_size,
      " bytes, more than the limit of ",
      max_bytes);
  // Back to blocking reads for a regular file; size read is bounded again
  // below in case the file grows meanwhile.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::string text;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int err = errno;
      throw CheckpointError(detail::str_cat(
          "cannot read ",
          what,
          " ",
          printable(path),
          ": ",
          std::strerror(err)));
    }
    if (n == 0)
      break;
    text.append(buf, static_cast<size_t>(n));
    NDT_CHECK(
        text.size() <= max_bytes,
        CheckpointError,
        what,
        " ",
        printable(path),
        " grew past the limit of ",
        max_bytes,
        " bytes while being read");
  }
  return text;
}

}  // namespace ndt
