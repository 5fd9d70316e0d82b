#!/bin/sh
# tests/cli/train_restart.sh - restart is bit-identical: two epochs in one run equal one epoch +
# restart + one epoch, and a stop inside an epoch (max_steps) + restart, on 1 rank and on 2 ranks
# (checkpoint tensors, optimizer state and centre compared exactly; log.txt averages equal).
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
scratch train_restart
train_data shards

# run NRANKS DECK: scdino on that many ranks, expecting success
run() {
  n=$1; shift
  if [ "$n" = 1 ]; then expect_exit 0 "$SCDINO" "$@"; else expect_exit 0 $MPIEXEC -n "$n" "$SCDINO" "$@"; fi
}

# 40 training images: 10 iterations per epoch with batch 4 on one rank, 5 on two.
for ranks in 1 2; do
  [ "$ranks" = 2 ] && [ "$MPIEXEC" = none ] && break
  niter=$((10 / ranks))
  r=r$ranks
  train_deck $r-full epochs=2 batch_size_per_rank=4 >$r-full.nml
  run $ranks $r-full.nml
  expect_grep "Epoch \[1/2\] it $niter/$niter"

  # One epoch (max_steps = one epoch's iterations), then restart for the second.
  train_deck $r-split epochs=2 batch_size_per_rank=4 max_steps=$niter >$r-a.nml
  run $ranks $r-a.nml
  expect_grep "stopped after $niter steps of this launch at the end of epoch 0"
  train_deck $r-split epochs=2 batch_size_per_rank=4 restart=.true. >$r-b.nml
  run $ranks $r-b.nml
  expect_grep "restart: continuing from $r-split/checkpoint.h5 at epoch 1, iteration 0"
  ckpt_same $r-full/checkpoint.h5 $r-split/checkpoint.h5
  ckpt_same $r-full/checkpoint_0000.h5 $r-split/checkpoint_0000.h5

  # Stops inside epochs: 3 steps, then 2 more (crossing nothing), then the rest.
  train_deck $r-mid epochs=2 batch_size_per_rank=4 max_steps=3 >$r-c.nml
  run $ranks $r-c.nml
  expect_grep "stopped after 3 steps of this launch \(max_steps\) inside epoch 0"
  nchecks=$((nchecks + 1))
  [ "$(h5dump -a /iteration $r-mid/checkpoint.h5 | grep -c '(0): 3')" = 1 ] || fail "$r-mid: checkpoint iteration is not 3"
  train_deck $r-mid epochs=2 batch_size_per_rank=4 max_steps=2 restart=.true. >$r-d.nml
  run $ranks $r-d.nml
  expect_grep "restart: continuing from $r-mid/checkpoint.h5 at epoch 0, iteration 3"
  train_deck $r-mid epochs=2 batch_size_per_rank=4 restart=.true. >$r-e.nml
  run $ranks $r-e.nml
  ckpt_same $r-full/checkpoint.h5 $r-mid/checkpoint.h5

  # The epoch averages continue across the restarts too.
  for f in split mid; do
    for line in 1 2; do
      nchecks=$((nchecks + 1))
      a=$(json_field $r-full/log.txt $line train_loss)
      b=$(json_field $r-$f/log.txt $line train_loss)
      [ -n "$a" ] && [ "$a" = "$b" ] || fail "$r-$f/log.txt line $line: train_loss $b, uninterrupted run $a"
    done
  done

  # A finished run has nothing left to do.
  run $ranks $r-e.nml
  expect_grep "is at epoch 2 of 2: nothing left to train"
done

# A checkpoint from 2 ranks continued on 1: correct position, not bit-identical (warned).
if [ "$MPIEXEC" != none ]; then
  cp -r r2-split r21 || exit 99
  rm -f r21/checkpoint.h5 && cp r2-split/checkpoint_0000.h5 r21/checkpoint.h5 || exit 99
  train_deck r21 epochs=2 batch_size_per_rank=4 restart=.true. >r21.nml
  expect_exit 0 "$SCDINO" r21.nml
  expect_grep "written by a run of 2 rank\(s\) x batch 4 \(5 iterations per epoch\); this run has 1 x 4 \(10 per epoch\)"
  expect_grep "continuing from r21/checkpoint.h5 at epoch 1, iteration 0 \(global step 10\)"
fi
finish
