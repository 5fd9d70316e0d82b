#!/bin/sh
# tests/faults/run_lock.sh - one job per run_dir and per shard_dir being built (src/core/runlock.h):
# a second training in a live run's run_dir is refused (exit 2, naming the holder) and leaves the
# first one's files alone; a lock of a live process, of another host, or of this host's dead
# process; a requeued Slurm job takes its own lock over; prepare refuses a shard_dir that another
# job is building; the lock is gone after a normal end and after an error.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
. "$top_srcdir/tests/faults/fault_lib.sh"
scratch run_lock
train_data shards
host=$(hostname)

lock_of() { # lock_of DIR HOST PID [JOB]
  mkdir -p "$1" && echo "host=$2 pid=$3 job=${4:-} since=1700000000" >"$1/.scdino.lock"
}
gone() {
  nchecks=$((nchecks + 1))
  [ -e "$1/.scdino.lock" ] && fail "$1/.scdino.lock left behind"
}

# A second training in the run_dir of a live one.
# (The first run sleeps 2 s a step, 30 steps, and is stopped with SIGTERM once the second is done.)
debug_deck a "step_sleep = 2" epochs=3 batch_size_per_rank=4 >a.nml
bg_start a.out "$SCDINO" a.nml
n=0
while [ ! -f a/.scdino.lock ] && [ $n -lt 6000 ]; do sleep 0.1; n=$((n + 1)); done
nchecks=$((nchecks + 1))
[ -f a/.scdino.lock ] || fail "a live run holds no a/.scdino.lock"
expect_exit 2 "$SCDINO" a.nml
kill -TERM "$bg"
expect_grep "error: run_dir 'a' is in use by another scdino job \(pid $bg on host $host, since [0-9-]+ [0-9:]+\): two jobs must not share it"
bg_finish
nchecks=$((nchecks + 1))
[ "$rc" = 0 ] || fail "the first run ended with status $rc"
gone a

# A live process of this host holds it (a stand-in), another host's job, a dead process.
sleep 600 &
live=$!
lock_of b "$host" "$live"
train_deck b epochs=1 batch_size_per_rank=4 max_steps=1 >b.nml
expect_exit 2 "$SCDINO" b.nml
expect_grep "run_dir 'b' is in use by another scdino job \(pid $live on host $host"
kill "$live"
wait "$live" 2>/dev/null
lock_of b other-node.example 4242 777
expect_exit 2 "$SCDINO" b.nml
expect_grep "pid 4242 on host other-node.example, Slurm job 777, since .* if that job is gone, remove b/.scdino.lock"
lock_of b "$host" "$live"
expect_exit 0 "$SCDINO" b.nml
expect_grep "warning: b/.scdino.lock: taking over the lock of pid $live on $host \(that process no longer runs\)"
gone b
lock_of b other-node.example 4242 777
expect_exit 0 env SLURM_JOB_ID=777 "$SCDINO" b.nml
expect_grep "taking over the lock of pid 4242 on other-node.example \(it belongs to an earlier run of this Slurm job \(requeued\)\)"
gone b

# An error ends the run: the lock goes with it.
train_deck c epochs=1 batch_size_per_rank=4 init_from="'nowhere.h5'" >c.nml
expect_exit 3 "$SCDINO" c.nml
gone c

# prepare: a shard_dir another job is building (no manifest yet) is left alone.
mkdir -p tiffs/A tiffs/B || exit 99
for f in tiffs/A/1.tif tiffs/A/2.tif tiffs/B/1.tif tiffs/B/2.tif; do
  "$top_builddir/tests/fixtures/mktiff" "$f" 2 16 16 u16 ramp || exit 99
done
sleep 600 &
live=$!
lock_of s "$host" "$live"
echo partial >s/shard-00000.h5.tmp.$live
cat >p.nml <<EOF
&control calculation = 'prepare', run_dir = 'p' /
&data tiff_dir = 'tiffs', shard_dir = 's' /
EOF
expect_exit 2 "$SCDINO" p.nml
expect_grep "error: shard_dir 's' is in use by another scdino job \(pid $live on host $host"
nchecks=$((nchecks + 1))
[ -f "s/shard-00000.h5.tmp.$live" ] || fail "prepare removed the files of the job that holds the shard_dir"
kill "$live"
wait "$live" 2>/dev/null
expect_exit 0 "$SCDINO" p.nml
expect_grep "taking over the lock of pid $live"
nchecks=$((nchecks + 1))
[ -f s/manifest.h5 ] && [ ! -e "s/shard-00000.h5.tmp.$live" ] || fail "prepare did not rebuild s after the stale lock"
gone s
gone p
finish
