#!/bin/sh
# scripts/test.sh - install what is missing, build, and run the test suite (make check).
# The summary is in build/test-suite.log; each test's output in build/tests/*/*.log (unit tests: build/tests/unit/LAYER/*.log).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/setup.sh" --tests
"$top/scripts/build.sh"
cd "$top/build"
make -j"$(nproc 2>/dev/null || echo 2)" check
