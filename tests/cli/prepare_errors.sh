#!/bin/sh
# tests/cli/prepare_errors.sh - calculation='prepare' on bad images and bad settings: each bad-image
# class stops the run with exit status 3 and a message naming the file (on_bad_image='error'),
# leaving no shard, manifest or temporary file behind; with on_bad_image='skip' the file is left
# out, counted and listed in skipped.txt.  Also the input errors of prepare (exit 2 / 3).
. "$top_srcdir/tests/lib.sh"
MK="$top_builddir/tests/fixtures/mktiff"
scratch prepare_errors

deck() { # deck NAME ON_BAD [EXTRA]
  cat >"$1.nml" <<EOF
&control calculation = 'prepare', verbosity = 0 /
&data tiff_dir = 'tiffs', shard_dir = 'shards', images_per_shard = 4, on_bad_image = '$2' $3 /
EOF
}
deck err error
deck skip skip

# good TYPE: six valid 5 x 16 x 16 images in two classes.
good() {
  rm -rf tiffs shards && mkdir -p tiffs/A tiffs/B || exit 99
  for i in 1 2 3; do
    "$MK" tiffs/A/$i.tif 5 16 16 "$1" ramp $i && "$MK" tiffs/B/$i.tif 5 16 16 "$1" ramp $((i + 3)) || exit 99
  done
}

# case NAME TYPE MESSAGE MAKE-COMMAND...: add the bad file tiffs/B/z.tif, then both modes.
case_() {
  name=$1 type=$2 msg=$3
  shift 3
  good "$type"
  "$@" || exit 99
  expect_exit 3 "$SCDINO" err.nml
  expect_grep "scdino: error: .*/tiffs/B/z\.tif: $msg"
  nchecks=$((nchecks + 2))
  [ -z "$(ls shards)" ] || fail "$name: files left in shard_dir after the error: $(ls shards)"
  [ -f shards/manifest.h5 ] && fail "$name: manifest written"
  rm -rf shards
  expect_exit 0 "$SCDINO" skip.nml
  expect_grep "1 of 7 files skipped as bad images"
  nchecks=$((nchecks + 2))
  [ -f shards/manifest.h5 ] || fail "$name: no manifest with on_bad_image='skip'"
  printf '%s\n' "$(cat shards/skipped.txt 2>/dev/null)" | grep -Eq "/tiffs/B/z\.tif	$msg" ||
    fail "$name: skipped.txt does not list the file: $(cat shards/skipped.txt 2>/dev/null)"
}

case_ not-a-tiff u16 'not a readable TIFF file' sh -c 'echo "plain text" > tiffs/B/z.tif'
case_ empty u16 'empty file' sh -c ': > tiffs/B/z.tif'
case_ truncated u16 'not a readable TIFF file|cannot decode' sh -c 'head -c 700 tiffs/A/1.tif > tiffs/B/z.tif'
case_ channels u16 'has 4 channel\(s\), expected 5 like most images' "$MK" tiffs/B/z.tif 4 16 16 u16
case_ size u16 'is 17x16 pixels \(height x width\), expected 16x16' "$MK" tiffs/B/z.tif 5 17 16 u16
case_ dtype u16 'has float32 samples, expected 8- or 16-bit unsigned' "$MK" tiffs/B/z.tif 5 16 16 f32
case_ constant u16 'channel 1 is constant \(7\)' "$MK" tiffs/B/z.tif 5 16 16 u16 const
case_ nan f32 'pixel \(channel 0, row 1, column 1\) is NaN' "$MK" tiffs/B/z.tif 5 16 16 f32 nan
case_ inf f32 'pixel \(channel 0, row 1, column 1\) is infinite' "$MK" tiffs/B/z.tif 5 16 16 f32 inf

# An all-zero channel is valid (upstream keeps it at 0), so nothing is skipped.
good u16
"$MK" tiffs/B/z.tif 5 16 16 u16 zero || exit 99
expect_exit 0 "$SCDINO" err.nml

# The odd one out is the first file: the majority decides what "wrong" means.
good u16
"$MK" tiffs/A/0.tif 5 20 20 u16 || exit 99
expect_exit 3 "$SCDINO" err.nml
expect_grep "/tiffs/A/0\.tif: is 20x20 pixels \(height x width\), expected 16x16"

# Every file bad: nothing to build from.
rm -rf tiffs shards && mkdir -p tiffs/A || exit 99
echo x >tiffs/A/1.tif && echo y >tiffs/A/2.tiff || exit 99
expect_exit 3 "$SCDINO" skip.nml
expect_grep 'none of the 2 files under .* reads as a TIFF image'

# On two ranks, a bad file in the second rank's part ends every rank, without leftovers.
if [ "$MPIEXEC" != none ]; then
  good u16
  for i in 4 5 6 7 8; do "$MK" tiffs/B/$i.tif 5 16 16 u16 ramp $((i + 10)) || exit 99; done
  "$MK" tiffs/B/9.tif 3 16 16 u16 || exit 99
  expect_exit 3 $MPIEXEC -n 2 "$SCDINO" err.nml
  expect_grep "/tiffs/B/9\.tif: has 3 channel\(s\), expected 5"
  nchecks=$((nchecks + 1))
  [ -z "$(ls shards)" ] || fail "2 ranks: files left in shard_dir: $(ls shards)"
fi

# Input errors.
good u16
cat >nodir.nml <<EOF
&control calculation = 'prepare', verbosity = 0 /
&data shard_dir = 'shards' /
EOF
expect_exit 2 "$SCDINO" nodir.nml
expect_grep "needs (&data )?tiff_dir"
deck names error ", channel_names = 'DAPI', 'BF'"
expect_exit 2 "$SCDINO" names.nml
expect_grep "channel_names has 2 name\(s\), but the images have 5 channels"
deck chans error ", channels = 0, 7"
expect_exit 2 "$SCDINO" chans.nml
expect_grep "channel 7 does not exist; the images have channels 0\.\.4"
sed 's/tiffs/missing/' err.nml >missing.nml
expect_exit 3 "$SCDINO" missing.nml
expect_grep "tiff_dir 'missing': No such file or directory"
mkdir -p tiffs/C || exit 99
expect_exit 3 "$SCDINO" err.nml
expect_grep "class folder .*/tiffs/C has no \.tif/\.tiff files"
rm -rf tiffs/* && "$MK" tiffs/loose.tif 5 16 16 u16 || exit 99
expect_exit 3 "$SCDINO" err.nml
expect_grep "tiff_dir '.*tiffs' has no class sub-folders"
# A shard_dir that holds something else is not overwritten.
good u16
mkdir -p shards && echo "my notes" >shards/manifest.h5 || exit 99
expect_exit 2 "$SCDINO" err.nml
expect_grep "manifest.h5 cannot be opened: .*refusing to overwrite it"
nchecks=$((nchecks + 1))
[ "$(cat shards/manifest.h5)" = "my notes" ] || fail "foreign manifest.h5 was overwritten"
finish
