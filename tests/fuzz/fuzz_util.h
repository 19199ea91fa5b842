// Shared pieces of the libFuzzer harnesses (tests/fuzz/fuzz_*.cpp).
//
// Each harness hands its input to one reader of untrusted files. An
// ndt::Error is the expected outcome of bad input; an internal error (a
// failed NDT_ASSERT), any other exception, a sanitizer report, a hang or a
// leak is a finding and stops the fuzzer.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "base/error.h"

namespace ndt::fuzz {

// A private directory under $TMPDIR (or /tmp), made once per process.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp && *tmp ? tmp : "/tmp") + "/ndt-fuzz-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    return pattern;
  }();
  return dir;
}

// Writes `bytes` to `path`, replacing it.
inline void write_file(const std::string& path, std::string_view bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr ||
      std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() ||
      std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
}

// Runs `body`; a user-facing ndt::Error is fine, a bug is not.
template <typename F>
void expect_clean(F&& body) {
  try {
    body();
  } catch (const ndt::Error& e) {
    // NDT_ASSERT's messages start so; user-facing ones never do (they may
    // quote input that contains the words).
    if (std::string_view(e.what()).starts_with("internal error (a bug")) {
      std::fprintf(stderr, "internal error on fuzz input: %s\n", e.what());
      std::abort();
    }
  }
}

}  // namespace ndt::fuzz
