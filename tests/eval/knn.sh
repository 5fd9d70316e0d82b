#!/bin/sh
# tests/eval/knn.sh - `scdino deck` with calculation='knn' on a tiny shard set and features file: the
# stdout table, knn.txt and knn.h5 (read back with h5py when it is there), the same report from
# two ranks as from one (reference rows and raw-pixel images are divided among the ranks), and from
# three in blocks of two test rows (&knn block_rows), ranks that see different directories, and an
# input error.
. "$top_srcdir/tests/lib.sh"
scratch knn_sh
"$top_builddir/tests/fixtures/knn_mkdata" . || exit 99

deck() { # deck RUN_DIR TABLE_K
  cat <<EOF
&control calculation = 'knn', run_dir = '$1' /
&data shard_dir = 'shards', channels = 0, 2 /
&knn k = 1, 5, 100, pixel_size = 6, table_k = ${2:-5} /
EOF
}

# One rank; the newest features file of run_dir is found by itself.
deck run >one.nml
expect_exit 0 "$SCDINO" one.nml
expect_grep 'kNN: run/features_0002.h5: 84 rows of 4 features, 3 classes'
expect_grep 'raw pixels 6x6 \(72-d\)'
expect_grep 'k = 100 exceeds the 67 reference rows; clamped to 67'
expect_grep 'Per-class metrics of the student features at k = 5:'
nchecks=$((nchecks + 4))
[ -f run/knn.txt ] && [ -f run/knn.h5 ] || fail "knn.txt or knn.h5 missing"
grep -q '^Run: run/features_0002.h5_epoch2$' run/knn.txt || fail "no upstream Run: line"
grep -Eq '^100-NN Top1: [0-9]+, Top2: [0-9]+$' run/knn.txt || fail "no upstream 100-NN line"
ls run | grep -q tmp && fail "temporary files left in run_dir"
# A set done within progress_seconds (5 s) prints no progress line; with 0, one after every block of
# test rows but the last and an end line (here one block, all 17 test rows: only the end line, for
# each feature set: the student's and raw pixels).
expect_nogrep 'test rows \('
sed 's/^&control calculation/\&control progress_seconds = 0, calculation/' one.nml >prog.nml
expect_exit 0 "$SCDINO" prog.nml
expect_grep 'kNN on student: 17/17 test rows \(100 %\) in [^,]+, [^,]+ test rows/s$'
nchecks=$((nchecks + 1))
[ "$(printf '%s\n' "$out" | grep -c 'test rows (100 %)')" = 2 ] || fail "not one progress line per feature set"

# Two ranks: the same report.
if [ "$MPIEXEC" != none ]; then
  mkdir -p run2 && cp run/features_0002.h5 run2/ || exit 99
  deck run2 >two.nml
  expect_exit 0 $MPIEXEC -n 2 "$SCDINO" two.nml
  nchecks=$((nchecks + 2))
  sed 's/run2\//run\//g' run2/knn.txt | cmp -s - run/knn.txt || { fail "knn.txt differs between 1 and 2 ranks"; diff run/knn.txt run2/knn.txt >&2; }
  for obj in trained/confusion trained/top2 raw_pixels/confusion raw_pixels/f1 raw_pixels/top1 k_used test_support; do
    h5diff run/knn.h5 run2/knn.h5 "/$obj" "/$obj" >/dev/null || fail "knn.h5 /$obj differs between 1 and 2 ranks"
  done
  # Three ranks in blocks of 2 test rows: each rank holds 22 or 23 of the 67 reference rows (fewer
  # than k = 67: lists padded, then merged), nine blocks owned in turn; the same report.
  mkdir -p run3b && cp run/features_0002.h5 run3b/ || exit 99
  deck run3b | sed 's|^&knn |\&knn block_rows = 2, |' >three.nml
  expect_exit 0 $MPIEXEC -n 3 "$SCDINO" three.nml
  nchecks=$((nchecks + 1))
  sed 's/run3b\//run\//g' run3b/knn.txt | cmp -s - run/knn.txt || { fail "knn.txt differs between 1 and 3 ranks"; diff run/knn.txt run3b/knn.txt >&2; }
fi

# Ranks that see different files (a relative shard_dir, rank 1 started in another directory): rank 0
# decides for all whether the raw-pixel baseline runs and which features file is read, so rank 1
# fails with a message instead of the ranks waiting in different collectives (which hung).
if [ "$MPIEXEC" != none ] && $MPIEXEC --version 2>&1 | grep -q 'Open MPI'; then
  mkdir -p elsewhere
  cat >mpmd.nml <<EOF
&control calculation = 'knn', run_dir = '$PWD/run3' /
&data shard_dir = 'shards', channels = 0, 2 /
&knn k = 1, 5, features = '$PWD/run/features_0002.h5', pixel_size = 6 /
EOF
  expect_exit 3 timeout 600 $MPIEXEC -n 1 -wdir "$PWD" "$SCDINO" "$PWD/mpmd.nml" : -n 1 -wdir "$PWD/elsewhere" "$SCDINO" \
    "$PWD/mpmd.nml"
  expect_grep "error \(rank 1 of 2\): shard_dir 'shards' does not exist"
fi

# What a Python user sees.
if [ "$PYTHON3" != none ]; then
  cat >check.py <<'EOF'
import h5py, numpy as np
f = h5py.File("run/knn.h5", "r")
assert f.attrs["format"] == b"scdino-knn" and f.attrs["version"] == 2
k = f["k"][:]; used = f["k_used"][:]
assert list(k) == [1, 5, 100] and list(used) == [1, 5, 67], (k, used)
for g in ("trained", "raw_pixels"):
    c = f[g + "/confusion"][:]
    assert c.shape == (3, 3, 3) and (c.sum(axis=(1, 2)) == 17).all(), c.sum(axis=(1, 2))
    top1 = f[g + "/top1"][:]
    diag = np.trace(c, axis1=1, axis2=2)
    assert np.allclose(top1, 100.0 * diag / 17), (top1, diag)
    f1 = f[g + "/f1"][:]
    assert f1.shape == (3, 3) and ((f1 >= 0) & (f1 <= 1)).all()
assert [s.decode() if isinstance(s, bytes) else s for s in f["class_names"][:]] == ["alpha", "beta", "gamma"]
assert f["trained"].attrs["dim"] == 4 and f["raw_pixels"].attrs["dim"] == 72
print("h5py ok")
EOF
  expect_exit 0 "$PYTHON3" check.py
  expect_grep 'h5py ok'
fi

# Input errors are exit 2 with the key named, at its place in the deck, before anything runs.
deck run 7 >bad.nml
expect_exit 2 "$SCDINO" bad.nml
expect_grep '^bad.nml:3:37: table_k = 7 is not one of the evaluated k$'
finish
