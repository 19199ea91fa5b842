#include "comm/mpi_runtime.h"

#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/check.h"
#include "comm/mpi_error.h"
#include "comm/mpi_process_group.h"
#include "comm/mpi_progress.h"

namespace ndt {

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  NDT_CHECK(!initialized, CommError, "MpiRuntime: MPI is already initialised");
  int provided = MPI_THREAD_SINGLE;
  NDT_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided));
  NDT_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  NDT_CHECK(
      provided >= MPI_THREAD_FUNNELED,
      CommError,
      "MpiRuntime: MPI provides thread level ",
      provided,
      " (need at least MPI_THREAD_FUNNELED)");
  NDT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  NDT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
  MPI_Comm node = MPI_COMM_NULL;
  NDT_MPI_CHECK(MPI_Comm_split_type(
      MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int node_ranks = 1;
  NDT_MPI_CHECK(MPI_Comm_size(node, &node_ranks));
  NDT_MPI_CHECK(MPI_Comm_free(&node));
  // Online cores, not this process's affinity: mpirun binds each rank to
  // one core when there are enough of them.
  int ncpu = static_cast<int>(std::thread::hardware_concurrency());
  // Every rank's host name, for the watchdog's messages and the layout
  // search.
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  NDT_MPI_CHECK(MPI_Get_processor_name(name, &len));
  std::vector<char> all(
      static_cast<size_t>(world_size_) * MPI_MAX_PROCESSOR_NAME);
  NDT_MPI_CHECK(MPI_Allgather(
      name,
      MPI_MAX_PROCESSOR_NAME,
      MPI_CHAR,
      all.data(),
      MPI_MAX_PROCESSOR_NAME,
      MPI_CHAR,
      MPI_COMM_WORLD));
  for (int r = 0; r < world_size_; ++r) {
    const char* h =
        all.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME;
    hosts_.emplace_back(h, strnlen(h, MPI_MAX_PROCESSOR_NAME));
  }
  progress_ = std::make_shared<detail::MpiProgress>(
      node_ranks > std::max(ncpu, 1), hosts_);
}

MpiRuntime::~MpiRuntime() {
  if (active())
    MPI_Finalize();
}

bool MpiRuntime::active() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

void MpiRuntime::abort(int code) {
  if (active())
    MPI_Abort(MPI_COMM_WORLD, code);
}

std::unique_ptr<MpiProcessGroup> MpiRuntime::world() {
  MPI_Comm comm = MPI_COMM_NULL;
  NDT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  return std::make_unique<MpiProcessGroup>(
      std::make_shared<detail::MpiGroupState>(progress_, comm, "world"),
      "world");
}

}  // namespace ndt
