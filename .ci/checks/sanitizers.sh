#!/bin/sh
# .ci/checks/sanitizers.sh - the hostile-input corpus, the unit tests of the input readers
# (deck, configuration, TIFF, shards, features, HDF5 helpers) and the integrity tests (full disk,
# locks, stale shards, thread count, memory budget) under AddressSanitizer, UndefinedBehaviorSanitizer
# and LeakSanitizer: configure --enable-sanitizers in build-san (CPU only), build only what these
# tests need, run them.  LeakSanitizer stays on; tests/lsan.supp silences Open MPI's own
# allocations (tests/env.sh sets LSAN_OPTIONS).  A few minutes on 2 cores.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
jobs=$(nproc 2>/dev/null || echo 2)
mkdir -p "$top/build-san" && cd "$top/build-san" || exit 1
if [ ! -f Makefile ]; then
  "$top/configure" -q --without-cuda --enable-sanitizers || { echo "FAIL: sanitizers: configure"; exit 1; }
fi
progs="tests/unit/input/test_deck tests/unit/input/test_config tests/unit/data/test_tiff tests/unit/data/test_shards tests/unit/analysis/test_features_io \
tests/hostile/rawtiff tests/hostile/h5edit tests/hostile/corrupt_sweep tests/fixtures/mktiff tests/fixtures/knn_mkdata \
tests/unit/core/test_h5util tests/fixtures/train_mkdata tests/fixtures/feat_mkdata tests/fixtures/ckpt_compare scdino_demo_data"
tests="tests/unit/input/test_deck tests/unit/input/test_config tests/unit/data/test_tiff tests/unit/data/test_shards tests/unit/analysis/test_features_io \
tests/hostile/hostile_decks.sh tests/hostile/hostile_tiff.sh tests/hostile/hostile_shards.sh tests/hostile/hostile_features.sh tests/hostile/hostile_ckpt.sh \
tests/unit/core/test_h5util tests/faults/full_disk.sh tests/faults/run_lock.sh tests/eval/pipeline.sh tests/cli/train_threads.sh \
tests/faults/memory_budget.sh"
# shellcheck disable=SC2086
make -j"$jobs" scdino $progs >build.log 2>&1 || { tail -30 build.log; echo "FAIL: sanitizers: build"; exit 1; }
# check_PROGRAMS is narrowed so that make check builds nothing else.
make -j"$jobs" check TESTS="$tests" check_PROGRAMS="$progs" >check.log 2>&1
rc=$?
grep -E '^(PASS|FAIL|ERROR|SKIP|XFAIL|XPASS):' check.log | sed 's/^/sanitizers: /'
# The corruption sweep, thinned (a child per flip costs more under ASan): every 32nd metadata byte
# and every 1024th data byte.  Its readers end refused files with exit(3) and leave what they held:
# leaks are not what it looks for.
if ASAN_OPTIONS=detect_leaks=0 tests/hostile/corrupt_sweep -m 32 -s 1024 >sweep.log 2>&1; then
  echo "sanitizers: PASS: tests/hostile/corrupt_sweep -m 32 -s 1024"
else
  tail -40 sweep.log
  echo "sanitizers: FAIL: tests/hostile/corrupt_sweep -m 32 -s 1024"
  rc=1
fi
if [ "$rc" != 0 ]; then
  grep -E -h -B2 -A20 'ERROR: (Address|Leak)Sanitizer|runtime error:|^FAIL' tests/*/*.log tests/*/*/*.log 2>/dev/null | head -80
  echo "FAIL: sanitizers"
  exit 1
fi
echo "PASS: sanitizers (ASan + UBSan + LSan)"
