#!/bin/sh
# tests/eval/features.sh - `scdino deck` with calculation='features', 'knn' and 'attention' on the tiny
# fixture (tests/fixtures/feat_mkdata): features_EEEE.h5 read back with h5py (schema, unit rows, ascending
# index, labels and paths of the shards), the same files from two ranks as from one, the
# random-init baseline in knn.txt / knn.h5, attention.h5 and its PNG tree, images named for attention
# (by index, path or its trailing part; names that match none or repeat one refused), outputs that would replace
# an input (refused, the input unchanged), a checkpoint that contradicts the deck's own model keys,
# and input errors.
. "$top_srcdir/tests/lib.sh"
scratch features_sh
"$top_builddir/tests/fixtures/feat_mkdata" . || exit 99

deck() { # deck CALCULATION RUN_DIR [EXTRA GROUPS]
  cat <<EOF
&control calculation = '$1', run_dir = '$2', seed = 11 /
&data shard_dir = 'shards', channels = 0, 2, train_fraction = 0.5 /
&features checkpoint = 'ckpt.h5', resize = 32, batch_size = 4 /
&knn k = 1, 3, 5, pixel_size = 8 /
&attention images_per_class = 1, image_size = 44 /
$3
EOF
}

# Features, one rank.  The checkpoint holds epoch 3 (next to run): the file is features_0002.h5.
deck features run | sed 's/seed = 11 \//seed = 11, progress_seconds = 0 \//' >f1.nml
expect_exit 0 "$SCDINO" f1.nml
expect_grep 'features: 4/20 images \(20 %\), [^,]+ images/s, ETA '
expect_grep 'features: 20/20 images \(100 %\) in [^,]+, [^,]+ images/s$'
expect_grep 'features: teacher network of ckpt.h5 \(epoch 2\), val subset: 20 of 40 images, 2 channels resized to 32x32'
expect_grep '1 image\(s\) have a constant non-zero channel; it is set to 0'
expect_grep 'features: 20 x 48 written to run/features_0002.h5'
[ -f run/features_0002.h5 ] || fail "run/features_0002.h5 missing"
ls run | grep -q tmp && fail "temporary files left in run_dir"

# Two ranks (uneven shares of 20 rows in batches of 4): the same file.
if [ "$MPIEXEC" != none ]; then
  deck features run2 >f2.nml
  expect_exit 0 $MPIEXEC -n 2 "$SCDINO" f2.nml
  for obj in features labels index paths class_names; do
    nchecks=$((nchecks + 1))
    h5diff run/features_0002.h5 run2/features_0002.h5 "/$obj" "/$obj" >/dev/null ||
      fail "features_0002.h5 /$obj differs between 1 and 2 ranks"
  done
fi

# What a Python user sees.
if [ "$PYTHON3" != none ]; then
  cat >check.py <<'EOF'
import h5py, numpy as np
f = h5py.File("run/features_0002.h5", "r")
s = lambda v: v.decode() if isinstance(v, bytes) else v
assert s(f.attrs["format"]) == "scdino-features" and f.attrs["version"] == 2
# Fixed-length strings (doc/formats.md): h5py gives bytes.
assert isinstance(f.attrs["format"], bytes) and f["paths"].dtype.kind == "S"
assert f["features"].fletcher32 and f["features"].chunks is not None
assert s(f.attrs["checkpoint_key"]) == "teacher" and f.attrs["epoch"] == 2 and s(f.attrs["checkpoint"]) == "ckpt.h5"
x = f["features"][:]; idx = f["index"][:]; lab = f["labels"][:]; paths = [s(p) for p in f["paths"][:]]
assert x.shape == (20, 48) and x.dtype == np.float32
assert np.allclose(np.linalg.norm(x, axis=1), 1, atol=1e-5)
assert (np.diff(idx) > 0).all(), idx
# The validation half of numpy.random.seed(40); shuffle(range(40)).
perm = list(range(40)); np.random.seed(40); np.random.shuffle(perm)
assert list(idx) == sorted(perm[:20]), idx
assert (lab == idx % 3).all() and paths == ["c%d/img%05d.tif" % (i % 3, i) for i in idx]
assert [s(c) for c in f["class_names"][:]] == ["c0", "c1", "c2"]
print("h5py features ok")
EOF
  expect_exit 0 "$PYTHON3" check.py
  expect_grep 'h5py features ok'
fi

