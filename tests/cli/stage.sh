#!/bin/sh
# tests/cli/stage.sh - &data stage_dir: training copies the shard set to node-local disk first (one
# rank per node), checks each copy against the size and FNV-1a prepare recorded in the manifest,
# and reads the copy: the same weights as reading shard_dir; a restart reuses the copies; a damaged
# copy is copied again; 2 ranks on one node copy once; a manifest without the record is checked by
# size (warned); a stage that does not fit ends the run naming the file (a small tmpfs, root only),
# or with stage_fallback reads shard_dir; a read-only stage whose copies verify is used as it is
# (root only: a tmpfs remounted read-only).
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
. "$top_srcdir/tests/faults/fault_lib.sh"
scratch stage
"$top_builddir/scdino_demo_data" -o tiffs -n 10 -c 3 -q || exit 99
printf "&control calculation = 'prepare' /\n&data tiff_dir = 'tiffs', shard_dir = 'shards', images_per_shard = 10 /\n" >prep.nml
expect_exit 0 "$SCDINO" prep.nml
nchecks=$((nchecks + 1))
h5dump -d shard_fnv1a shards/manifest.h5 >/dev/null 2>&1 || fail "the manifest records no shard checksums"

staged() { sed "s|&data |\&data stage_dir = '$1', |"; }
train_deck plain epochs=1 batch_size_per_rank=4 >plain.nml
expect_exit 0 "$SCDINO" plain.nml
train_deck st epochs=1 batch_size_per_rank=4 | staged stage >st.nml
expect_exit 0 "$SCDINO" st.nml
expect_grep "stage: shards -> stage: 3 shard\(s\), [0-9.]+ MiB: 3 copied \([0-9.]+ MiB at [0-9]+ MiB/s\), 0 reused"
expect_grep "data: [0-9.]+ MiB of images read from the stage stage by rank 0 in the epoch, [0-9]+ MiB/s"
ckpt_same plain/checkpoint.h5 st/checkpoint.h5
nchecks=$((nchecks + 2))
cmp -s shards/shard-00001.h5 stage/shard-00001.h5 && cmp -s shards/manifest.h5 stage/manifest.h5 || fail "the stage is not a copy"
ls -a stage | grep -q '\.tmp\.' && fail "temporary files left in stage/"

# A restart reuses the copies; a damaged copy is copied again.
train_deck st epochs=2 batch_size_per_rank=4 restart=.true. max_steps=1 | staged stage >st2.nml
expect_exit 0 "$SCDINO" st2.nml
expect_grep "3 shard\(s\), [0-9.]+ MiB: 0 copied \([0-9.]+ MiB at [0-9]+ MiB/s\), 3 reused"
printf 'X' | dd of=stage/shard-00001.h5 bs=1 seek=3000 conv=notrunc 2>/dev/null || exit 99
expect_exit 0 "$SCDINO" st2.nml
expect_grep "warning: stage: stage/shard-00001.h5 does not match manifest.h5's record \(unfinished, damaged or of another set\): copying it again"
expect_grep ": 1 copied \([0-9.]+ MiB at [0-9]+ MiB/s\), 2 reused"
nchecks=$((nchecks + 1))
cmp -s shards/shard-00001.h5 stage/shard-00001.h5 || fail "the damaged copy was not replaced"

# 2 ranks of one node: one copy, both read it.
if [ "$MPIEXEC" != none ]; then
  train_deck st2r epochs=1 batch_size_per_rank=2 | staged stage2 >st2r.nml
  expect_exit 0 $MPIEXEC -n 2 "$SCDINO" st2r.nml
  nchecks=$((nchecks + 1))
  [ "$(printf '%s\n' "$out" | grep -c 'stage: shards -> stage2: 3 shard(s)')" = 1 ] || fail "2 ranks of one node did not make one copy"
fi

# A manifest without the record (made by an older scdino): checked by size, warned.
cp -r shards old || exit 99
"$top_builddir/tests/hostile/h5edit" old/manifest.h5 rm shard_fnv1a || exit 99
TRAIN_SHARDS=old train_deck old epochs=1 batch_size_per_rank=4 max_steps=1 | staged stage3 >old.nml
expect_exit 0 "$SCDINO" old.nml
expect_grep "warning: stage: old/manifest.h5 records no shard checksums \(made by an older scdino\): staged copies are checked by size only"

# Too small a disk for the stage: exit 1 naming the file, nothing half-written; with the fallback,
# shard_dir is read.
mnt=$(mktemp -d /tmp/scdino-stage.XXXXXX) || exit 99
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=400k tmpfs "$mnt" 2>/dev/null; then
  trap 'umount "$mnt" 2>/dev/null; rmdir "$mnt" 2>/dev/null' EXIT
  train_deck full epochs=1 batch_size_per_rank=4 max_steps=1 | staged "$mnt/s" >full.nml
  expect_exit 1 "$SCDINO" full.nml
  expect_grep "error: &data stage_dir = '$mnt/s': cannot write $mnt/s/shard-0000[0-9]\.h5\.tmp\.[0-9]+: errno 28: No space left on device \(after [0-9]+ bytes\)"
  no_tmp "$mnt/s"
  sed 's/&data /\&data stage_fallback = .true., /' full.nml >fb.nml
  expect_exit 0 "$SCDINO" fb.nml
  expect_grep "warning: &data stage_dir = '$mnt/s': cannot write .*; this node reads shards instead \(stage_fallback\)"
  umount "$mnt" && rmdir "$mnt"
  trap - EXIT
else
  rmdir "$mnt"
  echo "no tmpfs could be mounted (needs root): the full-disk case is not run"
fi

# A read-only stage_dir whose copies all verify is used as it is, with nothing written there (root
# ignores file permissions: the stage lies on a tmpfs remounted read-only).
ro=$(mktemp -d /tmp/scdino-stage-ro.XXXXXX) || exit 99
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=16m tmpfs "$ro" 2>/dev/null; then
  trap 'umount "$ro" 2>/dev/null; rmdir "$ro" 2>/dev/null' EXIT
  train_deck ro1 epochs=1 batch_size_per_rank=4 max_steps=1 | staged "$ro/s" >ro1.nml
  expect_exit 0 "$SCDINO" ro1.nml
  expect_grep ": 3 copied \([0-9.]+ MiB at [0-9]+ MiB/s\), 0 reused"
  mount -o remount,ro "$ro" || exit 99
  train_deck ro2 epochs=1 batch_size_per_rank=4 | staged "$ro/s" >ro2.nml
  expect_exit 0 "$SCDINO" ro2.nml
  expect_grep "stage: shards -> $ro/s: 3 shard\(s\), [0-9.]+ MiB: 0 copied \([0-9.]+ MiB at [0-9]+ MiB/s\), 3 reused"
  expect_grep "data: [0-9.]+ MiB of images read from the stage $ro/s by rank 0 in the epoch"
  umount "$ro" && rmdir "$ro"
  trap - EXIT
else
  rmdir "$ro"
  echo "no tmpfs could be mounted (needs root): the read-only stage case is not run"
fi
finish
