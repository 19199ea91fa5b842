// Shared by the test_mpi sources: the world group made by main.cpp.
#pragma once

#include "comm/mpi_process_group.h"

namespace ndt::test {

// The world group of this run (timeout 30 s), valid during RUN_ALL_TESTS.
MpiProcessGroup& mpi_world();

}  // namespace ndt::test
