#!/bin/sh
# tests/faults/full_disk.sh - a full file system while scdino writes each kind of output: the features
# file and its AnnData twin, knn.h5, attention.h5 (run_dir on a small tmpfs filled up to what the
# files written before the output need) and the shards of prepare (shard_dir on a tmpfs too small for them).  Each run
# must end with exit status 1 and a message naming the file and "No space left on device" - never a
# signal (HDF5 1.10 crashed at exit closing a file whose write had failed) - with no temporary file
# left and the previous output, where there was one, unchanged; and training's log.txt, written at
# the end of an epoch before the checkpoint.  (Checkpoints: tests/faults/train_durable.sh.)  Needs root
# to mount a tmpfs; skipped otherwise.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/faults/fault_lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
scratch full_disk
"$top_builddir/tests/fixtures/feat_mkdata" . || exit 99
dir=$(pwd)

mnt=$(mktemp -d /tmp/scdino-full.XXXXXX) || exit 99
if [ "$(id -u)" != 0 ] || ! mount -t tmpfs -o size=8m tmpfs "$mnt" 2>/dev/null; then
  rmdir "$mnt"
  echo "no tmpfs could be mounted (needs root): skipped"
  exit 77
fi
trap 'umount "$mnt" 2>/dev/null; rmdir "$mnt" 2>/dev/null' EXIT

deck() { # deck CALCULATION RUN_DIR
  cat <<EOF
&control calculation = '$1', run_dir = '$2', seed = 11 /
&data shard_dir = '$dir/shards', channels = 0, 2, train_fraction = 0.5 /
&features checkpoint = '$dir/ckpt.h5', resize = 32, batch_size = 4 /
&knn k = 1, 3, 5, pixel_size = 8, features = '$dir/run/features_0002.h5' /
&attention images_per_class = 1, image_size = 44 /
EOF
}
deck features run >f.nml
expect_exit 0 "$SCDINO" f.nml

# fill_to KEEP: a filler file takes all free space of the tmpfs but KEEP bytes (rounded to pages).
fill_to() {
  rm -f "$mnt/filler"
  free=$(($(stat -f -c '%a * %S' "$mnt")))
  head -c $((free - $1)) /dev/zero >"$mnt/filler" 2>/dev/null || :
}

# full KIND OUTPUT: run KIND once with room, keep its OUTPUT, fill the disk, run it again.
full() {
  kind=$1 file=$2
  rm -rf "${mnt:?}/r" && mkdir "$mnt/r"
  deck "$kind" "$mnt/r" >"$kind.nml"
  expect_exit 0 "$SCDINO" "$kind.nml"
  cp "$mnt/r/$file" "$kind-good" || exit 99
  # Room for what is written before the output (the run_dir lock, one page; the echoed deck,
  # knn.txt), nothing more.  The old copies stay open here, so that replacing them gives no room back.
  pages() { echo $((($(wc -c <"$1") + 4095) / 4096 * 4096)); }
  keep=$(($(pages "$mnt/r/input.echo.nml") + 4096))
  [ -f "$mnt/r/knn.txt" ] && keep=$((keep + $(pages "$mnt/r/knn.txt")))
  exec 3<"$mnt/r/input.echo.nml"
  [ -f "$mnt/r/knn.txt" ] && exec 4<"$mnt/r/knn.txt"
  fill_to "$keep"
  expect_exit 1 "$SCDINO" "$kind.nml"
  exec 3<&- 4<&-
  if [ "$kind" = features ]; then # written to disk batch by batch (HDF5 names the failure)
    expect_grep "error: .*$mnt/r/$file\.tmp\.[0-9]+.*(No space left on device|errno 28)"
  else
    expect_grep "error: cannot write [a-zA-Z ]+ $mnt/r/$file\.tmp\.[0-9]+: errno 28: No space left on device \(after [0-9]+ of [0-9]+ bytes\).* $mnt/r/$file is left as it was"
  fi
  nchecks=$((nchecks + 1))
  cmp -s "$mnt/r/$file" "$kind-good" || fail "$kind: the failed write changed $file"
  no_tmp "$mnt/r"
  rm -f "$mnt/filler"
}
full features features_0002.h5

