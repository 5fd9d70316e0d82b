#!/bin/sh
# busbw_check.sh - the benchmark's exact correctness check passes for every collective on 1, 2 and
# 3 ranks (every type on 3, and every op of all_reduce), and an injected fault makes it fail with nccl-tests' status 7,
# counted exactly in #wrong and "Out of bounds values".
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/bench/busbw_lib.sh"
scratch busbw_check

# Column 9 and 13 are #wrong; every checked cell must show 0.
all_zero() {
  busbw_rows | awk -F, -v what="$1" '
    /^BADROW/ { print "bad row: " $0; bad = 1; next }
    { rows++; if ($9 != "0" || $13 != "0") { print what ": wrong data: " $0; bad = 1 } }
    END { if (rows < 1) { print what ": no rows"; bad = 1 } exit bad }' >&2 || fail "$1"
}

for n in 1 2 3; do
  for prog in scdino_allreduce_perf scdino_reducescatter_perf scdino_allgather_perf scdino_broadcast_perf; do
    args="-b 8 -e 32K -f 8 -n 3 -w 1 -c 1"
    [ "$n" = 3 ] && args="$args -d all"
    [ "$n" = 3 ] && [ "$prog" = scdino_allreduce_perf ] && args="$args -o all"
    [ "$n" = 3 ] && [ "$prog" = scdino_broadcast_perf ] && args="$args -r 2"
    busbw "$n" "$prog" $args
    expect_rc 0
    expect_grep '^# Out of bounds values : 0 OK$'
    all_zero "$prog on $n ranks"
    [ "$n" = 3 ] && [ "$prog" = scdino_allreduce_perf ] && all_reduce_out=$out
  done
done
# Every type and op of all_reduce on 3 ranks: 10 types x 5 ops x 5 sizes, all checked.
out=$all_reduce_out
nrows=$(busbw_rows | wc -l)
[ "$nrows" = 250 ] || fail "all types and ops: $nrows rows, wanted 250"
nchecks=$((nchecks + 1))
for t in int8 uint8 int32 uint32 int64 uint64 half float double bfloat16; do
  for op in sum prod max min avg; do
    expect_grep "^ +32768 +[0-9]+ +$t +$op +-1 .* 0$"
  done
done

# Fault injection: element 3 of rank 1's result, 4 iterations checked every 2nd = 2 checked per
# cell, so #wrong is 2 in each cell and 2 sizes x 2 placements x 2 iterations are out of bounds.
export SCDINO_BUSBW_INJECT_FAULT=1:3
for prog in scdino_allreduce_perf scdino_reducescatter_perf scdino_allgather_perf scdino_broadcast_perf; do
  busbw 3 "$prog" -b 1K -e 2K -f 2 -n 4 -w 0 -c 2 -r 1
  expect_rc 7
  expect_grep '^# Out of bounds values : 8 FAILED$'
  bad=$(busbw_rows | awk -F, '$9 == 2 && $13 == 2' | wc -l)
  [ "$bad" = 2 ] || fail "$prog: wanted #wrong 2 in both cells of both rows, got $bad rows"
  nchecks=$((nchecks + 1))
done
# An element past the end of the result is never touched: the run passes.
export SCDINO_BUSBW_INJECT_FAULT=0:100000
busbw 2 scdino_allreduce_perf -b 1K -e 1K -n 2 -w 0
expect_rc 0
# A fault on rank 0 of a 1-rank run fails too; -c 0 turns checking (and the fault) off.
export SCDINO_BUSBW_INJECT_FAULT=0:0
busbw 1 scdino_allgather_perf -b 1K -e 1K -n 3 -w 0
expect_rc 7
expect_grep '^# Out of bounds values : 6 FAILED$'
busbw 1 scdino_allgather_perf -b 1K -e 1K -n 3 -w 0 -c 0
expect_rc 0
expect_grep '^ +1024 +256 +float +none +-1 +[0-9.e+]+ +[0-9.e+]+ +[0-9.e+]+ +N/A +[0-9.e+]+ +[0-9.e+]+ +[0-9.e+]+ +N/A$'
unset SCDINO_BUSBW_INJECT_FAULT
finish
