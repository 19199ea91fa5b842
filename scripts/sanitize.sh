#!/usr/bin/env bash
# After scripts/setup.sh (packages, datasets, the normal build in build/),
# builds everything again with AddressSanitizer and UndefinedBehaviorSanitizer
# into build-sanitize/ (-DNDT_SANITIZE=ON) and runs the whole ctest suite
# there. Any memory error or undefined behaviour
# aborts its process, so its test fails. Leaks are checked in the
# single-process tests (label `unit`); not under mpirun, where OpenMPI's
# plugins leave allocations behind that are reported after the plugins
# are unloaded, so no suppression can name them. An allocation too large
# for the machine returns null, as without the sanitizer, so the tests of
# ndtrain's out-of-memory message hold.
#   scripts/sanitize.sh [--unit] [ctest arguments, e.g. -R verify_]
# --unit: only the single-process tests (scripts/test.sh runs these).
set -euo pipefail
cd "$(dirname "$0")/.."
unit_only=0
if [[ ${1:-} == --unit ]]; then
  unit_only=1
  shift
fi
scripts/setup.sh
cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=Release -DNDT_SANITIZE=ON \
  > build-sanitize.log 2>&1 || { cat build-sanitize.log; exit 1; }
cmake --build build-sanitize -j"$(nproc)" >> build-sanitize.log 2>&1 \
  || { tail -50 build-sanitize.log; exit 1; }
rm -f build-sanitize.log
export UBSAN_OPTIONS=print_stacktrace=1
asan=allocator_may_return_null=1
status=0
none=ignore  # a filter in the arguments may leave one of the two sets empty
((unit_only)) && none=error
ASAN_OPTIONS=$asan:detect_leaks=1 ctest --test-dir build-sanitize --output-on-failure \
  --no-tests=$none -j"$(nproc)" -L unit "$@" || status=1
if ((!unit_only)); then
  ASAN_OPTIONS=$asan:detect_leaks=0 ctest --test-dir build-sanitize --output-on-failure \
    --no-tests=ignore -j"$(nproc)" -LE unit "$@" || status=1
fi
exit "$status"
