#!/bin/sh
# tests/faults/train_faults.sh - numerical and rank faults end the run with a message, never a hang.
# A NaN injected into one tensor's gradient (&debug nan_at_step) stops training at that step naming
# the tensor, the step and the last good checkpoint (exit 1, checkpoint untouched), also when it
# comes from one rank of two through the all-reduce.  A rank that fails (a fatal error, an allocation
# that cannot succeed, kill -9, or hanging with &system step_timeout) ends the 2-rank job (no hang)
# with the rank and the reason printed, also when a loader thread finds a truncated shard.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
. "$top_srcdir/tests/faults/fault_lib.sh"
scratch train_faults
train_data shards

# ---- non-finite gradients ----
train_deck n epochs=2 batch_size_per_rank=4 max_steps=3 >n1.nml
bounded 0 "$SCDINO" n1.nml
cp n/checkpoint.h5 n-good.h5 || exit 99
t=backbone.blocks.1.mlp.fc2.weight
debug_deck n "nan_at_step = 5, nan_tensor = '$t'" epochs=2 batch_size_per_rank=4 restart=.true. >n2.nml
bounded 1 "$SCDINO" n2.nml
expect_grep "error: non-finite gradient at epoch 0, iteration 5 of 10 \(global step 5\): first bad tensor $t \(norm nan\), 1 of [0-9]+ tensors non-finite \(loss [0-9.]+\); training stopped, the weights of this step are not saved\.  Last good checkpoint: n/checkpoint\.h5; continue from it with &training restart = \.true\."
nchecks=$((nchecks + 1))
cmp -s n/checkpoint.h5 n-good.h5 || fail "n: the checkpoint changed after the fault"
no_tmp n

# A name that is not a tensor of the model.
debug_deck n "nan_at_step = 5, nan_tensor = 'backbone.blocks.7.mlp.fc2.weight'" epochs=2 batch_size_per_rank=4 >n3.nml
bounded 2 "$SCDINO" n3.nml
expect_grep "error: &debug nan_tensor = 'backbone\.blocks\.7\.mlp\.fc2\.weight' is not a tensor of this model"

if [ "$MPIEXEC" = none ]; then finish; fi

# From rank 1's local gradient (the first trainable tensor by default): the all-reduce spreads it and
# both ranks stop at the same step.
debug_deck n2r "nan_at_step = 1, nan_rank = 1" epochs=1 batch_size_per_rank=4 >n4.nml
bounded 1 $MPIEXEC -n 2 "$SCDINO" n4.nml
expect_grep "error: non-finite gradient at epoch 0, iteration 1 of 5 \(global step 1\): first bad tensor backbone\.cls_token \(norm nan\), 1 of [0-9]+ tensors"
expect_grep "Last good checkpoint: none \(no checkpoint written yet\)"

# ---- rank faults: each ends the 2-rank job (no hang) with the rank and the reason ----
# fatal: a fatal error on rank 1 (what an unreadable shard does): MPI_Abort.
debug_deck r "fail_at_step = 2, fail_rank = 1, fail_how = 'fatal'" epochs=1 batch_size_per_rank=4 >r1.nml
bounded 3 $MPIEXEC -n 2 "$SCDINO" r1.nml
expect_grep "scdino: error \(rank 1 of 2\): &debug fail_at_step = 2: simulated failure of rank 1"

# oom: an allocation that cannot succeed, through the real allocation check.
debug_deck r "fail_at_step = 2, fail_rank = 1, fail_how = 'oom'" epochs=1 batch_size_per_rank=4 >r2.nml
# (A sanitizer build would stop at the request itself unless told to return NULL like malloc.)
asan_saved=${ASAN_OPTIONS-}
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1"
export ASAN_OPTIONS
bounded 1 $MPIEXEC -n 2 "$SCDINO" r2.nml
ASAN_OPTIONS=$asan_saved
expect_grep "scdino: error \(rank 1 of 2\): .*fault_inject\.c:[0-9]+: out of memory allocating 4611686018427387904 bytes"

# kill: rank 1 gets SIGKILL; mpirun notices and ends rank 0.
debug_deck r "fail_at_step = 2, fail_rank = 1, fail_how = 'kill'" epochs=1 batch_size_per_rank=4 >r3.nml
out=$(timeout -k 5 600 $MPIEXEC -n 2 "$SCDINO" r3.nml 2>&1 </dev/null); rc=$?
nchecks=$((nchecks + 1))
[ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "kill: exit status $rc"
expect_grep "debug \(rank 1\): &debug fail_how = 'kill': SIGKILL to myself at global step 2"
expect_grep "process rank 1 .*exited on signal 9"

# hang: rank 1 stops making progress and rank 0 waits for it in the step's all-reduce; the
# watchdogs (step_timeout = 10 s: far above a step of this tiny model on a loaded machine) end the job.
debug_deck r "fail_at_step = 2, fail_rank = 1, fail_how = 'hang'" epochs=1 batch_size_per_rank=4 |
  sed "s/&system /\&system step_timeout = 10, /" >r4.nml
bounded 1 $MPIEXEC -n 2 "$SCDINO" r4.nml
expect_grep "debug \(rank 1\): &debug fail_how = 'hang': stuck forever at global step 2"
expect_grep "scdino: error \(rank [01] of 2\): no progress for [0-9.]+ s in a training step \(global step 2\): another rank has died or is stuck.*\(&system step_timeout = 10\)"

# shard: a truncated shard file, found by a loader thread when it opens the shard during training.
# That thread may not call MPI (MPI_THREAD_FUNNELED): it ends its rank with the data status and
# mpirun ends the other, with no MPI_Abort and no checkpoint or temporary file left behind.
rm -rf tshards && cp -r shards tshards || exit 99
head -c $(($(wc -c <shards/shard-00001.h5) / 2)) shards/shard-00001.h5 >tshards/shard-00001.h5 || exit 99
TRAIN_SHARDS=tshards train_deck t epochs=1 batch_size_per_rank=4 >t1.nml
bounded 3 $MPIEXEC -n 2 "$SCDINO" t1.nml
expect_grep "scdino: error \(rank [01] of 2\): shard tshards/shard-00001\.h5: cannot open it as an HDF5 file \(truncated or damaged\?\): truncated file"
expect_nogrep "MPI_ABORT was invoked"
nchecks=$((nchecks + 1))
[ ! -e t/checkpoint.h5 ] || fail "shard: a checkpoint was written"
no_tmp t
finish
