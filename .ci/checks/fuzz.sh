#!/bin/sh
# .ci/checks/fuzz.sh - build the libFuzzer harnesses (tests/fuzz: deck parser, TIFF reader, shard
# reader) with clang, AddressSanitizer and UndefinedBehaviorSanitizer in build-fuzz, and run each
# for a bounded time (SCDINO_FUZZ_SECONDS, default 60) from its seed corpus plus what earlier runs
# found.  Fails on any crash, sanitizer report or harness finding.  Longer runs by hand:
#   tests/fuzz/run.sh build-fuzz 600
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
secs=${SCDINO_FUZZ_SECONDS:-60}
jobs=$(nproc 2>/dev/null || echo 2)
if ! command -v clang >/dev/null 2>&1; then
  "$top/scripts/setup.sh" --fuzz >/dev/null 2>&1 </dev/null # clang and its fuzzer runtime
  command -v clang >/dev/null 2>&1 || { echo "FAIL: fuzz: clang is not installed (scripts/setup.sh --fuzz)"; exit 1; }
fi
# The MPI wrapper compiles with clang (Open MPI reads OMPI_CC, MPICH reads MPICH_CC).
OMPI_CC=clang
MPICH_CC=clang
export OMPI_CC MPICH_CC
mkdir -p "$top/build-fuzz" && cd "$top/build-fuzz" || exit 1
if [ ! -f Makefile ]; then
  ASAN_OPTIONS=detect_leaks=0 "$top/configure" -q --without-cuda --enable-sanitizers \
    CFLAGS="-g -O1 -fsanitize=fuzzer-no-link" >configure.log 2>&1 ||
    { tail -20 configure.log; echo "FAIL: fuzz: configure"; exit 1; }
fi
make -j"$jobs" fuzz >build.log 2>&1 || { grep -E 'error' build.log | head -20; echo "FAIL: fuzz: build"; exit 1; }
sh "$top/tests/fuzz/run.sh" "$top/build-fuzz" "$secs"
