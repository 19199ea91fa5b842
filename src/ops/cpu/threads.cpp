// Thread counts and BLAS identification.
//
// ndtrain links the OpenMP build of OpenBLAS, so its GEMMs and our own
// `omp parallel` loops share one OpenMP thread pool; inside a parallel
// region OpenBLAS runs single-threaded (attention relies on that).
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>

#include <sstream>
#include <string>

#include "base/check.h"
#include "ops/ops.h"

namespace ndt::ops {

void set_num_threads(int n) {
  NDT_CHECK(n >= 1, ConfigError, "thread count must be >= 1, got ", n);
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int num_threads() {
  return omp_get_max_threads();
}

std::string blas_info() {
  // openblas_get_config() reads e.g.
  // "OpenBLAS 0.3.21 NO_AFFINITY USE_OPENMP SkylakeX MAX_THREADS=64".
  std::istringstream config(openblas_get_config());
  std::string name, version;
  config >> name >> version;
  const char* mode = "unknown";
  switch (openblas_get_parallel()) {
    case 0:
      mode = "sequential";
      break;
    case 1:
      mode = "pthread";
      break;
    case 2:
      mode = "openmp";
      break;
  }
  const dnnl_version_t* dv = dnnl_version();
  std::ostringstream os;
  os << "gemm=" << to_string(gemm_backend()) << " (oneDNN " << dv->major << "."
     << dv->minor << "." << dv->patch << "), " << name << " " << version << " ("
     << mode << ") core=" << openblas_get_corename();
  return os.str();
}

}  // namespace ndt::ops
