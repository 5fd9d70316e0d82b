#!/bin/sh
# tests/fuzz/run.sh - run the libFuzzer harnesses of a fuzzing build for a bounded time each.
#
#   tests/fuzz/run.sh BUILDDIR [SECONDS [TARGET...]]      (targets: deck tiff shards; default all)
#
# BUILDDIR is configured for fuzzing (see tests/fuzz/README) and has run `make fuzz`.  Each target
# starts from its seed corpus tests/fuzz/corpus/<target> plus what earlier runs found
# (BUILDDIR/fuzz-corpus/<target>, kept between runs), runs for SECONDS (default 60), and writes
# any crashing input to BUILDDIR/fuzz-artifacts/.  The last lines of each log give executions,
# coverage and corpus size.  Exit status 1 if any target found a crash (or did not start).
set -u
[ $# -ge 1 ] || { echo "usage: tests/fuzz/run.sh BUILDDIR [SECONDS [TARGET...]]" >&2; exit 2; }
build=$(cd "$1" && pwd) || exit 2
shift
secs=${1:-60}
[ $# -ge 1 ] && shift
targets=${*:-deck tiff shards}
src=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$build/fuzz-corpus" "$build/fuzz-artifacts" "$build/fuzz-logs" || exit 1
# libinfinipath (pulled in by Open MPI) turns SIGABRT into exit() unless told not to; the shard
# harness writes its files to memory when /dev/shm is there.
IPATH_NO_BACKTRACE=1
export IPATH_NO_BACKTRACE
[ -d /dev/shm ] && [ -w /dev/shm ] && TMPDIR=/dev/shm && export TMPDIR
status=0
for t in $targets; do
  bin="$build/tests/fuzz/fuzz_$t"
  if [ ! -x "$bin" ]; then
    echo "FAIL: fuzz_$t: $bin not built (make fuzz in a fuzzing build)"
    status=1
    continue
  fi
  corpus="$build/fuzz-corpus/$t"
  mkdir -p "$corpus" || exit 1
  log="$build/fuzz-logs/$t.log"
  set -- -max_total_time="$secs" -timeout=30 -rss_limit_mb=4096 -malloc_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$build/fuzz-artifacts/$t-"
  case $t in
    deck) set -- "$@" -dict="$src/deck.dict" -max_len=4096 ;;
    tiff) set -- "$@" -max_len=8192 ;;
    # Inputs the reader refuses end in a longjmp out of exit(): their memory is leaked on purpose.
    shards) set -- "$@" -detect_leaks=0 -max_len=512 ;;
  esac
  if [ "$t" = shards ]; then
    ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}" "$bin" "$@" "$corpus" "$src/corpus/$t" >"$log" 2>&1
  else
    "$bin" "$@" "$corpus" "$src/corpus/$t" >"$log" 2>&1
  fi
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  cov=$(grep -E '^#[0-9]+' "$log" | tail -n 1 | sed -n 's/.*cov: \([0-9]*\).*ft: \([0-9]*\).*corp: \([0-9]*\)\/\([^ ]*\).*/\1 edges, \2 features, corpus \3 inputs (\4)/p')
  if [ "$rc" = 0 ]; then
    echo "PASS: fuzz_$t: ${runs:-?} executions in ${secs} s, ${cov:-coverage unknown}"
  else
    echo "FAIL: fuzz_$t (exit $rc): ${runs:-?} executions, ${cov:-?}; log $log"
    grep -E -A25 'ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer)|runtime error:|finding:' "$log" | head -60
    ls "$build/fuzz-artifacts/$t-"* 2>/dev/null | sed 's/^/  crashing input: /'
    status=1
  fi
done
exit $status
