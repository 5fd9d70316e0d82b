#!/bin/sh
# tests/cli/metrics.sh - &system metrics_file: training rewrites a Prometheus text file with every
# progress line; its values (step, epoch, totals, loss, memory of each rank, checkpoint age) are
# checked, then the real programs read it: `promtool check metrics` (Debian's prometheus package)
# and prometheus-node-exporter's textfile collector, started on a loopback port and scraped with
# curl; and the Grafana dashboard (examples/monitoring) uses only metrics that are there.  Each of these parts is skipped with a message when the program is absent
# (scripts/setup.sh --tests installs them).
# It may only create or replace its own file: a metrics_file that is a folder, in a folder that does
# not exist, the manifest or the deck itself is refused with the deck (exit 2, nothing trained, the
# file unchanged byte for byte); an empty file is taken.  Label values are valid UTF-8 whatever bytes
# run_dir holds (promtool reads the file).  Monitoring never stops training: the metrics folder made
# read-only mid-run (a tmpfs remounted read-only; needs root, skipped otherwise) gives one warning
# naming errno 30, training goes on to exit 0, and the first write that works again says so.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
. "$top_srcdir/tests/faults/fault_lib.sh"
scratch metrics
train_data shards
mkdir prom || exit 99

# 40 images, batch 4, 2 epochs: 20 steps, a line (and a rewrite) every 5.
train_deck m epochs=2 batch_size_per_rank=4 log_every=5 | sed "s|&system |\&system metrics_file = 'prom/scdino.prom', |" >m.nml
expect_exit 0 "$SCDINO" m.nml
f=prom/scdino.prom
ids='run_dir="m",job="[^"]*",host="[^"]+"'
nchecks=$((nchecks + 1))
[ -f $f ] || fail "no $f"
for want in "scdino_global_step{$ids} 20" "scdino_epoch{$ids} 1" "scdino_total_steps{$ids} 20" \
            "scdino_info{$ids,version=\"[0-9.]+\",arch=\"custom\",backend=\"cpu\",ranks=\"1\"} 1" \
            "scdino_loss{$ids} [0-9.e+-]+" "scdino_learning_rate{$ids} [0-9.e+-]+" \
            "scdino_images_per_second{$ids} [0-9.e+-]+" "scdino_step_seconds{$ids,part=\"comm\"} [0-9.e+-]+" \
            "scdino_memory_peak_bytes{$ids,rank=\"0\"} [0-9.e+]+" "scdino_checkpoint_age_seconds{$ids} [0-9.e+-]+" \
            "# TYPE scdino_step_seconds gauge"; do
  nchecks=$((nchecks + 1))
  grep -Eq "^$want\$" $f || fail "$f has no line matching /$want/"
done
nchecks=$((nchecks + 1))
ls -a prom | grep -q '\.tmp\.' && fail "temporary files left in prom/"

# Two ranks: a memory line for each.
if [ "$MPIEXEC" != none ]; then
  sed 's/run_dir = .m./run_dir = '"'"'m2'"'"'/' m.nml >m2.nml
  expect_exit 0 $MPIEXEC -n 2 "$SCDINO" m2.nml
  nchecks=$((nchecks + 2))
  grep -Eq "^scdino_memory_peak_bytes\{run_dir=\"m2\",[^}]*,rank=\"1\"\} [0-9.e+]+$" $f || fail "no memory line of rank 1"
  grep -Eq "^scdino_global_step\{run_dir=\"m2\",[^}]*\} 10$" $f || fail "2 ranks: global step is not 10"
fi

# promtool, Prometheus's own checker.
if command -v promtool >/dev/null 2>&1; then
  nchecks=$((nchecks + 1))
  promtool check metrics <$f >promtool.out 2>&1 || { fail "promtool check metrics refused $f"; sed 's/^/    | /' promtool.out; }
else
  echo "promtool not installed: its check is skipped (scripts/setup.sh --tests installs prometheus)"
fi

# node_exporter's textfile collector serves the file: scrape it.
exporter=$(command -v prometheus-node-exporter || command -v node_exporter || :)
if [ -n "$exporter" ] && command -v curl >/dev/null 2>&1; then
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$exporter" --collector.disable-defaults --collector.textfile --collector.textfile.directory="$(pwd)/prom" \
    --web.listen-address="127.0.0.1:$port" >exporter.log 2>&1 &
  epid=$!
  tries=0
  while [ $tries -lt 300 ] && ! curl -sf "http://127.0.0.1:$port/metrics" >scrape.txt 2>/dev/null; do
    sleep 0.1
    tries=$((tries + 1))
  done
  kill $epid 2>/dev/null
  wait $epid 2>/dev/null
  nchecks=$((nchecks + 3))
  last=20 # the 2-rank run, when there was one, wrote the file last
  [ "$MPIEXEC" != none ] && last=10
  grep -Eq "^scdino_global_step\{[^}]*\} $last$" scrape.txt || fail "node_exporter does not serve scdino_global_step = $last"
  grep -Eq "^scdino_memory_peak_bytes\{" scrape.txt || fail "node_exporter does not serve scdino_memory_peak_bytes"
  grep -Eq '^node_textfile_scrape_error 0$' scrape.txt || fail "node_exporter's textfile collector reports an error"
  grep '^scdino_global_step' scrape.txt
