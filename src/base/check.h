// Checks that turn bad input into exceptions and broken invariants into
// loud failures.
//
//   NDT_CHECK(cond, ErrorType, "message ", value, ...)  user-caused problems
//   NDT_ASSERT(cond, "message ", value, ...)            invariants (bugs)
//
// Messages are built with operator<< so any streamable value can be passed.
// Nothing here exits the process; cli/main.cpp decides how to stop.
#pragma once

#include <sstream>
#include <string>

#include "base/error.h"

namespace ndt::detail {

template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

[[noreturn]] void assert_fail(
    const char* file, int line, const char* cond, const std::string& msg);

}  // namespace ndt::detail

#define NDT_CHECK(cond, ErrorType, ...)                     \
  do {                                                      \
    if (!(cond)) {                                          \
      throw ErrorType(::ndt::detail::str_cat(__VA_ARGS__)); \
    }                                                       \
  } while (0)

#define NDT_ASSERT(cond, ...)                                     \
  do {                                                            \
    if (!(cond)) {                                                \
      ::ndt::detail::assert_fail(                                 \
          __FILE__,                                               \
          __LINE__,                                               \
          #cond,                                                  \
          ::ndt::detail::str_cat("" __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                             \
  } while (0)
