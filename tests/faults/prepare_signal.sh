#!/bin/sh
# tests/faults/prepare_signal.sh - SIGTERM to the ranks while 2 of them convert TIFFs (what Slurm's
# scancel or a time limit does: srun signals every task): every rank removes its unfinished
# shard-*.tmp.<pid> before it ends, so nothing half-written is left; no manifest claims the set
# complete; and the next prepare builds it.  &debug step_sleep slows the conversion (0.02 s per
# image) so the signal lands while a shard is being written, on any machine.  (Signalled through
# mpirun instead, each rank does the same, but mpirun sends SIGKILL a second after its SIGTERM: a
# rank that a loaded machine does not schedule within that second cannot answer, so the test does
# not depend on it.)
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/faults/fault_lib.sh"
[ "$MPIEXEC" = none ] && skip "no MPI launcher"
scratch prepare_signal
"$top_builddir/scdino_demo_data" -o tiffs -n 100 -c 4 -q || exit 99
cat >slow.nml <<'DECK'
&control calculation = 'prepare' /
&data tiff_dir = 'tiffs', shard_dir = 'shards', images_per_shard = 100 /
&debug step_sleep = 0.02 /
DECK
$MPIEXEC -n 2 "$SCDINO" slow.nml >slow.out 2>&1 &
pid=$!
# Until a shard's temporary file is there (each takes 2 s or more to write) or the run has ended.
tries=0
while [ $tries -lt 6000 ] && kill -0 $pid 2>/dev/null && ! ls -a shards 2>/dev/null | grep -q '\.tmp\.'; do
  sleep 0.05
  tries=$((tries + 1))
done
nchecks=$((nchecks + 1))
if ls -a shards 2>/dev/null | grep -q '\.tmp\.'; then
  # the ranks: the processes of this deck whose MPI rank is in their environment (not mpirun)
  ranks=
  for p in $(pgrep -f "$SCDINO slow.nml"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -q -e '^OMPI_COMM_WORLD_RANK=' -e '^PMI_RANK=' &&
      ranks="$ranks $p"
  done
  echo "SIGTERM sent to the ranks ($ranks ) while writing: $(ls -a shards | grep '\.tmp\.' | tr '\n' ' ')"
  [ -n "$ranks" ] && kill -TERM $ranks
else
  fail "no shard was being written (the run ended or never started)"
  kill -KILL $pid 2>/dev/null
fi
rc=0
wait $pid || rc=$?
sed 's/^/    | /' slow.out | grep -v '^    | *!' | tail -8
nchecks=$((nchecks + 1))
[ "$rc" != 0 ] || fail "a prepare ended by SIGTERM exited 0"
no_tmp shards
nchecks=$((nchecks + 1))
[ ! -e shards/manifest.h5 ] || fail "an interrupted prepare left a manifest"
nchecks=$((nchecks + 1))
grep -q "SIGTERM" slow.out || fail "no rank said it was stopped by SIGTERM"

# Again without the delay: the set is built.
sed '/&debug/d' slow.nml >fast.nml
expect_exit 0 $MPIEXEC -n 2 "$SCDINO" fast.nml
expect_grep "prepare: 400 images in 4 shard\(s\) under shards"
no_tmp shards
finish
