#!/bin/sh
# tests/faults/train_preempt.sh - preemption: SIGTERM, SIGUSR1 and SIGINT during a 2-rank training run make
# every rank finish the step, write a checkpoint (training_complete = 0, stopped_by = the signal), print the
# restart instruction and exit 0; restart = .true. then ends bit-identical to an uninterrupted run.
# Signals raised at a fixed step (&debug signal_at_step, on one rank or all), and real ones from
# outside: SIGUSR1 to mpirun (Open MPI forwards it) and SIGTERM to each rank (what Slurm does).  A
# second SIGINT ends a run at once; a signal in calculation='pipeline' stops it after training.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
. "$top_srcdir/tests/faults/fault_lib.sh"
[ "$MPIEXEC" = none ] && skip "no MPI launcher"
scratch train_preempt
train_data shards

# 40 images, batch 4 per rank on 2 ranks: 5 iterations per epoch, 10 steps.
train_deck full epochs=2 batch_size_per_rank=4 >full.nml
bounded 0 $MPIEXEC -n 2 "$SCDINO" full.nml

# resume NAME EPOCH ITERATION: continue NAME to the end; it must equal the uninterrupted run.
resume() {
  train_deck "$1" epochs=2 batch_size_per_rank=4 restart=.true. >"$1-r.nml"
  bounded 0 $MPIEXEC -n 2 "$SCDINO" "$1-r.nml"
  expect_grep "restart: continuing from $1/checkpoint.h5 at epoch $2, iteration $3 "
  ckpt_same full/checkpoint.h5 "$1/checkpoint.h5"
  ckpt_same full/checkpoint_0000.h5 "$1/checkpoint_0000.h5"
  ckpt_same full/checkpoint_0001.h5 "$1/checkpoint_0001.h5"
  same_log full/log.txt "$1/log.txt"
  no_tmp "$1"
}

# check_stop NAME SIGNAL EPOCH ITERATION: the checkpoint of a stopped run says where and why.
check_stop() {
  nchecks=$((nchecks + 1))
  got="$(attr "$1/checkpoint.h5" epoch) $(attr "$1/checkpoint.h5" iteration) $(attr "$1/checkpoint.h5" training_complete) $(attr "$1/checkpoint.h5" stopped_by)"
  [ "$got" = "$3 $4 0 $2" ] || fail "$1/checkpoint.h5: epoch iteration training_complete stopped_by = $got, wanted $3 $4 0 $2"
}

# SIGTERM on rank 1 only, at the start of global step 3: rank 0 learns it in the step's all-reduce,
# both finish step 3 and stop with iteration 4 next.
debug_deck term "signal_at_step = 3, signal_rank = 1, signal_name = 'TERM'" epochs=2 batch_size_per_rank=4 >term.nml
bounded 0 $MPIEXEC -n 2 "$SCDINO" term.nml
expect_grep "\[rank 1\] debug: raising SIGTERM at the start of global step 3"
expect_grep "train: stopped after 4 steps of this launch \(SIGTERM\) inside epoch 0; continue with restart = \.true\."
expect_grep "train: term/checkpoint.h5 holds epoch 0, iteration 4 \(global step 4 of 10; stopped by SIGTERM\)\.  To continue, run the same deck again with &training restart = \.true\.; on 2 ranks with batch_size_per_rank 4 it continues bit-identically"
expect_nogrep "Epoch \[0/2\] it 5/5"
check_stop term SIGTERM 0 4
resume term 0 4

# SIGINT on every rank in the second epoch (global step 6 = epoch 1, iteration 1).
debug_deck int "signal_at_step = 6, signal_rank = -1, signal_name = 'INT'" epochs=2 batch_size_per_rank=4 >int.nml
bounded 0 $MPIEXEC -n 2 "$SCDINO" int.nml
expect_grep "SIGINT received: every rank finishes the step in progress, then a checkpoint is written"
expect_grep "stopped after 7 steps of this launch \(SIGINT\) inside epoch 1"
check_stop int SIGINT 1 2
resume int 1 2

# SIGUSR1 on rank 0 in the last step of epoch 0: the stop is the epoch's own checkpoint.
debug_deck usr1 "signal_at_step = 4, signal_name = 'USR1'" epochs=2 batch_size_per_rank=4 >usr1.nml
bounded 0 $MPIEXEC -n 2 "$SCDINO" usr1.nml
expect_grep "stopped after 5 steps of this launch at the end of epoch 0 \(SIGUSR1\)"
check_stop usr1 SIGUSR1 1 0
resume usr1 1 0

