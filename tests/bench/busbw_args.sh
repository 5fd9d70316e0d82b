#!/bin/sh
# busbw_args.sh - the benchmark's command line through the programs: help, K/M/G sizes, factor and
# increment sweeps, bad values (usage and status 2), backend choice, the fault-injection variable.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/bench/busbw_lib.sh"
scratch busbw_args

sizes() { busbw_rows | cut -d, -f1 | tr '\n' ' '; }

busbw1 scdino_allreduce_perf -h
expect_rc 0
expect_grep '^SYNOPSIS$'
expect_grep '^EXIT STATUS$'
expect_grep 'scdino_allreduce_perf -b 8 -e 256M -f 2'
busbw1 scdino_broadcast_perf --help
expect_rc 0
expect_grep '^    scdino_broadcast_perf - bus bandwidth'

# Binary suffixes and the two kinds of sweep.
busbw1 scdino_allreduce_perf -b 1K -e 4K -i 1K -n 1 -w 0
expect_rc 0
nchecks=$((nchecks + 1))
[ "$(sizes)" = "1024 2048 3072 4096 " ] || fail "-i sweep gave sizes '$(sizes)'"
expect_grep 'step: 1024\(bytes\)'
busbw1 scdino_allreduce_perf -b 1K -e 1M -f 32 -n 1 -w 0
nchecks=$((nchecks + 1))
[ "$(sizes)" = "1024 32768 1048576 " ] || fail "-f sweep gave sizes '$(sizes)'"
# A size that does not divide into elements is rounded down to whole elements, as nccl-tests does.
busbw1 scdino_allreduce_perf -b 0 -e 16 -f 4 -n 1 -w 0 -d double
nchecks=$((nchecks + 1))
[ "$(sizes)" = "0 0 0 16 " ] || fail "0,1,4,16 B of double gave sizes '$(sizes)'"

# Bad command lines: the message, the usage text, status 2, nothing run.
for args in "-b 1X" "-b 2M -e 1M" "-f 2 -i 1M" "-n 0" "-d float128" "-o xor" "-z 3" "-a 5" "-C alltoall" \
            "-B gpu" "-g 8" "stray" "--json" "--in-chans 3"; do
  busbw1 scdino_allreduce_perf $args
  expect_rc 2
  expect_grep "^scdino_allreduce_perf: error: "
  expect_grep '^SYNOPSIS$'
  expect_nogrep 'Collective test starting'
done
busbw 2 scdino_broadcast_perf -r 2 -b 8 -e 8
expect_rc 2
expect_grep 'error: -r 2: the root must be a rank, 0..1'
export SCDINO_BUSBW_INJECT_FAULT=x
busbw1 scdino_allreduce_perf -b 8 -e 8
unset SCDINO_BUSBW_INJECT_FAULT
expect_rc 2
expect_grep 'SCDINO_BUSBW_INJECT_FAULT must be RANK:ELEMENT'
busbw1 scdino_allreduce_perf --sizes-from-model "$dir/missing.nml"
expect_rc 2
expect_grep 'missing.nml'
# The MPI backend takes at most INT_MAX elements per call.
busbw1 scdino_allreduce_perf -b 3G -e 3G -d int8 -B mpi
expect_rc 2
expect_grep 'more than the mpi backend takes'

# Backends: auto says why it chose mpi here (no NCCL in the build, or no usable GPU); -B nccl
# without a GPU is refused with the reason, never silently replaced.
busbw1 scdino_allreduce_perf -b 8 -e 8 -n 1
expect_rc 0
expect_grep '^# Backend: mpi, 1 rank; -B auto chose mpi: (built without NCCL|no usable GPU)'
busbw1 scdino_allreduce_perf -b 8 -e 8 -n 1 -B nccl
if grep -q '^#define HAVE_NCCL 1' "$top_builddir/build_config.h" && [ -z "$(printf '%s\n' "$out" | grep 'no usable GPU')" ]; then
  echo "a GPU is usable: -B nccl ran"
  expect_rc 0
else
  nchecks=$((nchecks + 1))
  [ "$rc" != 0 ] || fail "-B nccl without NCCL or GPU succeeded"
  expect_grep '(-B nccl: this build has no NCCL backend|-B nccl: no usable GPU: )'
fi
finish
