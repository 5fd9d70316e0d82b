#!/bin/sh
# tests/emu/busbw.sh - scdino_allreduce_perf's NCCL backend (bench/busbw/busbw_nccl.c: device buffers,
# fills and exact checks in CUDA kernels, CUDA events, the line-up all-reduce) under the CPU
# emulator, whose NCCL is MPI: every collective on 1 and 2 ranks passes its check, -B auto picks
# nccl, and an injected wrong element gives nccl-tests' status 7.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/bench/busbw_lib.sh"
scratch emu_busbw
BUSBW_BIN=$top_builddir/tests/emu
for n in 1 2; do
  for coll in all_reduce reduce_scatter all_gather broadcast; do
    busbw "$n" scdino_allreduce_perf -B nccl -C "$coll" -b 8 -e 64K -f 16 -n 3 -w 1 -c 1 -d float
    expect_rc 0
    expect_grep '^# Out of bounds values : 0 OK$'
    expect_grep "^# BENCH busbw.$coll.nccl peak_busbw "
    rows=$(busbw_rows | awk -F, '$9 == "0" && $13 == "0"' | wc -l)
    nchecks=$((nchecks + 1))
    [ "$rows" = 4 ] || fail "$coll on $n ranks: $rows clean rows of 4"
  done
done
# -B auto takes nccl where every rank has a GPU of its own.
busbw 2 scdino_allreduce_perf -b 1K -e 1K -n 2 -w 0
expect_rc 0
expect_nogrep 'chose mpi'
expect_grep 'nccl-headers='
# Every operation of all_reduce on 64-bit floats, with averages.
busbw 2 scdino_allreduce_perf -B nccl -b 1K -e 1K -n 2 -w 0 -d double -o all
expect_rc 0
expect_grep '^# Out of bounds values : 0 OK$'
# A wrong element on rank 1, checked on the "GPU": status 7, counted.
SCDINO_BUSBW_INJECT_FAULT=1:3 busbw 2 scdino_allreduce_perf -B nccl -b 1K -e 1K -n 2 -w 0 -c 1
expect_rc 7
expect_grep '^# Out of bounds values : [1-9][0-9]* FAILED$'
finish
