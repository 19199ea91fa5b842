#include "train/trace_file.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "base/atomic_file.h"

namespace ndt {
namespace {

constexpr int kFields = 7;  // op, mb, chunk, peer, step, t0, t1

// "rank R (dp D, pp S, tp T)": the rank and its coordinate on every mesh
// axis, from its gathered header (span count, then one coordinate per axis).
std::string track_name(int rank, const double* header, const Mesh& mesh) {
  std::string s = "rank " + std::to_string(rank) + " (";
  for (size_t a = 0; a < mesh.names().size(); ++a) {
    s += (a ? ", " : "") + mesh.names()[a] + " " +
         std::to_string(static_cast<int>(header[1 + a]));
  }
  return s + ")";
}

}  // namespace

void align_trace_origin(Tracer& tracer, Mesh& mesh) {
  double origin = Tracer::clock_now();
  mesh.world().share_from_rank0(&origin, 1);
  tracer.set_origin(origin);
}

int64_t write_trace(const std::string& path, const Tracer& tracer, Mesh& mesh) {
  ProcessGroup& world = mesh.world();
  const int size = world.size();
  const int rank = world.rank();
  const int kHeader = 1 + static_cast<int>(mesh.names().size());
  // Gather with sums: every rank's header (span count and mesh
  // coordinates), then its spans in its own slot of a zeroed buffer sized
  // for the longest list.
  std::vector<double> headers(size * kHeader, 0.0);
  double* h = headers.data() + rank * kHeader;
  h[0] = static_cast<double>(tracer.spans().size());
  for (size_t a = 0; a < mesh.names().size(); ++a)
    h[1 + a] = mesh.coord(mesh.names()[a]);
  world.all_reduce(headers.data(), size * kHeader);
  int64_t longest = 0;
  for (int r = 0; r < size; ++r)
    longest = std::max(longest, static_cast<int64_t>(headers[r * kHeader]));
  const int64_t per_rank = longest * kFields;
  std::vector<double> all(static_cast<size_t>(per_rank * size), 0.0);
  double* mine = all.data() + rank * per_rank;
  for (const Span& s : tracer.spans()) {
    mine[0] = static_cast<double>(s.op);
    mine[1] = s.mb;
    mine[2] = s.chunk;
    mine[3] = s.peer;
    mine[4] = static_cast<double>(s.step);
    mine[5] = s.t0;
    mine[6] = s.t1;
    mine += kFields;
  }
  if (per_rank > 0)
    world.all_reduce(all.data(), static_cast<int64_t>(all.size()));
  if (rank != 0)
    return 0;
  nlohmann::json events = nlohmann::json::array();
  int64_t n = 0;
  for (int r = 0; r < size; ++r) {
    events.push_back(
        {{"name", "thread_name"},
         {"ph", "M"},
         {"pid", 0},
         {"tid", r},
         {"args", {{"name", track_name(r, &headers[r * kHeader], mesh)}}}});
    for (int64_t i = 0; i < static_cast<int64_t>(headers[r * kHeader]); ++i) {
      const double* f = all.data() + r * per_rank + i * kFields;
      Instr in{
          static_cast<Op>(static_cast<int>(f[0])),
          static_cast<int>(f[1]),
          static_cast<int>(f[2]),
          static_cast<int>(f[3])};
      nlohmann::json args = {{"step", static_cast<int64_t>(f[4])}};
      if (in.mb >= 0)
        args["microbatch"] = in.mb;
      if (in.chunk >= 0)
        args["chunk"] = in.chunk;
      events.push_back(
          {{"name", to_string(in)},
           {"cat", to_string(in.op)},
           {"ph", "X"},
           {"pid", 0},
           {"tid", r},
           {"ts", f[5] * 1e6},
           {"dur", std::max(0.0, f[6] - f[5]) * 1e6},
           {"args", args}});
      ++n;
    }
  }
  nlohmann::json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  const std::string text = doc.dump();
  write_file_atomic(
      path, [&](FileWriter& w) { w.write(text.data(), text.size()); });
  return n;
}

}  // namespace ndt
