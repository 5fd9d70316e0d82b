#!/bin/sh
# busbw_format.sh - the benchmark's output read the way nccl-tests parsers (nccl_to_csv.py and
# friends) read it: '#' header lines, the column header, 13 fields per row, the footer lines and
# their values; and the JSON file.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/bench/busbw_lib.sh"
scratch busbw_format

busbw 2 scdino_allreduce_perf -b 8 -e 1M -f 4 -n 3 -w 1 --json "$dir/ar.json"
expect_rc 0
expect_grep '^# scdino_allreduce_perf version [0-9.]+ \(scdino, nccl-tests table format\) mpi-library='
expect_grep '^# Collective test starting: scdino_allreduce_perf$'
expect_grep '^# nThread 1 nGpus 1 minBytes 8 maxBytes 1048576 step: 4\(factor\) warmup iters: 1 iters: 3 agg iters: 1 validation: 1 graph: 0$'
expect_grep '^# Using devices$'
expect_grep '^#  Rank  0 Group  0 Pid +[0-9]+ on +[^ ]+ device '
expect_grep '^#  Rank  1 Group  0 Pid +[0-9]+ on +[^ ]+ device '
expect_grep '^# Timing: .*MAX over ranks \(-a 3\), then the mean over 3 iterations$'
expect_grep '^#                                                              out-of-place                       in-place$'
expect_grep '^#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong$'
expect_grep '^#        \(B\)    \(elements\)                               \(us\)  \(GB/s\)  \(GB/s\)             \(us\)  \(GB/s\)  \(GB/s\)$'
expect_grep '^# Out of bounds values : 0 OK$'
expect_grep '^# Avg bus bandwidth    : [0-9.e+-]+ $'
expect_grep '^# Peak bus bandwidth   : [0-9.]+ GB/s at [0-9]+ B \((out-of-place|in-place)\)$'
expect_grep '^# Busbw at max size    : [0-9.]+ GB/s out-of-place, [0-9.]+ GB/s in-place at 524288 B$'
expect_grep '^# Collective test concluded: scdino_allreduce_perf$'
nchecks=$((nchecks + 1))
[ "$(printf '%s\n' "$out" | grep -c 'Avg bus bandwidth')" = 1 ] || fail "'Avg bus bandwidth' must occur once (parsers grep it)"

# The rows: 8 B x 4^k up to 1 MiB = 9 sizes; size = 4 x count; float, sum, root -1; numbers; no
# wrong data.  Then the footer's numbers from the rows.
rows=$(busbw_rows)
printf '%s\n' "$rows" > rows.csv
printf '%s\n' "$out" > table.txt
awk -F, '
  /^BADROW/ { print "row without 13 fields: " $0; bad = 1; next }
  {
    n++
    want = 8 * 4 ^ (n - 1)
    if ($1 != want) { print "row " n ": size " $1 ", wanted " want; bad = 1 }
    if ($2 * 4 != $1) { print "row " n ": count " $2 " is not size/4"; bad = 1 }
    if ($3 != "float" || $4 != "sum" || $5 != "-1") { print "row " n ": type/redop/root " $3 " " $4 " " $5; bad = 1 }
    for (i = 6; i <= 13; i++) if ($i !~ /^[0-9.e+]+$/) { print "row " n ": field " i " not a number: " $i; bad = 1 }
    if ($9 != 0 || $13 != 0) { print "row " n ": wrong data"; bad = 1 }
    for (c = 8; c <= 12; c += 4) { sum += $c; cells++; if ($c > peak) peak = $c }
    last_oop = $8; last_ip = $12
  }
  END {
    if (n != 9) { print n " rows, wanted 9"; bad = 1 }
    printf "%.6f %.6f %s %s\n", sum / cells, peak, last_oop, last_ip > "footer.want"
    exit bad
  }' rows.csv >&2 || fail "table rows"
