#!/bin/sh
# tests/cli/train_ranks.sh - one rank with batch 8 gives the same training as two ranks with batch 4;
# and a rank whose whole batch is left out keeps step with the others (end of the file).
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
. "$top_srcdir/tests/cli/train_lib.sh"
[ "$MPIEXEC" = none ] && skip "no MPI launcher"
scratch train_ranks
train_data shards
# The one-rank run at verbosity 2, the two-rank run at 3 (debug: every rank's own lines).
train_deck one epochs=2 batch_size_per_rank=8 | sed 's/seed = 5 \//seed = 5, verbosity = 2 \//' >one.nml
train_deck two epochs=2 batch_size_per_rank=4 | sed 's/seed = 5 \//seed = 5, verbosity = 3 \//' >two.nml
expect_exit 0 "$SCDINO" one.nml
expect_grep "batch 8 per rank x 1 rank = 8 per step; 5 iterations per epoch"
expect_nogrep "\[rank [0-9]+\]"
expect_exit 0 $MPIEXEC -n 2 "$SCDINO" two.nml
expect_grep "batch 4 per rank x 2 ranks = 8 per step; 5 iterations per epoch"
expect_grep "gradient all-reduce mpi over 2 ranks"
expect_grep "\[rank 1\] loader: 20 of the 40 training images an epoch, in 5 batches of 4; 1 loader thread"
expect_grep "\[rank 0\] train: global step 10: 5 steps in .* waiting for data .* in communication "
expect_grep "\[rank 1\] train: global step 10: 5 steps in "
expect_grep "\[rank 0\] checkpoint two/checkpoint\.h5: [0-9]+ bytes; state copied to the host in "

nchecks=$((nchecks + 1))
if ! "$top_builddir/tests/fixtures/ckpt_compare" -g 1e-6 -r 1e-5 one/checkpoint.h5 two/checkpoint.h5 \
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
# A rank whose whole batch is left out (every image invalid after min-max) must still make the same
# all-reduce calls as the other ranks: collectives match by order, not size, and a model over the
# 4 MiB bucket (D = 320: 4 calls per step) made the empty rank's single whole-buffer call fail
# with MPI_ERR_TRUNCATE.  8 images, the first 4 invalid, batch 1 on 2 ranks: 12 steps; with seed 5
# the steps of epoch 0 see 1, 0, 2 and 1 images (one rank empty in steps 0 and 3, both in step 1:
# warned, no update).
"$top_builddir/tests/fixtures/train_mkdata" dshards 8 3 20 20 0.2 4 >/dev/null || exit 99
cat >drop.nml <<'DECK'
&control calculation = 'train', run_dir = 'drop', seed = 5 /
&data shard_dir = 'dshards', train_fraction = 1.0 /
&model arch = 'custom', patch_size = 4, embed_dim = 320, depth = 3, num_heads = 4, mlp_ratio = 4,
       out_dim = 64, head_hidden_dim = 32, head_bottleneck_dim = 16 /
&crops global_size = 16, local_size = 8, local_crops_number = 2 /
&training epochs = 3, batch_size_per_rank = 1, warmup_epochs = 1, log_every = 1 /
&system loader_threads = 1, prefetch_batches = 2, step_timeout = 600 /
DECK
expect_exit 0 $MPIEXEC -n 2 "$SCDINO" drop.nml
expect_grep "every image of the batch was left out"
expect_grep "train: 12 steps in"
expect_grep "epoch 0: 4 steps, 4 images"
finish
