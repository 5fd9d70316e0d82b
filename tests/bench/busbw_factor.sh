#!/bin/sh
# busbw_factor.sh - on the MPI backend, every cell of the table has busbw = algbw x 2(n-1)/n for
# all_reduce, (n-1)/n for reduce_scatter and all_gather, 1 for broadcast, and algbw = size / time
# (GB = 1e9 B), to the printed precision, on 2 and 3 ranks.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/bench/busbw_lib.sh"
scratch busbw_factor

for n in 2 3; do
  for prog in scdino_allreduce_perf scdino_reducescatter_perf scdino_allgather_perf scdino_broadcast_perf; do
    case $prog in
      *allreduce*) f=$(awk -v n=$n 'BEGIN { print 2 * (n - 1) / n }') ;;
      *broadcast*) f=1 ;;
      *) f=$(awk -v n=$n 'BEGIN { print (n - 1) / n }') ;;
    esac
    busbw "$n" "$prog" -b 4K -e 4M -f 4 -n 3 -w 1 -c 0 -d float,int8
    expect_rc 0
    nchecks=$((nchecks + 1))
    busbw_rows | awk -F, -v f="$f" -v what="$prog n=$n" '
      # Half a unit in the last printed digit of a number.
      function ulp(s,   d) { d = index(s, "."); return d ? 0.5 * 10 ^ -(length(s) - d) : 0.5 }
      function abs(x) { return x < 0 ? -x : x }
      /^BADROW/ { print what ": " $0; bad = 1; next }
      {
        rows++
        for (c = 6; c <= 10; c += 4) {
          t = $c; a = $(c + 1); b = $(c + 2)
          if (t !~ /^[0-9.]+$/ || a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/) { print what ": exponent form in " $0; bad = 1; continue }
          # busbw from the printed algbw: the error of algbw scaled by f, plus the rounding of busbw.
          if (abs(b - a * f) > ulp(a) * f + ulp(b) + 1e-9) { print what ": busbw " b " != " a " x " f; bad = 1 }
          # algbw from size and the printed time (relative error of the time, plus rounding).
          want = $1 / (t * 1e3)
          if (abs(a - want) > want * ulp(t) / (t - ulp(t)) + ulp(a) + 1e-9) { print what ": algbw " a " != " $1 " B / " t " us"; bad = 1 }
        }
      }
      END { if (rows != 12) { print what ": " rows " rows, wanted 12"; bad = 1 } exit bad }' >&2 ||
      fail "$prog on $n ranks"
  done
done
finish
