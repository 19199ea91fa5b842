#include "comm/mpi_error.h"

#include <cstring>
#include <string>

#include "base/check.h"
#include "comm/mpi_runtime.h"

namespace ndt::detail {

void mpi_fail(int rc, const char* call, const char* file, int line) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
    len = 0;
  int world_rank = -1;
  if (MpiRuntime::active())
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  std::string fn(call, std::strcspn(call, "("));
  throw CommError(str_cat(
      "rank ",
      world_rank,
      ": ",
      fn,
      " failed: ",
      len > 0 ? std::string(msg, len) : "error " + std::to_string(rc),
      " (",
      file,
      ":",
      line,
      ")"));
}

}  // namespace ndt::detail
