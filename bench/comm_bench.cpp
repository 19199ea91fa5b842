// comm_bench: all-reduce bus bandwidth of ndt's ProcessGroup::all_reduce
// (MpiProcessGroup: chunked, pipelined ring) against raw MPI_Allreduce on
// the same buffers, in the same run. Run under mpirun (bench/comm.sh).
//
// For each size (fp32 buffers, --min-bytes .. --max-bytes by --factor):
// --warmup untimed then --reps (5x below 4 MiB) timed repetitions of each
// implementation, alternating which goes first; a repetition refills the
// buffer, meets at a barrier, and takes the slowest rank's time. Reported:
// median time, bus bandwidth = bytes / time * 2(n-1)/n, and ratio = mpi_time /
// ndt_time
// (> 1: ndt faster). Then the alpha-beta model of the link (plan/
// link_cost.h) fitted to each side's median times:
//   link_fit impl=ndt|mpi ranks=N alpha_us=A busbw_gbs=B max_rel_error=E
// Last line: min_ratio_vs_mpi=X over sizes >= 1 MiB.
// A benchmark, not src/: it may include <mpi.h>.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/median.h"
#include "comm/mpi_process_group.h"
#include "plan/link_cost.h"

namespace {

struct Options {
  int64_t min_bytes = 4 << 10;
  int64_t max_bytes = 64 << 20;
  int factor = 4;
  int reps = 11;
  int warmup = 2;
  int64_t chunk_bytes = 0;      // 0: library default
  int64_t ring_min_bytes = -1;  // -1: library default
};

int64_t parse_i64(const char* flag, const char* v) {
  if (v == nullptr) {
    std::fprintf(stderr, "comm_bench: %s needs a value\n", flag);
    std::exit(2);
  }
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  if (*end != '\0') {
    std::fprintf(stderr, "comm_bench: bad value for %s: %s\n", flag, v);
    std::exit(2);
  }
  return x;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] {
      return parse_i64(a.c_str(), i + 1 < argc ? argv[++i] : nullptr);
    };
    if (a == "--min-bytes") {
      o.min_bytes = value();
    } else if (a == "--max-bytes") {
      o.max_bytes = value();
    } else if (a == "--factor") {
      o.factor = static_cast<int>(value());
    } else if (a == "--reps") {
      o.reps = static_cast<int>(value());
    } else if (a == "--warmup") {
      o.warmup = static_cast<int>(value());
    } else if (a == "--chunk-bytes") {
      o.chunk_bytes = value();
    } else if (a == "--ring-min-bytes") {
      o.ring_min_bytes = value();
    } else {
      std::fprintf(
          stderr,
          "usage: comm_bench [--min-bytes N] [--max-bytes N] [--factor F] "
          "[--reps N] [--warmup N] [--chunk-bytes N] [--ring-min-bytes N]\n");
      std::exit(2);
    }
  }
  if (o.factor < 2 || o.reps < 1 || o.min_bytes < 4) {
    std::fprintf(stderr, "comm_bench: need factor >= 2, reps >= 1\n");
    std::exit(2);
  }
  return o;
}

std::string human(int64_t bytes) {
  char s[32];
  if (bytes >= (1 << 20)) {
    std::snprintf(s, sizeof s, "%lld MiB", (long long)(bytes >> 20));
  } else {
    std::snprintf(s, sizeof s, "%lld KiB", (long long)(bytes >> 10));
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  ndt::MpiRuntime mpi(&argc, &argv);
  Options opt = parse(argc, argv);
  const int rank = mpi.world_rank(), n = mpi.world_size();
  auto world = mpi.world();
  if (opt.chunk_bytes > 0)
    world->set_chunk_bytes(opt.chunk_bytes);
  if (opt.ring_min_bytes >= 0)
    world->set_ring_min_bytes(opt.ring_min_bytes);
  if (rank == 0) {
    std::printf(
        "comm_bench: %d ranks, chunk_bytes %lld, ring_min_bytes %lld, "
        "median of %d reps (x5 below 4 MiB) after %d warm-up\n",
        n,
        (long long)world->chunk_bytes(),
        (long long)world->ring_min_bytes(),
        opt.reps,
        opt.warmup);
    std::printf(
        "%10s %11s %11s %13s %13s %7s\n",
        "size",
        "ndt_ms",
        "mpi_ms",
        "ndt_busbw",
        "mpi_busbw",
        "ratio");
  }
  const double bus = n > 1 ? 2.0 * (n - 1) / n : 1.0;
  double min_ratio = 1e30;
  int bad = 0;
  std::vector<int64_t> sizes;
  std::vector<double> ndt_s, mpi_s;
  for (int64_t bytes = opt.min_bytes; bytes <= opt.max_bytes;
       bytes *= opt.factor) {
    const int64_t count = bytes / 4;
    std::vector<float> buf(count);
    std::vector<double> t_ndt, t_mpi;
    // Small sizes are cheap and noisier: 5x the repetitions.
    const int reps = bytes < (4 << 20) ? 5 * opt.reps : opt.reps;
    for (int rep = 0; rep < opt.warmup + reps; ++rep) {
      for (int k = 0; k < 2; ++k) {
        const bool ndt_turn = (k == 0) == (rep % 2 == 0);
        std::fill(buf.begin(), buf.end(), 1.0f + static_cast<float>(rank));
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (ndt_turn) {
          world->all_reduce(buf.data(), count);
        } else {
          MPI_Allreduce(
              MPI_IN_PLACE,
              buf.data(),
              static_cast<int>(count),
              MPI_FLOAT,
              MPI_SUM,
              MPI_COMM_WORLD);
        }
        double dt = MPI_Wtime() - t0, slowest = 0;
        MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        const float expect = 0.5f * n * (n + 1);
        if (buf[0] != expect || buf[count - 1] != expect)
          ++bad;
        if (rep >= opt.warmup)
          (ndt_turn ? t_ndt : t_mpi).push_back(slowest);
      }
    }
    double tn = ndt::median(t_ndt), tm = ndt::median(t_mpi);
    double ratio = tm / tn;
    sizes.push_back(bytes);
    ndt_s.push_back(tn);
    mpi_s.push_back(tm);
    if (bytes >= (1 << 20))
      min_ratio = std::min(min_ratio, ratio);
    if (rank == 0) {
      std::printf(
          "%10s %11.3f %11.3f %9.2f GB/s %8.2f GB/s %7.2f\n",
          human(bytes).c_str(),
          tn * 1e3,
          tm * 1e3,
          bytes / tn * bus / 1e9,
          bytes / tm * bus / 1e9,
          ratio);
      std::fflush(stdout);
    }
  }
  int any_bad = 0;
  MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  world.reset();
  if (rank == 0) {
    if (any_bad)
      std::printf("comm_bench: WRONG all-reduce results\n");
    if (n > 1 && sizes.size() >= 2) {
      for (const auto& [impl, t] :
           {std::pair<const char*, const std::vector<double>*>{"ndt", &ndt_s},
            {"mpi", &mpi_s}}) {
        const ndt::LinkFit fit = ndt::fit_link_cost(n, sizes, *t);
        std::printf(
            "link_fit impl=%s ranks=%d alpha_us=%.2f busbw_gbs=%.3f "
            "max_rel_error=%.3f\n",
            impl,
            n,
            fit.link.alpha_s * 1e6,
            fit.link.beta_s_per_byte > 0 ? 1e-9 / fit.link.beta_s_per_byte
                                         : 0.0,
            fit.max_rel_error);
      }
    }
    std::printf("min_ratio_vs_mpi=%.3f\n", min_ratio);
  }
  return any_bad ? 1 : 0;
}
