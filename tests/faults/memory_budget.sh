#!/bin/sh
# tests/faults/memory_budget.sh - a deck whose large buffers cannot fit in a rank's memory ends at
# start-up with exit status 2, the total, the limit and where it came from, and each part with the
# keys that size it; nothing is trained or written (core/membudget.h).  Train (a huge batch; a
# small &system memory_per_rank), features (a small memory_per_rank; a set larger than it, written as
# computed), knn (a features file larger than it) and knn's raw-pixel baseline (pixel_size = 4096);
# and a run that fits says its total at verbosity 2.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
scratch memory_budget
train_data shards

# A batch of 200,000 crops' activations: far over any machine of this kind (24 GiB).
train_deck big batch_size_per_rank=200000 >big.nml
expect_exit 2 "$SCDINO" big.nml
expect_grep "error: train \(host memory\): about [0-9.]+ GiB per rank needed, more than the [0-9.]+ GiB a rank may use \(&system memory_per_rank = 0: the node's [0-9.]+ GiB \((physical memory|cgroup limit)\) over 1 rank\):"
expect_grep "activations of a training step +[0-9.]+ GiB  \(batch_size_per_rank = 200000, global_size = 16, local_size = 8, local_crops_number = 2, the model\)"
expect_grep "loader batches +[0-9.]+ GiB  \(batch_size_per_rank = 200000, prefetch_batches = 2,"
expect_grep "Make the keys named above smaller"
nchecks=$((nchecks + 1))
[ ! -e big/checkpoint.h5 ] || fail "a refused run wrote a checkpoint"

# The limit from the deck: 1 MiB is less than the tiny model needs.
train_deck small | sed 's/&system /\&system memory_per_rank = 0.001, /' >small.nml
expect_exit 2 "$SCDINO" small.nml
expect_grep "more than the 0.00 GiB a rank may use \(&system memory_per_rank = 0.001\)"
expect_grep "weights, gradients, AdamW moments"

# A run that fits: the total at verbosity 2.
train_deck fits max_steps=1 | sed 's/seed = 5 \//seed = 5, verbosity = 2 \//' >fits.nml
expect_exit 0 "$SCDINO" fits.nml
expect_grep "train \(host memory\): about [0-9.]+ GiB per rank for the large buffers, of [0-9.]+ GiB \(&system memory_per_rank = 0: "

# features: the same check before the network is set up.
cat >feat.nml <<'DECK'
&control calculation = 'features', run_dir = 'fits' /
&data shard_dir = 'shards' /
&system memory_per_rank = 0.0001 /
DECK
expect_exit 2 "$SCDINO" feat.nml
expect_grep "error: features: about [0-9.]+ GiB per rank needed, more than the 0.00 GiB a rank may use \(&system memory_per_rank = 0.0001\):"
expect_grep "the features \(written as computed\) +[0-9.]+ GiB  \(batch_size = 7, the model's embed_dim 16\)"

# knn's raw-pixel baseline at 4096 x 4096 x 3 channels: 1.4 GiB for the 7 images of the features
# file (the validation subset), over a 1 GiB limit.
sed 's/0.0001/100/' feat.nml >feat_ok.nml
expect_exit 0 "$SCDINO" feat_ok.nml

# Features of a set larger than a rank's memory: 40,000 images give 2.4 MiB of rows, and 2 MiB
# (0.002 GiB) is all a rank may use.  They are written while computed, so no rank holds them all:
# the run fits, on one rank and on two, and the file has every row.
"$top_builddir/tests/fixtures/train_mkdata" many 40000 3 20 20 >/dev/null || exit 99
for np in 1 2; do
  cat >many$np.nml <<DECK
&control calculation = 'features', run_dir = 'many$np' /
&data shard_dir = 'many' /
&features checkpoint = 'fits/checkpoint.h5', subset = 'all', resize = 0, batch_size = 32 /
&system memory_per_rank = 0.002 /
DECK
  if [ "$np" = 1 ]; then
    expect_exit 0 "$SCDINO" many1.nml
  elif [ "$MPIEXEC" != none ]; then
    expect_exit 0 $MPIEXEC -n 2 "$SCDINO" many2.nml
  else
    continue
  fi
  expect_grep "features: 40000 x 16 written to many$np/features_0000.h5"
  rows=$(h5dump -H -d features "many$np/features_0000.h5" | grep -o 'DATASPACE  SIMPLE { ( [0-9]*, 16 )' | grep -o '( [0-9]*' | tr -dc 0-9)
  nchecks=$((nchecks + 1))
  [ "$rows" = 40000 ] || fail "many$np/features_0000.h5 holds '$rows' rows, not 40000"
done
[ ! -f many2/features_0000.h5 ] || h5diff many1/features_0000.h5 many2/features_0000.h5 >/dev/null ||
  fail "the streamed features differ between 1 and 2 ranks"
# kNN of those 40,000 rows under the same 2 MiB: on one rank the reference rows alone (32,000 x 16
# floats) and the similarities of a block take more, so it stops before the evaluation, naming its
# parts.
cat >knnbig.nml <<'DECK'
&control calculation = 'knn', run_dir = 'many1' /
&data shard_dir = 'many' /
&knn baselines = .false. /
&system memory_per_rank = 0.002 /
DECK
expect_exit 2 "$SCDINO" knnbig.nml
expect_grep "error: knn: about [0-9.]+ GiB per rank needed, more than the 0.00 GiB a rank may use \(&system memory_per_rank = 0.002\):"
expect_grep "the features file's labels and indices +[0-9.]+ GiB  \(its 40000 rows\)"
expect_grep "reference share, owned test rows, blocks, neighbour lists +[0-9.]+ GiB  \(knn block_rows = 0, the largest k 500, 1 rank\(s\)\)"
# Each rank reads only its share of the reference rows and the test rows of the blocks it owns,
# so on 4 ranks in blocks of 8 test rows the same kNN fits in 2 MiB per rank, and its report is
# that of one rank without the limit.
if [ "$MPIEXEC" != none ]; then
  sed -e 's/many1/knn4/' -e 's/baselines = .false./baselines = .false., k = 1, 5, block_rows = 8/' knnbig.nml >knn4.nml
  sed -e 's/knn4/knn1/' -e '/memory_per_rank/d' knn4.nml >knn1.nml
  mkdir -p knn1 knn4 && cp many1/features_0000.h5 knn1/ && cp many1/features_0000.h5 knn4/
  expect_exit 0 "$SCDINO" knn1.nml
  expect_exit 0 $MPIEXEC -n 4 "$SCDINO" knn4.nml
  expect_grep "reference rows shared over 4 ranks"
  nchecks=$((nchecks + 1))
  sed 's/knn4\//knn1\//g' knn4/knn.txt | cmp -s - knn1/knn.txt ||
    { fail "knn.txt differs between 1 rank and 4 ranks under 2 MiB"; diff knn1/knn.txt knn4/knn.txt >&2; }
fi
cat >knn.nml <<'DECK'
&control calculation = 'knn', run_dir = 'fits' /
&data shard_dir = 'shards', train_fraction = 0.5 /
&knn k = 1, 5, table_k = 5, pixel_size = 4096 /
&system memory_per_rank = 1 /
DECK
expect_exit 2 "$SCDINO" knn.nml
expect_grep "error: knn's raw-pixel baseline: about [0-9.]+ GiB per rank needed, more than the 1.00 GiB a rank may use \(&system memory_per_rank = 1\):"
expect_grep "raw-pixel vectors +[0-9.]+ GiB  \(knn pixel_size = 4096 \(4096 x 4096 x 3 channels per image\), 7 images\)"
finish