# From outside: SIGUSR1 to mpirun after the first progress line (Open MPI 4 forwards SIGUSR1 to every
# rank; SIGTERM and SIGINT to mpirun make it kill the ranks a second later, see doc/faults.md).
# The steps are slowed down so the signal lands inside the run (in whichever epoch a loaded machine
# delivers it).
debug_deck ext "step_sleep = 1" epochs=2 batch_size_per_rank=4 log_every=1 >ext.nml
bg_start ext.out $MPIEXEC -n 2 "$SCDINO" ext.nml
wait_for ext.out "Epoch \[0/2\] it 1/5" 300 || fail "ext: no progress line"
kill -USR1 "$bg"
bg_finish
[ "$rc" = 0 ] || fail "ext: exit status $rc after SIGUSR1 to mpirun"
expect_grep "stopped after [0-9]+ steps? of this launch (\(SIGUSR1\) inside epoch [01]|at the end of epoch [01] \(SIGUSR1\))"
nchecks=$((nchecks + 1))
[ "$(attr ext/checkpoint.h5 stopped_by)" = SIGUSR1 ] || fail "ext: stopped_by is $(attr ext/checkpoint.h5 stopped_by)"
resume ext "$(attr ext/checkpoint.h5 epoch)" "$(attr ext/checkpoint.h5 iteration)"

# SIGTERM to every rank process directly, as srun and Slurm's preemption deliver it.
debug_deck slurm "step_sleep = 1" epochs=2 batch_size_per_rank=4 log_every=1 >slurm.nml
bg_start slurm.out $MPIEXEC -n 2 "$SCDINO" slurm.nml
wait_for slurm.out "Epoch \[0/2\] it 1/5" 300 || fail "slurm: no progress line"
ranks=$(pgrep -P "$bg" -f "scdino slurm.nml")
nchecks=$((nchecks + 1))
[ "$(echo $ranks | wc -w)" = 2 ] || fail "slurm: rank processes of mpirun $bg: '$ranks'"
kill -TERM $ranks
bg_finish
[ "$rc" = 0 ] || fail "slurm: exit status $rc after SIGTERM to the ranks"
expect_grep "\(SIGTERM\)"
resume slurm "$(attr slurm/checkpoint.h5 epoch)" "$(attr slurm/checkpoint.h5 iteration)"

# Ctrl-C twice (one rank, no mpirun): the second SIGINT ends the process at once, without waiting for
# the step; the checkpoint of the run before is untouched and nothing half-written is left.
train_deck dbl epochs=2 batch_size_per_rank=4 max_steps=2 >dbl1.nml
bounded 0 "$SCDINO" dbl1.nml
cp dbl/checkpoint.h5 dbl-before.h5 || exit 99
debug_deck dbl "step_sleep = 4" epochs=2 batch_size_per_rank=4 log_every=1 restart=.true. >dbl2.nml
bg_start dbl.out "$SCDINO" dbl2.nml
wait_for dbl.out "Epoch \[0/2\] it 3/10" 300 || fail "dbl: no progress line"
kill -INT "$bg"
sleep 0.2
kill -INT "$bg"
bg_finish
[ "$rc" = 130 ] || fail "dbl: exit status $rc, wanted 130 (killed by SIGINT)"
expect_grep "second SIGINT: stopping immediately"
cmp -s dbl/checkpoint.h5 dbl-before.h5 || fail "dbl: the checkpoint changed"
no_tmp dbl

# calculation='pipeline' stopped by a signal in training: exit 0, the checkpoint written, and no
# features yet (a relaunch continues training, then computes them).
debug_deck pipe "signal_at_step = 2, signal_rank = 1" epochs=2 batch_size_per_rank=4 |
  sed -e "s/calculation = 'train'/calculation = 'pipeline'/" -e "s/train_fraction = 1.0/train_fraction = 0.8/" >pipe.nml
bounded 0 $MPIEXEC -n 2 "$SCDINO" pipe.nml
expect_grep "pipeline: training stopped early on a signal; features, kNN and attention maps come after a relaunch"
check_stop pipe SIGTERM 0 3
nchecks=$((nchecks + 1))
ls pipe | grep -q features && fail "pipe: features were computed after the stop"

# The same, with the signal reaching one rank only after training's last step (while rank 0 writes
# the final checkpoint, paused): the ranks agree on it before the features, all stop with status 0
# (the signalled rank alone used to exit 143 there, which aborted the job).
debug_deck pend "checkpoint_pause = 3" epochs=1 batch_size_per_rank=4 |
  sed -e "s/calculation = 'train'/calculation = 'pipeline'/" -e "s/train_fraction = 1.0/train_fraction = 0.8/" >pend.nml
bg_start pend.out $MPIEXEC -n 2 "$SCDINO" pend.nml
wait_for pend.out "checkpoint write paused" 300 || fail "pend: the checkpoint write did not pause"
ranks=$(pgrep -P "$bg" -f "scdino pend.nml")
nchecks=$((nchecks + 1))
[ "$(echo $ranks | wc -w)" = 2 ] || fail "pend: rank processes of mpirun $bg: '$ranks'"
kill -TERM ${ranks##* }
bg_finish
[ "$rc" = 0 ] || fail "pend: exit status $rc after SIGTERM to one rank at the end of training"
expect_grep "pipeline: training is complete, but a stop signal came at its end"
nchecks=$((nchecks + 1))
ls pend | grep -q features && fail "pend: features were computed after the stop"
finish
