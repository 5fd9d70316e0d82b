#!/bin/sh
# tests/cli/train_balanced.sh - &training sampler = 'balanced': it changes what is trained (other
# weights than the uniform sampler's), a stop and restart inside an epoch is bit-identical to the
# uninterrupted run, and a restart with the other sampler is refused.  The class balance of the
# draws is checked in tests/unit/data/test_sampler.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
scratch train_balanced
train_data shards

balanced() { sed 's/&training /\&training sampler = '"'"'balanced'"'"', /'; }
train_deck full epochs=2 batch_size_per_rank=4 | balanced >full.nml
expect_exit 0 "$SCDINO" full.nml
expect_grep "train: sampler balanced: each of the 40 draws of an epoch takes a class uniformly, then one of its images"
train_deck uni epochs=2 batch_size_per_rank=4 >uni.nml
expect_exit 0 "$SCDINO" uni.nml
nchecks=$((nchecks + 1))
"$top_builddir/tests/fixtures/ckpt_compare" -e full/checkpoint.h5 uni/checkpoint.h5 /student >/dev/null 2>&1 &&
  fail "the balanced and the uniform sampler trained the same weights"

# Stopped inside the first epoch (7 of 10 steps), then continued: the same as without the stop.
train_deck split epochs=2 batch_size_per_rank=4 max_steps=7 | balanced >a.nml
expect_exit 0 "$SCDINO" a.nml
train_deck split epochs=2 batch_size_per_rank=4 restart=.true. | balanced >b.nml
expect_exit 0 "$SCDINO" b.nml
expect_grep "restart: continuing from split/checkpoint.h5 at epoch 0, iteration 7 "
ckpt_same full/checkpoint.h5 split/checkpoint.h5

# The other sampler on restart: refused.
train_deck split epochs=3 batch_size_per_rank=4 restart=.true. >c.nml
expect_exit 2 "$SCDINO" c.nml
expect_grep "sampler = 'balanced' in the checkpoint's run, 'uniform' now"
finish
