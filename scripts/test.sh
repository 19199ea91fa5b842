#!/usr/bin/env bash
# Builds ndtrain (scripts/setup.sh) and runs the whole test suite, then
# each fuzz target for 20 s (scripts/fuzz.sh), then the single-process
# tests again built with ASan + UBSan (scripts/sanitize.sh --unit). Fails
# if any of them fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --fuzz
ctest --test-dir build --output-on-failure --no-tests=error -j"$(nproc)"
scripts/fuzz.sh 20
scripts/sanitize.sh --unit
