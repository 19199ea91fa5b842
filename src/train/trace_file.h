// train.trace: merges every rank's Tracer spans into one Chrome trace
// (JSON "traceEvents", complete events "ph":"X" in microseconds) that
// chrome://tracing and Perfetto open with one track per rank, named
// "rank R (dp D, pp S, tp T)" (every mesh axis, in mesh order). Span names are
// the instruction text ("F3", "B3.1", "SA3>1", "RED", "OPT"); args carry the
// step, micro-batch and chunk.
#pragma once

#include <string>

#include "comm/mesh.h"
#include "parallel/pipeline/tracer.h"

namespace ndt {

// Collective over the job: every rank takes rank 0's clock as time zero.
void align_trace_origin(Tracer& tracer, Mesh& mesh);

// Collective over the job's mesh: world rank 0 writes `path` atomically;
// returns the number of spans written there (0 elsewhere).
int64_t write_trace(const std::string& path, const Tracer& tracer, Mesh& mesh);

}  // namespace ndt
