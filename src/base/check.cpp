#include "base/check.h"

namespace ndt::detail {

void assert_fail(
    const char* file, int line, const char* cond, const std::string& msg) {
  throw Error(str_cat(
      "internal error (a bug in ndtrain) at ",
      file,
      ":",
      line,
      ": ",
      cond,
      msg.empty() ? "" : ": ",
      msg));
}

}  // namespace ndt::detail
