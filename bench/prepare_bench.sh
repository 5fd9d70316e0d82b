#!/bin/sh
# bench/prepare_bench.sh - calculation='prepare' throughput: files/s and MB/s of TIFF on a demo
# set, for 1 and 2 ranks (or the counts given).
#
#   [IPS=images_per_shard] bench/prepare_bench.sh [BUILD_DIR] [IMAGES_PER_CLASS] [RANKS...]
#   e.g.  sh bench/prepare_bench.sh /tmp/build 500 1 2      (8 x 500 = 4000 images)
#
# Ranks convert whole shards, so the default IPS=500 gives 8 shards for the 4000 images (with
# the deck default of 4096 a set this small is one shard, converted by one rank).
# Runs in a scratch directory under BUILD_DIR; the TIFF files are in the page cache after the
# generator wrote them (a warm-cache number: on a cold parallel file system, opening the files
# dominates).  Each rank count runs twice and the second run's numbers are printed, with BENCH
# lines (bench/bench_result.sh) named prepare.npN.  WORKDIR=dir runs there instead.
set -e
here=$(cd "$(dirname "$0")" && pwd)
. "$here/bench_result.sh"
build=${1:-.}
per_class=${2:-500}
shift 2 2>/dev/null || shift $#
ranks=${*:-1 2}
build=$(cd "$build" && pwd)
mpiexec=${MPIEXEC:-mpiexec --oversubscribe --allow-run-as-root}
work=${WORKDIR:-$build/scratch/prepare_bench}
rm -rf "$work" && mkdir -p "$work" && cd "$work"
"$build/scdino_demo_data" -o tiffs -n "$per_class"
echo "TIFF tree: $(find tiffs -name '*.tiff' | wc -l) files, $(du -sm tiffs | cut -f1) MiB"
for n in $ranks; do
  for _ in 1 2; do
    rm -rf shards
    cat >p.nml <<EOF2
&control calculation = 'prepare', verbosity = 1, progress_seconds = 0 /
&data tiff_dir = 'tiffs', shard_dir = 'shards', images_per_shard = ${IPS:-500} /
&system threads = 1 /
EOF2
    t0=$(date +%s.%N)
    $mpiexec -n "$n" "$build/scdino" p.nml >log.txt 2>&1 || { cat log.txt; exit 1; }
    t1=$(date +%s.%N)
  done
  # The end line (progress_seconds = 0: printed however short the run): "N/N files (100 %) in
  # DURATION, R files/s, B MB/s".
  line=$(grep 'prepare: [0-9]*/[0-9]* files (100 %) in' log.txt | sed 's/.*prepare: //')
  printf 'ranks %-3s %s; launch to exit %.2f s; shards %s MiB\n' "$n" "$line" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$(du -sm shards | cut -f1)"
  nfiles=$(printf '%s\n' "$line" | sed -n 's/^\([0-9]*\)\/.*/\1/p')
  bench_result "prepare.np$n" files_per_s "$(printf '%s\n' "$line" | sed -n 's/.* in [^,]*, \([0-9.]*\) files\/s.*/\1/p')" \
    files/s "$n rank(s), $nfiles TIFF files, ${IPS:-500} per shard, warm page cache"
  bench_result "prepare.np$n" tiff_bandwidth "$(printf '%s\n' "$line" | sed -n 's/.*files\/s, \([0-9.]*\) MB\/s.*/\1/p')" \
    MB/s "$n rank(s), MB of TIFF read per second"
done
