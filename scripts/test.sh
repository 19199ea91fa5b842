#!/usr/bin/env bash
# Builds ndtrain (scripts/setup.sh) and runs the whole test suite.
# Exit code = ctest's.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir build --output-on-failure --no-tests=error -j"$(nproc)"
