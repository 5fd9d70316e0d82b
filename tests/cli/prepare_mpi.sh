#!/bin/sh
# tests/cli/prepare_mpi.sh - prepare on 1, 2 and 3 ranks writes byte-identical shards and manifests
# (with and without skipped files); running it again on a complete shard_dir does nothing; an
# interrupted one (no manifest, stale shards and temporary files) is rebuilt.
. "$top_srcdir/tests/lib.sh"
[ "$MPIEXEC" = none ] && skip "no MPI launcher"
scratch prepare_mpi
"$top_builddir/scdino_demo_data" -o tiffs -n 9 -c 4 -s 3 -q || exit 99

deck() { # deck NAME SHARD_DIR ON_BAD
  cat >"$1.nml" <<EOF
&control calculation = 'prepare', verbosity = 1 /
&data tiff_dir = 'tiffs', shard_dir = '$2', images_per_shard = 5, on_bad_image = '${3:-error}' /
EOF
}

same_dirs() { # same_dirs A B: the same file names and bytes
  nchecks=$((nchecks + 1))
  if [ "$(ls "$1")" != "$(ls "$2")" ]; then
    fail "$1 and $2 hold different files: $(ls "$1" | tr '\n' ' ') / $(ls "$2" | tr '\n' ' ')"
    return
  fi
  for f in "$1"/*; do
    cmp -s "$f" "$2/$(basename "$f")" || fail "$f and $2/$(basename "$f") differ"
  done
}

deck one s1 && deck two s2 && deck three s3 || exit 99
expect_exit 0 "$SCDINO" one.nml
expect_grep 'prepare: 36 TIFF files in 4 classes'
expect_grep 'images are 5 channel\(s\) x 50 x 50, uint16'
expect_grep 'prepare: 36 images in 8 shard\(s\) under s1'
expect_exit 0 $MPIEXEC -n 2 "$SCDINO" two.nml
expect_exit 0 $MPIEXEC -n 3 "$SCDINO" three.nml
same_dirs s1 s2
same_dirs s1 s3

# Progress lines with files/s and ETA after every round but the last (control.progress_seconds = 0;
# here there is one round of 36 files), then the end line.
deck p0 s0p && sed -i 's/verbosity = 1/verbosity = 1, progress_seconds = 0/' p0.nml || exit 99
expect_exit 0 "$SCDINO" p0.nml
expect_grep 'prepare: 36/36 files \(100 %\) in [^,]+, [^,]+ files/s, [^,]+ MB/s$'

# Again: nothing to do, nothing touched.
cp s2/manifest.h5 manifest.before || exit 99
expect_exit 0 $MPIEXEC -n 2 "$SCDINO" two.nml
expect_grep 's2 is complete and matches tiffs \(36 files, 36 images\): nothing to do'
nchecks=$((nchecks + 1))
cmp -s manifest.before s2/manifest.h5 || fail "manifest rewritten by a no-op run"

# Interrupted: no manifest, a stale shard and temporary files; rebuilt to the same bytes.
rm s2/manifest.h5 && cp s2/shard-00001.h5 s2/shard-00099.h5 && : >s2/shard-00003.h5.tmp.123 &&
  : >s2/manifest.h5.tmp.77 || exit 99
expect_exit 0 $MPIEXEC -n 2 "$SCDINO" two.nml
expect_grep 'prepare: 36 images in 8 shard\(s\)'
same_dirs s1 s2

# A shard file lost from a complete set: rebuilt too.
rm s2/shard-00004.h5 || exit 99
expect_exit 0 "$SCDINO" two.nml
expect_grep 'lists 1 shard file\(s\) that are missing; preparing the shards again'
same_dirs s1 s2

# A changed file list is refused, not silently mixed.
"$top_builddir/tests/fixtures/mktiff" tiffs/B/extra.tif 5 50 50 u16 || exit 99
expect_exit 2 "$SCDINO" one.nml
expect_grep "shard_dir 's1' holds a complete shard set of other input: it was made from another file list \(36 files, now 37\)"

# Skipped files: the same result on 1 and 2 ranks, and the later shards' indices move down.
echo "not an image" >tiffs/B/B_00002.tiff && echo "nor this" >tiffs/T4/T4_00004.tiff || exit 99
deck skip1 k1 skip && deck skip2 k2 skip || exit 99
expect_exit 0 "$SCDINO" skip1.nml
expect_grep '2 of 37 files skipped'
expect_grep 'prepare: 35 images in 8 shard\(s\)'
expect_exit 0 $MPIEXEC -n 2 "$SCDINO" skip2.nml
same_dirs k1 k2
nchecks=$((nchecks + 1))
[ "$(wc -l <k1/skipped.txt)" = 2 ] || fail "skipped.txt: $(cat k1/skipped.txt)"
if [ "$PYTHON3" != none ]; then
  cat >check.py <<'EOF'
import h5py, numpy as np
m = h5py.File("k1/manifest.h5", "r")
assert m.attrs["format"] == b"scdino-shards" and m.attrs["version"] == 2 and m.attrs["count"] == 35 and m.attrs["source_count"] == 37
# Classes B, NK, T4, T8; B holds B_00000..B_00008.tiff and extra.tif (10 files), NK 9: so
# B/B_00002.tiff is file 2 and T4/T4_00004.tiff file 10 + 9 + 4 = 23.
assert list(m["skipped_index"][:]) == [2, 23], list(m["skipped_index"][:])
first = 0
for name, n in zip(m["shards"].asstr(), m["shard_counts"][:]):
    s = h5py.File("k1/" + name, "r")
    assert s["images"].shape == (n, 5, 50, 50) and s["images"].chunks == (1, 5, 50, 50)
    assert list(s["index"][:]) == list(range(first, first + n)), (name, list(s["index"][:]))
    first += n
assert first == 35
print("manifest and shard indices ok")
EOF
  expect_exit 0 "$PYTHON3" check.py
  expect_grep 'manifest and shard indices ok'
fi
finish
