// SampleRows: the samples of a batch that one rank computes on, as the
// rows [first, first + count) of the batch (TensorParallelMode::
// sample_rows; the pipeline executor cuts each micro-batch with it).
#pragma once

#include <cstdint>

namespace ndt {

struct SampleRows {
  int64_t first = 0;
  int64_t count = 0;
};

}  // namespace ndt
