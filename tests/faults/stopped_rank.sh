#!/bin/sh
# tests/faults/stopped_rank.sh - a stopped rank (SIGSTOP: alive to the launcher, silent to MPI, its
# own watchdog frozen) ends the job while others wait for it, naming it, with exit status 1 and
# nothing lost.  A study of 2 ranks in groups of 1: rank 0's set is finished (restart), so it waits
# for rank 1's set at the study's end; rank 1 trains slowly (&debug step_sleep, so the training
# lasts) and is stopped once rank 0 has waited for longer than step_timeout plus the heartbeat
# margin without ending anything; rank 0 must then end the job naming rank 1, its set's outputs
# untouched, no temporary file and no lock of its own left; a restart finishes the study.  Then the
# heartbeat rings themselves (tests/unit/core/test_heartbeat): staging's node wait and the study's
# world wait last while the awaited rank works (longer than step_timeout), and end the job naming
# the rank that stopped itself, also when the rank that notices is not the one it stopped before
# (3 ranks).  step_timeout = 10 s (2 s in the ring tests, whose work reports progress every 0.2 s)
# is far above any progress gap of these tiny runs; the only other time limit is the safety guard
# (600 s) that makes a hang a failure.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
. "$top_srcdir/tests/faults/fault_lib.sh"
[ "$MPIEXEC" = none ] && skip "no MPI launcher"
scratch stopped_rank
train_data shards

# deck RUN_DIR SETS [STUDY_KEYS [TRAINING_KEYS [DEBUG_KEYS]]]: 3 epochs, a progress line every step,
# a 10 s step timeout
deck() {
  study_deck "$1" "channel_sets = $2${3:+, $3}" "epochs = 3, log_every = 1${4:+, $4}" "${5:-}" "step_timeout = 10"
}
S0=ch2 S1=ch0_ch1_ch2

# ---- set 0 trained and finished alone
deck st "'ch2'" >one.nml
bounded 0 "$SCDINO" one.nml
cp st/$S0/pipeline.txt pipeline0.txt && cp st/$S0/checkpoint.h5 checkpoint0.h5 && rm st/study.txt st/study.h5 || exit 99

# ---- the study on 2 ranks: rank 0 skips its finished set and waits, rank 1 trains (5 s a step)
deck st "'ch2', '0,1,2'" "ranks_per_run = 1" "restart = .true." "step_sleep = 5" >two.nml
bg_start two.out $MPIEXEC -n 2 "$SCDINO" two.nml
nchecks=$((nchecks + 1))
wait_for two.out "study: st/$S0 is finished .*skipped" 600 || fail "rank 0 did not skip its finished set"
# Rank 1's steps after rank 0 began to wait: 5 of them, each after a 5 s sleep, are more than
# step_timeout plus the margin (15 s) of waiting, and the job must still run.
skipped_at=$(grep -n "study: st/$S0 is finished" two.out | head -1 | cut -d: -f1)
steps_after() { sed -n "${skipped_at:-1},\$p" two.out | grep -c "\[$S1\] Epoch \["; }
n=0
while [ "$(steps_after)" -lt 5 ] && kill -0 "$bg" 2>/dev/null && [ $n -lt 6000 ]; do
  sleep 0.1
  n=$((n + 1))
done
nchecks=$((nchecks + 1))
kill -0 "$bg" 2>/dev/null || fail "the job ended while rank 1 trained and rank 0 waited for it"
out=$(cat two.out)
expect_grep "study: group 1 of 2 is done with its sets; waiting for the other groups"
# Rank 1 of the launch: its MPI rank is in its environment (Open MPI, or MPICH's PMI).
pid=
for p in $(pgrep -f "$SCDINO two.nml"); do
  if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -q -x -e 'OMPI_COMM_WORLD_RANK=1' -e 'PMI_RANK=1'; then
    pid=$p
  fi
done
nchecks=$((nchecks + 1))
[ -n "$pid" ] || fail "rank 1's process not found"
[ -n "$pid" ] && kill -STOP "$pid"
bg_finish
nchecks=$((nchecks + 1))
[ "$rc" = 1 ] || fail "the stopped rank's job: exit status $rc (137: a hang ended by the guard)"
expect_grep "scdino: error \(rank 0 of 2\): rank 1 has shown no sign of life for [0-9.]+ s while this rank was waiting for the other groups' channel sets \(the world heartbeat ring of 2 ranks\)"
expect_grep "ending the job \(&system step_timeout = 10\)"
nchecks=$((nchecks + 4))
cmp -s st/$S0/pipeline.txt pipeline0.txt || fail "st/$S0/pipeline.txt changed"
cmp -s st/$S0/checkpoint.h5 checkpoint0.h5 || fail "st/$S0/checkpoint.h5 changed"
[ -e st/study.txt ] && fail "study.txt written by a study that did not finish"
[ -e st/.scdino.lock ] && fail "rank 0 left its run_dir lock"
no_tmp st st/$S0 st/$S1
[ -n "$pid" ] && kill -CONT "$pid" 2>/dev/null

# ---- the restart finishes the study: set 0 skipped, set 1 trained (its stale lock taken over)
deck st "'ch2', '0,1,2'" "ranks_per_run = 1" "restart = .true." >three.nml
bounded 0 $MPIEXEC -n 2 "$SCDINO" three.nml
expect_grep "study: st/$S0 is finished"
expect_grep "==== scdino study summary ===="
nchecks=$((nchecks + 1))
cmp -s st/$S0/checkpoint.h5 checkpoint0.h5 || fail "st/$S0/checkpoint.h5 changed by the restart"

# ---- the rings on their own
HB="$top_builddir/tests/unit/core/test_heartbeat"
for kind in node world; do
  bounded 0 $MPIEXEC -n 2 "$HB" $kind alive
  expect_grep "test_heartbeat: world rank 0: ok"
  expect_grep "test_heartbeat: world rank 1: ok"
done
# staging: local rank 0 (copying the shards) stops; rank 1 waits for its copy
bounded 1 $MPIEXEC -n 2 "$HB" node stop
expect_grep "scdino: error \(rank 1 of 2\): rank 0 has shown no sign of life for [0-9.]+ s while this rank was waiting for local rank 0's work \(the node heartbeat ring of 2 ranks\)"
# a study's end on 3 ranks: rank 1 stops; rank 0's predecessor (2) lives, rank 2's is rank 1
bounded 1 $MPIEXEC -n 3 "$HB" world stop
expect_grep "scdino: error \(rank 2 of 3\): rank 1 has shown no sign of life for [0-9.]+ s while this rank was waiting for rank 1's work \(the world heartbeat ring of 3 ranks\)"
finish
