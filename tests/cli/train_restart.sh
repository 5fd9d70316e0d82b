#!/bin/sh
# tests/cli/train_restart.sh - restart is bit-identical: two epochs in one run equal one epoch +
# restart + one epoch, and a stop inside an epoch (max_steps) + restart, on 1 rank and on 2 ranks
# (checkpoint tensors, optimizer state and centre compared exactly; log.txt averages equal); a
# restart with a key that defines what is trained changed is refused naming it, one with a schedule
# changed warns, another thread count is silent; the deck of another version (a key missing, one
# unknown, a value refused) is compared key by key all the same; a restart on another shard set of
# the same size is refused, on a copy of the same set it continues.
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

# Changed keys: the seed or the crops are refused (exit 2, both values named, nothing trained);
# lr and epochs continue with a warning each; another compute thread count changes nothing (no
# warning), other arithmetic (the checkpoint's "arithmetic" attribute) is warned of.
cp -r r1-split rk || exit 99
rm -f rk/checkpoint.h5 && cp r1-split/checkpoint_0000.h5 rk/checkpoint.h5 || exit 99
cp rk/checkpoint.h5 rk-before.h5 || exit 99
train_deck rk epochs=2 batch_size_per_rank=4 restart=.true. |
  sed "s/seed = 5/seed = 6/; s/local_crops_number = 2/local_crops_number = 3/" >rk1.nml
expect_exit 2 "$SCDINO" rk1.nml
expect_grep "error: restart from rk/checkpoint.h5: 2 key\(s\) that define what is trained differ: seed = 5 in the checkpoint's run, 6 now; local_crops_number = 2 in the checkpoint's run, 3 now"
nchecks=$((nchecks + 1))
cmp -s rk/checkpoint.h5 rk-before.h5 || fail "a refused restart changed the checkpoint"
old=$(h5dump -a /threads rk/checkpoint.h5 | sed -n 's/^ *(0): *//p')
[ -n "$old" ] || fail "rk/checkpoint.h5 records no thread count"
train_deck rk epochs=3 batch_size_per_rank=4 lr=0.04 max_steps=1 restart=.true. |
  sed "s/&system /\&system threads = $((old + 1)), /" >rk2.nml
expect_exit 0 "$SCDINO" rk2.nml
expect_grep "warning: restart: epochs = 2 in the run that wrote rk/checkpoint.h5, 3 now"
expect_grep "warning: restart: lr = 0.05 in the run that wrote rk/checkpoint.h5, 0.04 now"
expect_nogrep "warning: restart: .*thread"
expect_nogrep "warning: restart: .*computed on"
nchecks=$((nchecks + 1))
h5dump -a /restart_changes rk/checkpoint.h5 | grep -q 'global step 10: epochs 2 -> 3; lr 0.05 -> 0.04' ||
  fail "rk/checkpoint.h5 does not record the changed keys: $(h5dump -a /restart_changes rk/checkpoint.h5 | grep '(0)')"
h5dump -a /arithmetic rk/checkpoint.h5 | grep -q '"cpu: ' || fail "rk/checkpoint.h5 records no arithmetic"
"$top_builddir/tests/hostile/h5edit" rk/checkpoint.h5 attr_str arithmetic "cpu: OpenBLAS 0.3.0 (Prescott kernels)" || exit 99
train_deck rk epochs=3 batch_size_per_rank=4 lr=0.04 max_steps=1 restart=.true. >rk3.nml
expect_exit 0 "$SCDINO" rk3.nml
expect_grep "warning: restart: the run that wrote rk/checkpoint.h5 computed on \"cpu: OpenBLAS 0.3.0 \(Prescott kernels\)\", this one on \"cpu: "
nchecks=$((nchecks + 1))
[ "$(h5dump -a /restart_changes rk/checkpoint.h5 | grep -c 'global step 1[01]: ')" = 2 ] ||
  fail "rk/checkpoint.h5 does not keep both restarts' changes: $(h5dump -a /restart_changes rk/checkpoint.h5)"

# A checkpoint of another version, whose deck lacks a key (sampler), has one this version does not
# know and a value that differs from this run's (precision 'fp16'): the first two are not compared,
# the third is named as written; with it restored, only the changed schedule key is warned of.
cp -r r1-split rv || exit 99
rm -f rv/checkpoint.h5 && cp r1-split/checkpoint_0000.h5 rv/checkpoint.h5 || exit 99
sed -e '/^  sampler = /d' -e "s/^  precision = 'auto'/  precision = 'fp16'/" -e 's/^&training$/\&training\n  gone_key = 3/' \
  r1-split/input.echo.nml >rv-deck.nml || exit 99
"$top_builddir/tests/hostile/h5edit" rv/checkpoint.h5 attr_str deck "$(cat rv-deck.nml)" || exit 99
train_deck rv epochs=3 batch_size_per_rank=4 max_steps=1 restart=.true. >rv.nml
expect_exit 2 "$SCDINO" rv.nml
expect_grep "error: restart from rv/checkpoint.h5: 1 key\(s\) that define what is trained differ: precision = 'fp16' in the checkpoint's run, 'auto' now\.  Restore them"
sed "s/^  precision = 'fp16'/  precision = 'auto'/" rv-deck.nml >rv-deck2.nml || exit 99
"$top_builddir/tests/hostile/h5edit" rv/checkpoint.h5 attr_str deck "$(cat rv-deck2.nml)" || exit 99
expect_exit 0 "$SCDINO" rv.nml
expect_grep "warning: restart: epochs = 2 in the run that wrote rv/checkpoint.h5, 3 now"
expect_nogrep "warning: restart: (sampler|gone_key|max_steps|restart) "

# The data: another shard set of the same size (other pixels, so other statistics) is refused
# before anything is loaded; a copy of the checkpoint's own set elsewhere continues (warned: shard_dir).
train_data other 0.15
cp rk/checkpoint.h5 rk-before2.h5 || exit 99
TRAIN_SHARDS=other train_deck rk epochs=3 batch_size_per_rank=4 lr=0.04 max_steps=1 restart=.true. >rk4.nml
expect_exit 2 "$SCDINO" rk4.nml
expect_grep "error: restart from rk/checkpoint.h5: &data shard_dir = 'other' holds another data set than the one the checkpoint's run trained on \(40 training images then, 40 now; fingerprint of images, labels and channel statistics [0-9a-f]{16} then, [0-9a-f]{16} now\)"
nchecks=$((nchecks + 1))
cmp -s rk/checkpoint.h5 rk-before2.h5 || fail "a refused restart changed the checkpoint"
cp -r shards shards-copy || exit 99
TRAIN_SHARDS=shards-copy train_deck rk epochs=3 batch_size_per_rank=4 lr=0.04 max_steps=1 restart=.true. >rk5.nml
expect_exit 0 "$SCDINO" rk5.nml
expect_grep "warning: restart: shard_dir = 'shards' in the run that wrote rk/checkpoint.h5, 'shards-copy' now"

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
