// train.trace: merges every rank's Tracer spans into one Chrome trace
// (JSON "traceEvents", complete events "ph":"X" in microseconds) that
// chrome://tracing and Perfetto open with one track per rank, named
// "rank R (dp D, pp S, tp T)". Span names are the instruction text ("F3",
// "B3.1", "SA3>1", "RED", "OPT"); args carry the step, micro-batch and chunk.
#pragma once

#include <string>

#include "parallel/pipeline/tracer.h"
#include "train/groups.h"

namespace ndt {

// Collective over the job: every rank takes rank 0's clock as time zero.
void align_trace_origin(Tracer& tracer, const Groups& groups);

// Collective over the job (groups.world, or none for one process): rank 0
// writes `path` atomically; returns the number of spans written there (0
// elsewhere).
int64_t write_trace(
    const std::string& path, const Tracer& tracer, const Groups& groups);

}  // namespace ndt
