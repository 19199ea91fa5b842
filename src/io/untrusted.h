// Reading and quoting input that ndtrain did not write itself: checkpoint
// manifests, safetensors headers, config text, file names.
//
// Everything here is bounded: JSON nesting depth (nlohmann's dump(),
// comparison and copies recurse once per level), the bytes read from a
// small metadata file, and the length of values echoed in messages.
// Control characters are escaped so that a NUL cannot cut a message short
// and an ESC cannot drive the terminal. It does not validate meaning:
// callers check what the values say.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace ndt {

// Deepest JSON nesting accepted in manifests and safetensors headers. What
// ndtrain writes is at most 4 levels deep.
inline constexpr int kMaxJsonDepth = 64;

// Largest manifest.json read; one is a few KiB.
inline constexpr uint64_t kMaxManifestBytes = uint64_t{16} << 20;

// Byte offset at which `text` (JSON) opens its (max_depth + 1)-th nested
// array or object, or npos when it never nests deeper than max_depth.
// Brackets inside strings do not count.
size_t json_depth_exceeded_at(std::string_view text, int max_depth);

// `s` for a message: bytes below 0x20, 0x7f and the backslash escaped
// (\x00, \x1b, \\), cut to `max_chars` with "..." appended
// when longer.
std::string printable(std::string_view s, size_t max_chars = 200);

// A JSON value for a message: at most `max_chars` characters and never more
// than a few levels deep ("[[[...]]]"), so it is safe on any value.
std::string json_excerpt(const nlohmann::json& v, size_t max_chars = 80);

// Reads the whole regular file at `path` (symlinks followed) if it holds at
// most `max_bytes`; otherwise throws CheckpointError naming `what` (the
// file's role, e.g. "checkpoint manifest") and the path. A FIFO, device or
// directory is refused without blocking or reading it.
std::string read_small_file(
    const std::string& path, uint64_t max_bytes, std::string_view what);

}  // namespace ndt