# kNN with both baselines: the random-init network of the checkpoint's architecture.
deck knn run >k1.nml
expect_exit 0 "$SCDINO" k1.nml
expect_grep 'random-init baseline: ckpt.h5 backbone \(embed_dim 48, depth 2, patch 8\), random init \(seed 11\), 20 images'
expect_grep 'kNN on random init \(seed 11\) \(48-d\)'
nchecks=$((nchecks + 2))
grep -q 'random init (seed 11) (48-d)' run/knn.txt || fail "knn.txt has no random-init column"
h5ls run/knn.h5/random_init/top1 >/dev/null 2>&1 || fail "knn.h5 has no /random_init/top1"
if [ "$MPIEXEC" != none ]; then
  deck knn run2 >k2.nml
  expect_exit 0 $MPIEXEC -n 2 "$SCDINO" k2.nml
  nchecks=$((nchecks + 1))
  sed 's/run2\//run\//g' run2/knn.txt | cmp -s - run/knn.txt || { fail "knn.txt differs between 1 and 2 ranks"; diff run/knn.txt run2/knn.txt >&2; }
fi
# Baselines off: no random-init set.
deck knn run3 '&knn baselines = .false. /' | sed '/^&knn k/d' >k3.nml
mkdir -p run3 && cp run/features_0002.h5 run3/
expect_exit 0 "$SCDINO" k3.nml
expect_nogrep 'random init'

# Attention maps, one and two ranks.
deck attention run >a1.nml
expect_exit 0 "$SCDINO" a1.nml
expect_grep 'attention: size 32: 32x32 input, 4x4 patches'
expect_grep 'attention: size 44: 40x40 input, 5x5 patches'
nchecks=$((nchecks + 2))
[ "$(find run/attention -name 'attn-head*.png' | wc -l)" = 18 ] || fail "expected 3 images x 2 sizes x 3 heads PNG maps"
[ "$(find run/attention -name 'channel_*.png' | wc -l)" = 12 ] || fail "expected 3 images x 2 sizes x 2 channel PNGs"
if [ "$MPIEXEC" != none ]; then
  deck attention run2 >a2.nml
  expect_exit 0 $MPIEXEC -n 2 "$SCDINO" a2.nml
  for obj in index size_32/maps size_44/maps size_44/cls_attention size_44/images; do
    nchecks=$((nchecks + 1))
    h5diff run/attention.h5 run2/attention.h5 "/$obj" "/$obj" >/dev/null || fail "attention.h5 /$obj differs between 1 and 2 ranks"
  done
fi
if [ "$PYTHON3" != none ]; then
  cat >checka.py <<'EOF'
import h5py, numpy as np
f = h5py.File("run/attention.h5", "r")
m = f["size_44/maps"][:]
assert m.shape == (3, 3, 5, 5) and np.allclose(m.sum(axis=(2, 3)), 1, atol=1e-5)
assert list(f["labels"][:]) == [0, 1, 2] and list(f.attrs["sizes"]) == [32, 44]
print("h5py attention ok")
EOF
  expect_exit 0 "$PYTHON3" checka.py
  expect_grep 'h5py attention ok'
fi

# Named images (DINO's visualize_attention --image_path): the first image of the run above by its
# index, a whole path and a trailing part, in the deck's order, from a deck whose validation split is
# empty (any image of the set): the maps of the shared image the same as the run's.
if [ "$PYTHON3" != none ]; then
  first=$("$PYTHON3" -c 'import h5py; print(h5py.File("run/attention.h5", "r")["index"][0])')
  deck attention named | sed -e 's/train_fraction = 0.5/train_fraction = 1.0/' \
    -e "s|images_per_class = 1|images = 'c2/img00005.tif', '$first', 'img00010.tif'|" >a3.nml
  expect_exit 0 "$SCDINO" a3.nml
  expect_grep 'attention: teacher network of ckpt.h5 \(epoch 2\), 3 image\(s\) \(named by attention.images\), 3 head'
  cat >checkn.py <<EOF
import h5py, numpy as np
f, g = h5py.File("named/attention.h5", "r"), h5py.File("run/attention.h5", "r")
assert list(f["index"][:]) == [5, $first, 10], f["index"][:]
assert list(f["labels"][:]) == [2, $first % 3, 1]
for s in ("size_32", "size_44"):
    assert np.array_equal(f[s + "/maps"][1], g[s + "/maps"][0]), s
print("named attention ok")
EOF
  expect_exit 0 "$PYTHON3" checkn.py
  expect_grep 'named attention ok'
  nchecks=$((nchecks + 1))
  [ -f named/attention/c1/img00010/image_size_44/attn-head2.png ] || fail "no PNG map for the image named img00010.tif"
