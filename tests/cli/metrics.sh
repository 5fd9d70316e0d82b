#!/bin/sh
# tests/cli/metrics.sh - &system metrics_file: training rewrites a Prometheus text file with every
# progress line; its values (step, epoch, totals, loss, memory of each rank, checkpoint age) are
# checked, then the real programs read it: `promtool check metrics` (Debian's prometheus package)
# and prometheus-node-exporter's textfile collector, started on a loopback port and scraped with
# curl; and the Grafana dashboard (examples/monitoring) uses only metrics that are there.  Each of these parts is skipped with a message when the program is absent
# (scripts/setup.sh --tests installs them).  A metrics folder that does not exist is a deck error.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
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

# A folder that is not there.
sed "s|prom/scdino.prom|nodir/x.prom|" m.nml >bad.nml
expect_exit 2 "$SCDINO" bad.nml
expect_grep "error: &system metrics_file = 'nodir/x.prom': the folder nodir does not exist"
finish