else
  echo "prometheus-node-exporter or curl not installed: the scrape is skipped (scripts/setup.sh --tests installs them)"
fi

# The Grafana dashboard uses only metrics that scdino writes (the GPU one only on the CUDA backend).
for name in $(grep -o 'scdino_[a-z_]*' "$top_srcdir/examples/monitoring/scdino-dashboard.json" | sort -u); do
  case $name in scdino_gpu_*|scdino_training) continue ;; esac
  nchecks=$((nchecks + 1))
  grep -q "^$name{" $f || fail "the dashboard uses $name, which $f does not have"
done

# What metrics_file may not name: checked with the deck, so nothing is trained, and the file named
# is left as it was.
refused() { # refused NAME METRICS_FILE MESSAGE  (deck NAME.nml, run_dir run_NAME)
  sed "s|prom/scdino.prom|$2|; s|run_dir = 'm'|run_dir = 'run_$1'|" m.nml >"$1.nml"
  [ -f "$2" ] && cp "$2" "$1.before"
  expect_exit 2 "$SCDINO" "$1.nml"
  expect_grep "^$1.nml:[0-9]+:[0-9]+: metrics_file = '$2': $3"
  expect_grep "nothing was run"
  nchecks=$((nchecks + 2))
  [ -e "run_$1/checkpoint.h5" ] && fail "$1: trained although the deck was refused"
  [ -f "$1.before" ] && ! cmp -s "$2" "$1.before" && fail "$1: $2 was changed"
}
refused nodir nodir/x.prom "the folder nodir does not exist"
refused manifest shards/manifest.h5 "it exists and is not scdino's own metrics file"
refused deck deck.nml "it is this run's input deck \\(deck.nml\\)"
refused folder prom "it is a directory"

# run_dir with bytes that are not UTF-8 (and a double quote): the label holds U+FFFD for the byte, an
# escaped quote, and promtool reads the file.  The metrics file is there already, empty: it is taken.
run=$(printf 'u\377"x')
: >prom/u.prom
train_deck "$run" epochs=1 batch_size_per_rank=4 log_every=5 | sed "s|&system |\&system metrics_file = 'prom/u.prom', |" >u.nml
expect_exit 0 "$SCDINO" u.nml
nchecks=$((nchecks + 1))
grep -q "^scdino_global_step{run_dir=\"u$(printf '\357\277\275')\\\\\"x\"," prom/u.prom ||
  fail "prom/u.prom: run_dir is not u, U+FFFD, an escaped quote, x"
if command -v promtool >/dev/null 2>&1; then
  nchecks=$((nchecks + 1))
  promtool check metrics <prom/u.prom >promtool.out 2>&1 || { fail "promtool check metrics refused prom/u.prom"; sed 's/^/    | /' promtool.out; }
fi

# The metrics folder turns read-only mid-run.  The run is stopped (SIGSTOP) while the folder changes,
# so that it changes between two progress lines; 30 progress lines leave room for both changes.
mnt=$(mktemp -d /tmp/scdino-prom.XXXXXX) || exit 99
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=1m tmpfs "$mnt" 2>/dev/null; then
  trap 'umount "$mnt" 2>/dev/null; rmdir "$mnt" 2>/dev/null' EXIT
  { train_deck ro epochs=6 batch_size_per_rank=4 log_every=2 | sed "s|&system |\&system metrics_file = '$mnt/ro.prom', |"
    echo "&debug step_sleep = 0.2 /"; } >ro.nml
  bg_start ro.out "$SCDINO" ro.nml
  n=0
  while [ ! -f "$mnt/ro.prom" ] && [ $n -lt 3000 ]; do sleep 0.1; n=$((n + 1)); done
  kill -STOP "$bg"
  mount -o remount,ro "$mnt" || fail "cannot remount $mnt read-only"
  kill -CONT "$bg"
  wait_for ro.out "metrics file .* not written|scdino: error" 300 || fail "no warning after the folder turned read-only"
  kill -STOP "$bg"
  mount -o remount,rw "$mnt" || fail "cannot remount $mnt read-write"
  kill -CONT "$bg"
  bg_finish
  nchecks=$((nchecks + 5))
  [ "$rc" = 0 ] || { fail "read-only metrics folder: exit status $rc (wanted 0)"; printf '%s\n' "$out" | sed 's/^/    | /' >&2; }
  [ "$(grep -c 'warning: metrics file' ro.out)" = 1 ] || fail "not one warning about the metrics file: $(grep -c 'warning: metrics file' ro.out)"
  grep -Eq "warning: metrics file $mnt/ro.prom not written: errno 30: Read-only file system; training goes on" ro.out ||
    fail "the warning does not name errno 30 (read-only file system)"
  grep -Eq "metrics file $mnt/ro.prom is written again \([0-9]+ updates? missed\)" ro.out || fail "no line saying the metrics file is written again"
  grep -Eq "^scdino_global_step\{[^}]*\} 60$" "$mnt/ro.prom" || fail "$mnt/ro.prom does not hold the last step (60)"
  no_tmp "$mnt"
  grep -E 'metrics file|train: 60 steps' ro.out
else
  rmdir "$mnt"
  echo "no tmpfs could be mounted (needs root): the read-only metrics folder is skipped"
fi
finish