fi
# Names that do not name one image: exit 2 naming the entry, nothing written.
for bad in "'img00099.tif'|entry 1 \\('img00099.tif'\\) is no image of shards" \
  "'0', '40'|entry 2 \\('40'\\): shards holds 40 images \\(indices 0 to 39\\)" \
  "'7', 'c1/img00007.tif'|entries 1 \\('7'\\) and 2 \\('c1/img00007.tif'\\) name the same image" \
  "'mg00007.tif'|entry 1 \\('mg00007.tif'\\) is no image"; do
  deck attention badnamed | sed "s|images_per_class = 1|images = ${bad%%|*}|" >a4.nml
  expect_exit 2 "$SCDINO" a4.nml
  expect_grep "attention.images ${bad#*|}"
done
nchecks=$((nchecks + 1))
[ -e badnamed/attention.h5 ] && fail "a refused attention run left attention.h5"

# Outputs never clobber inputs (doc/faults.md): the checkpoint named as the features file the run
# writes (it holds epoch 3: features_0002.h5), and a deck that is the run's knn.txt or attention.h5,
# are refused before anything is computed (exit 2), the file left byte for byte as it was.
mkdir -p own && cp ckpt.h5 own/features_0002.h5 && cp ckpt.h5 own.before
deck features own '&features checkpoint = "own/features_0002.h5" /' | sed '/checkpoint = .ckpt.h5./d' >own.nml
expect_exit 2 "$SCDINO" own.nml
expect_grep "refusing to write the features file own/features_0002.h5: it is this run's checkpoint \\(own/features_0002.h5\\)"
nchecks=$((nchecks + 1))
cmp -s own/features_0002.h5 own.before || fail "the checkpoint own/features_0002.h5 was changed"
for out_file in knn.txt attention.h5; do
  calc=${out_file%.*}
  deck "$calc" own | sed "s|^&knn k = |\&knn features = 'run/features_0002.h5', k = |" >"own/$out_file"
  cp "own/$out_file" own.before
  expect_exit 2 "$SCDINO" "own/$out_file"
  expect_grep "refusing to write the [a-zA-Z ]+ own/$out_file: it is this run's input deck \\(own/$out_file\\)"
  nchecks=$((nchecks + 1))
  cmp -s "own/$out_file" own.before || fail "the deck own/$out_file was changed"
done

# The deck's own model keys against the checkpoint's network (3 heads): a key the deck sets must agree
# (exit 3 naming the key and both values), for features and attention alike; keys left at their
# defaults take the checkpoint's values (every run above).
for calc in features attention; do
  deck "$calc" heads "&model arch = 'custom', num_heads = 4 /" >heads.nml
  expect_exit 3 "$SCDINO" heads.nml
  expect_grep "checkpoint ckpt.h5 does not fit this deck: &model num_heads = 4 in the deck, but 3 in the checkpoint"
done
nchecks=$((nchecks + 1))
[ -e heads/features_0002.h5 ] || [ -e heads/attention.h5 ] && fail "a refused checkpoint left an output"

# Input errors: exit 2 with the cause named, nothing written.
deck features run4 '&features checkpoint = "nope.h5" /' | sed '/checkpoint = .ckpt.h5./d' >e1.nml
expect_exit 2 "$SCDINO" e1.nml
expect_grep "checkpoint 'nope.h5' not found"
deck features run4 | sed 's/channels = 0, 2/channels = 0, 1/' >e2.nml
expect_exit 2 "$SCDINO" e2.nml
expect_grep 'checkpoint ckpt.h5 was trained on source channels 0, 2, but data.channels selects 0, 1'
deck features run4 | sed 's/train_fraction = 0.5/train_fraction = 1.0/' >e3.nml
expect_exit 2 "$SCDINO" e3.nml
expect_grep 'train_fraction = 1 leaves no validation images'
nchecks=$((nchecks + 1))
[ -e run4/features_0002.h5 ] && fail "a failed run left a features file"

# An error of the data that every rank finds, on two ranks: rank 0 says it once (the other rank waits for
# rank 0's abort, which ends it quietly: no second message, no "SIGTERM received").
if [ "$MPIEXEC" != none ]; then
  sed "s/calculation = 'features'/calculation = 'attention'/" e3.nml >e4.nml
  expect_exit 2 $MPIEXEC -n 2 "$SCDINO" e4.nml
  expect_grep 'error \(rank 0 of 2\): attention: the validation split of shards is empty'
  nchecks=$((nchecks + 1))
  n=$(printf '%s\n' "$out" | grep -c '^scdino: error')
  [ "$n" = 1 ] || fail "$n error messages from 2 ranks, wanted 1"
  expect_nogrep 'SIGTERM received'
fi
finish
