// MpiRuntime: MPI for the process. MPI_Init_thread / MPI_Finalize, the
// thread level, and the one object that holds the MPI backend's
// process-wide state (detail::MpiProgress in mpi_progress.h: every live
// group, the progress counter the waits watch, whether the node is
// oversubscribed). Its groups share that object; the backend has no other
// mutable state outside its groups. <mpi.h> stays in the .cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace ndt {

class MpiProcessGroup;

namespace detail {
class MpiProgress;
}

// RAII owner of MPI for the process: one instance, made first thing in
// main() and destroyed last (after every MpiProcessGroup).
class MpiRuntime {
 public:
  // MPI_Init_thread(MPI_THREAD_SERIALIZED); MPI errors return codes
  // (MPI_ERRORS_RETURN) that become CommError. Throws CommError when MPI
  // is already initialised or the thread level is below FUNNELED.
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();  // MPI_Finalize
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  // MPI initialised and not finalised.
  static bool active();
  // MPI_Abort(MPI_COMM_WORLD, code): ends every rank. Does nothing when MPI
  // is not active (the caller then exits on its own).
  static void abort(int code);

  int world_rank() const {
    return world_rank_;
  }
  int world_size() const {
    return world_size_;
  }
  // The host name (MPI_Get_processor_name) of every world rank.
  const std::vector<std::string>& hosts() const {
    return hosts_;
  }
  // A new group over all processes (private duplicates of
  // MPI_COMM_WORLD), named "world". Collective: every rank calls it.
  std::unique_ptr<MpiProcessGroup> world();

 private:
  int world_rank_ = 0;
  int world_size_ = 1;
  std::vector<std::string> hosts_;
  std::shared_ptr<detail::MpiProgress> progress_;
};

}  // namespace ndt