nchecks=$((nchecks + 1))
read avg_want peak_want oop_want ip_want < footer.want
avg=$(sed -n 's/^# Avg bus bandwidth    : \([^ ]*\) $/\1/p' table.txt)
peak=$(sed -n 's/^# Peak bus bandwidth   : \([0-9.]*\) GB.*/\1/p' table.txt)
maxs=$(sed -n 's/^# Busbw at max size    : \([0-9.]*\) GB\/s out-of-place, \([0-9.]*\) GB.*/\1 \2/p' table.txt)
# The average is over unrounded values: within half a printed unit per cell of the rounded ones.
awk -v a="$avg" -v w="$avg_want" -v p="$peak" -v pw="$peak_want" 'BEGIN {
  d = a - w; if (d < 0) d = -d
  e = p - pw; if (e < 0) e = -e
  exit !(d <= 0.005 + 1e-6 * w && e <= 0.0051) }' || fail "footer: avg $avg (rows give $avg_want), peak $peak (rows give $peak_want)"
nchecks=$((nchecks + 1))
[ "$maxs" = "$oop_want $ip_want" ] || fail "footer: busbw at max size '$maxs', last row has '$oop_want $ip_want'"

# The JSON file holds the same rows and footer.
if [ "$PYTHON3" != none ]; then
  nchecks=$((nchecks + 1))
  "$PYTHON3" - "$dir/ar.json" rows.csv <<'PYEOF' || fail "JSON file"
import csv, json, sys
j = json.load(open(sys.argv[1]))
rows = list(csv.reader(open(sys.argv[2])))
assert j["format"] == "scdino-busbw" and j["collective"] == "all_reduce" and j["backend"] == "mpi", j
assert j["nranks"] == 2 and len(j["devices"]) == 2 and j["config"]["iters"] == 3
assert len(j["results"]) == len(rows) == 9
for r, c in zip(j["results"], rows):
    assert r["size"] == int(c[0]) and r["count"] == int(c[1]) and r["type"] == c[2] and r["redop"] == c[3], (r, c)
    for key, col in (("out_of_place", 5), ("in_place", 9)):
        cell = r[key]
        assert cell["nwrong"] == 0
        assert cell["time_min_us"] <= cell["time_us"] * (1 + 1e-5) and cell["time_us"] <= cell["time_max_us"] * (1 + 1e-5), cell
        assert abs(cell["time_us"] - float(c[col])) <= 0.0051 * max(1, float(c[col]) / 100), (cell, c)
        assert abs(cell["bus_bw"] - float(c[col + 2])) <= 0.0051, (cell, c)
assert j["out_of_bounds"] == {"count": 0, "okay": True}
assert j["peak_bus_bandwidth"]["bandwidth"] == max(max(r["out_of_place"]["bus_bw"], r["in_place"]["bus_bw"]) for r in j["results"])
PYEOF
fi
nchecks=$((nchecks + 1))
ls "$dir"/ar.json.tmp.* >/dev/null 2>&1 && fail "temporary JSON file left behind"

# all_gather through -C: the count column is per rank, the size the whole array; redop none.
busbw 3 scdino_allreduce_perf -C all_gather -b 1K -e 64K -f 8 -n 2 -w 0
expect_rc 0
expect_grep '^# Collective test starting: scdino_allgather_perf$'
expect_grep '^        1008            84     float    none      -1 '
expect_grep '^       65520          5460     float    none      -1 '
# broadcast: the root column; -c 0: #wrong is N/A; -z 1 and -a 2 are stated in the header.
busbw 2 scdino_broadcast_perf -b 4K -e 4K -r 1 -c 0 -z 1 -a 2 -n 2
expect_rc 0
expect_grep '^        4096          1024     float    none       1 .* N/A .* N/A$'
expect_grep '^# Blocking Enabled: wait for completion and barrier after each iteration$'
expect_grep '^# Timing: .*MIN over ranks \(-a 2\)'
expect_grep '^# Check: off \(-c 0\)$'
# --min-busbw: a gate nobody reaches on a CPU fails with 7; 0.000001 GB/s passes.
busbw 2 scdino_allreduce_perf -b 1M -e 1M -n 2 --min-busbw 1e9
expect_rc 7
expect_grep '^# Peak bus bandwidth   : .* FAILED \(minimum 1e\+09 GB/s\)$'
busbw 2 scdino_allreduce_perf -b 1M -e 1M -n 2 --min-busbw 0.000001
expect_rc 0
expect_grep '^# Peak bus bandwidth   : .* OK \(minimum 1e-06 GB/s\)$'
finish