# The AnnData twin, written by HDF5 after the features file: room for the features file, not for it.
rm -rf "${mnt:?}/r" && mkdir "$mnt/r"
deck features "$mnt/r" >ad.nml
expect_exit 0 "$SCDINO" ad.nml
cp "$mnt/r/features_0002.h5ad" ad-good || exit 99
keep=0
for f in "$mnt/r/input.echo.nml" "$mnt/r/features_0002.h5"; do keep=$((keep + ($(wc -c <"$f") + 4095) / 4096 * 4096)); done
exec 3<"$mnt/r/input.echo.nml" 4<"$mnt/r/features_0002.h5"
fill_to $((keep + 8192)) # and the lock's page, and one page of the .h5ad's ten
expect_exit 1 "$SCDINO" ad.nml
exec 3<&- 4<&-
expect_grep "features: 20 x 48 written to $mnt/r/features_0002.h5 "
expect_grep "error: $mnt/r/features_0002\.h5ad\.tmp\.[0-9]+: cannot write the AnnData file: .*(No space left on device|errno 28)"
nchecks=$((nchecks + 1))
cmp -s "$mnt/r/features_0002.h5ad" ad-good || fail "the failed write changed features_0002.h5ad"
no_tmp "$mnt/r"
rm -f "$mnt/filler"
full knn knn.h5
full attention attention.h5

# log.txt: a run that continues for a third epoch finds the disk full when the epoch ends; the log
# is rewritten first (then the checkpoint), so its write fails: exit 1 naming log.txt, the old log
# and checkpoint as they were.
train_data tshards
rm -rf "${mnt:?}/r" && mkdir "$mnt/r"
TRAIN_SHARDS=$dir/tshards train_deck "$mnt/r" epochs=2 batch_size_per_rank=8 >t1.nml
expect_exit 0 "$SCDINO" t1.nml
cp "$mnt/r/log.txt" log-good && cp "$mnt/r/checkpoint.h5" ckpt-good || exit 99
TRAIN_SHARDS=$dir/tshards train_deck "$mnt/r" epochs=3 batch_size_per_rank=8 restart=.true. >t2.nml
keep=$(($(($(wc -c <"$mnt/r/input.echo.nml") + 4095)) / 4096 * 4096 + 4096))
exec 3<"$mnt/r/input.echo.nml"
fill_to "$keep"
expect_exit 1 "$SCDINO" t2.nml
exec 3<&-
expect_grep "error: cannot write [a-zA-Z ]+ $mnt/r/log\.txt\.tmp\.[0-9]+: errno 28: No space left on device \(after [0-9]+ of [0-9]+ bytes\).* $mnt/r/log\.txt is left as it was"
nchecks=$((nchecks + 2))
cmp -s "$mnt/r/log.txt" log-good || fail "log.txt: the failed write changed it"
cmp -s "$mnt/r/checkpoint.h5" ckpt-good || fail "log.txt: the checkpoint changed after the log's write failed"
no_tmp "$mnt/r"
rm -f "$mnt/filler"

# prepare: the shards do not fit.  It ends with exit 1 naming a shard or the manifest, and leaves
# no temporary file and no manifest (a half-written set is never taken for a finished one).
mkdir -p tiffs/A tiffs/B || exit 99
for c in A B; do
  for i in 1 2 3 4 5 6; do
    "$top_builddir/tests/fixtures/mktiff" "tiffs/$c/$i.tif" 3 64 64 u16 ramp || exit 99
  done
done
cat >p.nml <<EOF
&control calculation = 'prepare' /
&data tiff_dir = 'tiffs', shard_dir = '$mnt/s', images_per_shard = 4 /
EOF
rm -rf "${mnt:?}/s"
fill_to 40000
expect_exit 1 "$SCDINO" p.nml
expect_grep "error: .*$mnt/s/(shard-[0-9]+|manifest)\.h5.*(No space left on device|errno 28)"
expect_grep "^scdino: error: " # one line
nchecks=$((nchecks + 1))
[ -f "$mnt/s/manifest.h5" ] && fail "prepare on a full disk left a manifest"
no_tmp "$mnt/s"
rm -f "$mnt/filler"
finish
