#!/bin/sh
# .ci/checks/tsan.sh - ThreadSanitizer over scdino's own threads (the loader's workers, the signal
# helper, the watchdog, the HDF5 lock and the fatal-error paths) in build-tsan (CPU only): the
# loader, signal and shard unit tests, then scdino itself on 1 and 2 ranks: a training run with 2
# loader threads, a signal stop, and a truncated shard that a loader thread finds (exit 3).  Fails on
# any ThreadSanitizer report.  Open MPI, OpenMP and HDF5 are not built with TSan: their internals
# are suppressed (tsan.supp below; HDF5 is only called under scdino's lock).  A few minutes on 2 cores.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
jobs=$(nproc 2>/dev/null || echo 2)
b=$top/build-tsan
mkdir -p "$b" && cd "$b" || exit 1
if [ ! -f Makefile ]; then
  "$top/configure" -q --without-cuda CFLAGS="-g -O1 -fsanitize=thread" LDFLAGS=-fsanitize=thread \
    >configure.log 2>&1 || { tail -20 configure.log; echo "FAIL: tsan: configure"; exit 1; }
fi
progs="tests/unit/data/test_loader tests/unit/core/test_signals tests/unit/data/test_shards tests/fixtures/train_mkdata"
# shellcheck disable=SC2086
make -j"$jobs" scdino $progs >build.log 2>&1 || { tail -30 build.log; echo "FAIL: tsan: build"; exit 1; }
cat >tsan.supp <<'SUPP'
called_from_lib:libopen-pal.so
called_from_lib:libmpi.so
mutex:mca_pml_ob1.so
deadlock:mca_btl_tcp.so
race:libgomp.so
race:libhdf5_openmpi.so
SUPP
TSAN_OPTIONS="suppressions=$b/tsan.supp halt_on_error=0 history_size=4 second_deadlock_stack=1"
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=passive
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export TSAN_OPTIONS OMP_NUM_THREADS OPENBLAS_NUM_THREADS OMP_WAIT_POLICY OMPI_ALLOW_RUN_AS_ROOT \
  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM OMPI_MCA_rmaps_base_oversubscribe
fails=0
bad() { echo "tsan: FAIL: $*"; fails=$((fails + 1)); }

# Unit tests, through make check (its environment); check_PROGRAMS narrowed to what is built.
tests="tests/unit/data/test_loader tests/unit/core/test_signals tests/unit/data/test_shards"
make check TESTS="$tests" check_PROGRAMS="$progs" >check.log 2>&1 || bad "unit tests (see build-tsan/tests/*/*/*.log)"
grep -E '^(PASS|FAIL|ERROR):' check.log | sed 's/^/tsan: /'
for t in $tests; do grep -q "ThreadSanitizer" "$t.log" 2>/dev/null && bad "$t: ThreadSanitizer report"; done

# scdino: a fresh scratch directory of small runs.
w=$b/runs
rm -rf "$w" && mkdir -p "$w" && cd "$w" || exit 1
"$b/tests/fixtures/train_mkdata" shards 40 3 20 20 >/dev/null || { echo "FAIL: tsan: train_mkdata"; exit 1; }
# The decks of the training tests (tests/cli/train_lib.sh), with 2 loader threads.
# shellcheck source=tests/cli/train_lib.sh
. "$top/tests/cli/train_lib.sh"
deck() { # deck RUN "KEY=VALUE ..." ["&debug keys"]
  # shellcheck disable=SC2086
  train_deck "$1" batch_size_per_rank=4 $2 |
    sed 's|^&system .*|\&system loader_threads = 2, prefetch_batches = 3, step_timeout = 300 /|'
  [ -n "${3:-}" ] && echo "&debug $3 /"
  return 0
}
mpiexec=$(command -v mpiexec || command -v mpirun)
run() { # run NAME WANT_STATUS NRANKS: scdino NAME.nml, its output in NAME.out
  if [ "$3" = 1 ]; then
    timeout -k 5 300 "$b/scdino" "$1.nml" >"$1.out" 2>&1 </dev/null
  else
    timeout -k 5 300 "$mpiexec" -n "$3" "$b/scdino" "$1.nml" >"$1.out" 2>&1 </dev/null
  fi
  rc=$?
  [ "$rc" = "$2" ] || bad "$1: exit status $rc (wanted $2); last lines: $(tail -3 "$1.out" | tr '\n' ' ')"
  if grep -q "ThreadSanitizer" "$1.out"; then
    bad "$1: ThreadSanitizer report"
    grep -A14 "WARNING: ThreadSanitizer" "$1.out" | head -40
  fi
}
deck full epochs=2 >full.nml && run full 0 1
deck full2 epochs=2 >full2.nml && run full2 0 2
deck stop epochs=2 "signal_at_step = 3, signal_rank = 1, signal_name = 'TERM'" >stop.nml && run stop 0 2
grep -q "stopped after 4 steps" stop.out || bad "stop: no stop after 4 steps"
mkdir -p tshards && cp shards/* tshards/ && head -c $(($(wc -c <shards/shard-00001.h5) / 2)) shards/shard-00001.h5 >tshards/shard-00001.h5
TRAIN_SHARDS=tshards deck trunc epochs=1 >trunc.nml && run trunc 3 2
grep -q "shard tshards/shard-00001.h5: cannot open it as an HDF5 file" trunc.out || bad "trunc: the truncated shard is not named"

if [ "$fails" != 0 ]; then
  echo "FAIL: tsan ($fails problems)"
  exit 1
fi
echo "PASS: tsan (ThreadSanitizer: loader, signals, shards; training on 1 and 2 ranks, a signal stop, a loader-thread error)"
