// Decoded copies of compressed dataset files, kept in a directory so that
// a process maps the bytes from the page cache instead of inflating the
// file again: every rank of every job reads the whole dataset, and on
// these machines inflating Fashion-MNIST (55 MB) and writing it into
// fresh pages costs about 0.2 s of CPU per process, mapping an entry
// about 0.03 s. The ranks on one host then share one copy of the bytes.
//
// An entry is named after its source file and a hash of the source's
// identity (canonical path, device, inode, size, modification time in
// ns), so a changed or replaced source never meets an old entry. It holds
// the decoded bytes, the source's canonical path, then 16 bytes: the
// path's length and the decoded bytes' CRC-32 (uint32 little-endian each)
// and the tag "NDTDEC01". A reader checks the tag, the path and the CRC;
// an entry that fails is not used (the source is decoded again and the
// entry rewritten). Entries are written with write_file_atomic (a
// temporary name, fsync, rename), so a reader sees a whole entry or none,
// whatever runs beside it. Each
// store first removes the entries whose source is gone or changed (a
// dataset copied to a temporary directory leaves nothing behind once the
// copy is deleted) and temporary files over an hour old.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tensor/tensor.h"

namespace ndt {

// The decoded bytes of `source` from its entry in `dir`: a uint8 tensor
// over the mapped entry (outside the memory ledger; written pages are
// copied, the entry never changes). nullopt when there is no entry, or it
// is cut short or corrupt, or `source` cannot be identified.
std::optional<Tensor> find_decoded(
    const std::string& dir, const std::string& source);

// Writes bytes[0, n) as the entry of `source` in `dir` (created with its
// parents as needed), after removing the stale entries there. Best
// effort: returns false when anything fails (no permission, a full disk)
// and leaves no partial entry behind.
bool store_decoded(
    const std::string& dir,
    const std::string& source,
    const uint8_t* bytes,
    int64_t n);

// Where entries go when data.cache_dir is empty: $XDG_CACHE_HOME/ndtrain
// when that is an absolute path, else $HOME/.cache/ndtrain; empty (no
// cache) when neither is set.
std::string default_decode_cache_dir();

}  // namespace ndt
