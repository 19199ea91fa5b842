// NDT_MPI_CHECK(call): an MPI return code other than MPI_SUCCESS becomes a
// CommError carrying MPI_Error_string, the world rank and the call site
// (groups and MPI_COMM_WORLD use MPI_ERRORS_RETURN, so every failure comes
// back as a code). Internal to the MPI backend: includes <mpi.h>.
#pragma once

#include <mpi.h>

namespace ndt::detail {

[[noreturn]] void mpi_fail(
    int rc, const char* call, const char* file, int line);

}  // namespace ndt::detail

#define NDT_MPI_CHECK(call)                                        \
  do {                                                             \
    int ndt_rc_ = (call);                                          \
    if (ndt_rc_ != MPI_SUCCESS) {                                  \
      ::ndt::detail::mpi_fail(ndt_rc_, #call, __FILE__, __LINE__); \
    }                                                              \
  } while (0)
