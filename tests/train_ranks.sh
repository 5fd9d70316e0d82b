#!/bin/sh
# tests/train_ranks.sh - one rank with batch 8 gives the same training as two ranks with batch 4.
#
# What is held fixed: the data (40 training images, so every batch is full on every rank: 5 steps
# per epoch either way), the total batch and so the learning-rate schedule, the seed.  Nothing
# else needs to be: the sampler's permutation, every crop's augmentation and every drop-path mask
# are drawn from counter-based streams keyed by (seed, epoch or step, image index), so the two runs
# see the same crops and masks for the same images even though the images are split differently
# between ranks (augmentation and drop_path stay ON).  What differs is only the order of floating
# point sums (batch means, the gradient all-reduce), so after 10 steps the student, the teacher
# and the centre must agree to 1e-6 relative over all their values (1e-5 per tensor: the small
# bias vectors see the rounding most), and the epoch losses to 1e-6.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/train_lib.sh"
[ "$MPIEXEC" = none ] && skip "no MPI launcher"
scratch train_ranks
train_data shards
train_deck one epochs=2 batch_size_per_rank=8 >one.nml
train_deck two epochs=2 batch_size_per_rank=4 >two.nml
expect_exit 0 "$SCDINO" one.nml
expect_grep "batch 8 per rank x 1 rank = 8 per step; 5 iterations per epoch"
expect_exit 0 $MPIEXEC -n 2 "$SCDINO" two.nml
expect_grep "batch 4 per rank x 2 ranks = 8 per step; 5 iterations per epoch"
expect_grep "gradient all-reduce mpi over 2 ranks"

nchecks=$((nchecks + 1))
if ! "$top_builddir/tests/ckpt_compare" -g 1e-6 -r 1e-5 one/checkpoint.h5 two/checkpoint.h5 \
     /student /teacher /dino_loss >cmp.out 2>&1; then
  fail "1 rank x batch 8 and 2 ranks x batch 4 differ"
  sed 's/^/    | /' cmp.out >&2
fi
grep 'whole group' cmp.out

for line in 1 2; do
  nchecks=$((nchecks + 1))
  a=$(json_field one/log.txt $line train_loss)
  b=$(json_field two/log.txt $line train_loss)
  awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-6 * a) }' ||
    fail "epoch $line train_loss: 1 rank $a, 2 ranks $b"
  echo "epoch $line train_loss: 1 rank $a, 2 ranks $b"
done
finish
