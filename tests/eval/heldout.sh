#!/bin/sh
# tests/eval/heldout.sh - a trained model on new images (issue 36, items 2 and 3): a tiny ViT trained on
# one labelled set (A: scdino_demo_data seed 1, 3 classes) records its training set's per-channel
# mean/std and channel names in the checkpoint; a second set made from other images (B: two "donors",
# seeds 2 and 3, one with a class A lacks; labels from data.folder_depth_for_labels = 0) gets features
# with the checkpoint's normalisation ('auto' picks it: another shard set), bit-identical to giving the
# same mean/std by hand ('values') and different from B's own ('data'); a channel-name mismatch is
# refused, and works with &features channel_map (bit-identical again); a checkpoint without
# statistics is refused for 'checkpoint'; then a reference/query kNN (A's features against B's) equals
# a NumPy reimplementation of DINO's eval_knn (tests/eval/eval_knn.py: Top-1/Top-2 at every k, every
# row's prediction, its kept neighbours, the per-group accuracy), on one rank and on two.
. "$top_srcdir/tests/lib.sh"
scratch heldout_sh
demo="$top_builddir/scdino_demo_data"
"$demo" -o A -n 12 -c 3 -s 1 -q && "$demo" -o B/donor1 -n 6 -c 4 -s 2 -q && "$demo" -o B/donor2 -n 6 -c 3 -s 3 -q ||
  exit 99
names="channel_names = 'BF', 'DNA', 'mem', 'gran', 'surf'"

# Train on A (prepared first): channels DNA, mem, surf.
cat >train.nml <<EOF
&control calculation = 'train', run_dir = 'runA', seed = 3 /
&data tiff_dir = 'A', shard_dir = 'shA', channels = 1, 2, 4, $names /
&model arch = 'custom', patch_size = 8, embed_dim = 48, depth = 2, num_heads = 3, mlp_ratio = 4,
       out_dim = 64, head_hidden_dim = 96, head_bottleneck_dim = 32, head_nlayers = 3 /
&crops global_size = 32, local_size = 16, local_crops_number = 2 /
&training epochs = 2, batch_size_per_rank = 8, warmup_epochs = 1 /
EOF
expect_exit 0 "$SCDINO" train.nml

# B, labelled by the folder that holds each file (donorN/<class>/file.tiff).
cat >prepB.nml <<EOF
&control calculation = 'prepare', run_dir = 'prepB' /
&data tiff_dir = 'B', shard_dir = 'shB', folder_depth_for_labels = 0, $names /
EOF
expect_exit 0 "$SCDINO" prepB.nml

feat() { # feat RUN_DIR SHARD_DIR DATA_KEYS [FEATURES_KEYS [CHECKPOINT]]
  cat <<EOF
&control calculation = 'features', run_dir = '$1' /
&data shard_dir = '$2'${3:+, $3} /
&features checkpoint = '${5:-runA/checkpoint.h5}', resize = 32, subset = 'all', batch_size = 16${4:+, $4} /
EOF
}
same_features() { # same_features A B: the /features datasets bit for bit
  nchecks=$((nchecks + 1))
  h5diff "$1/features_0001.h5" "$2/features_0001.h5" /features /features >/dev/null ||
    fail "$1 and $2: /features differ"
}

# A's own features: 'auto' takes A's statistics (its shard set is the checkpoint's).
feat fA shA 'channels = 1, 2, 4' >fA.nml
expect_exit 0 "$SCDINO" fA.nml
expect_grep "features: normalisation 'data' \(auto: shA is the shard set the checkpoint was trained on\) of channels 'DNA', 'mem', 'surf': mean = "

# B's: 'auto' takes the checkpoint's, and prints them exactly.
feat fB shB 'channels = 1, 2, 4' >fB.nml
expect_exit 0 "$SCDINO" fB.nml
expect_grep "features: normalisation 'checkpoint' \(auto: shB is not the shard set checkpoint runA/checkpoint.h5 was trained on\) of channels 'DNA', 'mem', 'surf': mean = [0-9.e-]+, [0-9.e-]+, [0-9.e-]+, std = [0-9.e-]+, [0-9.e-]+, [0-9.e-]+$"
line=$(printf '%s\n' "$out" | grep "normalisation 'checkpoint'")
mean=$(printf '%s\n' "$line" | sed 's/.*: mean = \(.*\), std = .*/\1/')
std=$(printf '%s\n' "$line" | sed 's/.*, std = //')
feat fBc shB 'channels = 1, 2, 4' "normalization = 'checkpoint'" >fBc.nml
expect_exit 0 "$SCDINO" fBc.nml
expect_grep "features: normalisation 'checkpoint' of channels 'DNA', 'mem', 'surf'"
same_features fB fBc
# The same numbers by hand (scDINO's norm_per_channel): the same bits.
feat fBv shB 'channels = 1, 2, 4' "normalization = 'values', mean = $mean, std = $std" >fBv.nml
expect_exit 0 "$SCDINO" fBv.nml
expect_grep "features: normalisation 'values' of channels 'DNA', 'mem', 'surf': mean = $mean, std = $std"
same_features fB fBv
# B's own statistics give other features.
feat fBd shB 'channels = 1, 2, 4' "normalization = 'data'" >fBd.nml
expect_exit 0 "$SCDINO" fBd.nml
nchecks=$((nchecks + 1))
h5diff fB/features_0001.h5 fBd/features_0001.h5 /features /features >/dev/null && fail "'data' on B gave the checkpoint's features"
if [ "$PYTHON3" != none ]; then
  cat >stats.py <<'EOF'
import h5py, numpy as np
c = h5py.File("runA/checkpoint.h5", "r")["normalization"]
m = h5py.File("shA/manifest.h5", "r")
sel = [1, 2, 4]
assert [n.decode() for n in c["channel_names"][:]] == ["DNA", "mem", "surf"]
assert (c["mean"][:] == m["mean"][:][sel]).all() and (c["std"][:] == m["std"][:][sel]).all()
b = h5py.File("shB/manifest.h5", "r")
assert (b["mean"][:][sel] != c["mean"][:]).any()
f = h5py.File("fB/features_0001.h5", "r")
assert f.attrs["normalization"] == b"checkpoint" and (f.attrs["norm_mean"] == c["mean"][:]).all()
assert (f.attrs["norm_std"] == c["std"][:]).all()
print("statistics ok")
EOF
  expect_exit 0 "$PYTHON3" stats.py
  expect_grep 'statistics ok'
fi

# Attention on B takes the same choice.
cat >attB.nml <<EOF
&control calculation = 'attention', run_dir = 'attB' /
&data shard_dir = 'shB', channels = 1, 2, 4, train_fraction = 0.5 /
&features checkpoint = 'runA/checkpoint.h5', resize = 32 /
&attention images_per_class = 1, image_size = 40 /
EOF
expect_exit 0 "$SCDINO" attB.nml
expect_grep "attention: normalisation 'checkpoint' \(auto: shB is not the shard set"

# Channels are matched by name: another selection is refused, naming the one that fits.
feat fBx shB 'channels = 1, 2, 3' >fBx.nml
expect_exit 2 "$SCDINO" fBx.nml
expect_grep "checkpoint runA/checkpoint.h5 was trained on the channels 'DNA', 'mem', 'surf', but data.channels selects 'DNA', 'mem', 'gran' \(source channels 1, 2, 3\) of shB; select them with data.channels = 1, 2, 4, or say which channel of the data feeds each of the checkpoint's with &features channel_map"
# The same images under other names: refused, then mapped explicitly (the same features, bit for bit).
sed -e "s/shard_dir = 'shB'/shard_dir = 'shB2'/" -e "s/'DNA', 'mem', 'gran', 'surf'/'Hoechst', 'WGA', 'gran', 'CD3'/" \
  prepB.nml >prepB2.nml
expect_exit 0 "$SCDINO" prepB2.nml
feat fB2x shB2 'channels = 1, 2, 4' >fB2x.nml
expect_exit 2 "$SCDINO" fB2x.nml
expect_grep "trained on the channels 'DNA', 'mem', 'surf', but data.channels selects 'Hoechst', 'WGA', 'CD3' \(source channels 1, 2, 4\) of shB2; say which channel"
feat fB2 shB2 '' "channel_map = 'Hoechst', 'WGA', 'CD3'" >fB2.nml
expect_exit 0 "$SCDINO" fB2.nml
expect_grep "features: channel_map: channels 'Hoechst', 'WGA', 'CD3' of shB2 feed 'DNA', 'mem', 'surf' of checkpoint runA/checkpoint.h5"
expect_grep "features: normalisation 'checkpoint' \(auto: shB2 is not the shard set"
same_features fB fB2
feat fB2y shB2 '' "channel_map = 'Hoechst', 'WGA'" >fB2y.nml
expect_exit 2 "$SCDINO" fB2y.nml
expect_grep "features.channel_map has 2 entries, but the network of checkpoint runA/checkpoint.h5 takes 3 channel\(s\)"
feat fB2z shB2 '' "channel_map = 'Hoechst', 'WGA', 'CD4'" >fB2z.nml
expect_exit 2 "$SCDINO" fB2z.nml
expect_grep "features.channel_map\(3\) = 'CD4': .*; the channels of shB2 are 'BF', 'Hoechst', 'WGA', 'gran', 'CD3'"

# A checkpoint without statistics (as an import of a .pth): 'checkpoint' is refused naming what to give
# instead; 'auto' takes the data's and says why.
"$top_builddir/tests/fixtures/feat_mkdata" fix || exit 99
feat fX fix/shards 'channels = 0, 2' "normalization = 'checkpoint'" fix/ckpt.h5 >fX.nml
expect_exit 2 "$SCDINO" fX.nml
expect_grep "features.normalization = 'checkpoint': checkpoint fix/ckpt.h5 records no normalisation statistics \(an import of a PyTorch .pth, or written before checkpoints recorded them\); give the training set's per-channel values with normalization = 'values', mean = ..., std = ... \(scDINO's norm_per_channel\), or normalise with this shard set's own with normalization = 'data'"
feat fX fix/shards 'channels = 0, 2' '' fix/ckpt.h5 >fX2.nml
expect_exit 0 "$SCDINO" fX2.nml
expect_grep "features: normalisation 'data' \(auto: checkpoint fix/ckpt.h5 records no statistics of its training set\)"
feat fX fix/shards 'channels = 0, 2' "normalization = 'values', mean = 0.2, std = 0.3" fix/ckpt.h5 >fX3.nml
expect_exit 2 "$SCDINO" fX3.nml
expect_grep "features.mean and std have 1 value\(s\) each, but the network takes 2 channel\(s\)"
# Deck errors: exit 2 before anything runs.
feat fY shB 'channels = 1, 2, 4' "normalization = 'values'" >e1.nml
expect_exit 2 "$SCDINO" e1.nml
expect_grep "normalization = 'values' needs mean and std"
feat fY shB 'channels = 1, 2, 4' "channel_map = 'DNA', 'mem', 'surf'" >e2.nml
expect_exit 2 "$SCDINO" e2.nml
expect_grep "channel_map names the data channels of the checkpoint's channels, in its order: it replaces data.channels"

# kNN: every row of B's features voted by A's (DINO eval_knn), per donor ('folder').
knn() { # knn RUN_DIR [EXTRA &knn KEYS]
  cat <<EOF
&control calculation = 'knn', run_dir = '$1' /
&knn reference = 'fA/features_0001.h5', query = 'fB/features_0001.h5', k = 1, 3, 5, 20, group_by = 'folder'${2:+, $2} /
EOF
}
knn kAB >k1.nml
expect_exit 0 "$SCDINO" k1.nml
expect_grep "kNN: reference fA/features_0001.h5 \(36 rows\), query fB/features_0001.h5 \(42 rows\): 48 features, 4 classes"
expect_grep "query class 'NK' \(6 rows\) is not a class of the reference fA/features_0001.h5: its rows count as wrong"
expect_grep "kNN: no baselines for knn.reference / knn.query"
nchecks=$((nchecks + 3))
grep -q '^  rows     : every query row voted by all 36 reference rows (DINO eval_knn)$' kAB/knn.txt || fail "knn.txt: no rows line"
grep -q "^Accuracy in % per value of 'folder' (the first folder of each path) at k = " kAB/knn.txt ||
  fail "knn.txt: no group table"
grep -Eq '^  donor2 +18 +[0-9.]+/ *[0-9.]+$' kAB/knn.txt || fail "knn.txt: donor2 is not a group of 18 rows"
if [ "$PYTHON3" != none ]; then
  expect_exit 0 "$PYTHON3" "$top_srcdir/tests/eval/eval_knn.py" fA/features_0001.h5 fB/features_0001.h5 kAB/knn.h5
  expect_grep 'eval_knn ok: 42 query rows against 36 reference rows, 20 neighbours kept, 1 grouping column\(s\)'
  # Two rows' neighbours by hand: the dot products, in order, of the rows the file names.
  cat >nb.py <<'EOF'
import h5py, numpy as np
k = h5py.File("kAB/knn.h5", "r"); a = h5py.File("fA/features_0001.h5", "r"); b = h5py.File("fB/features_0001.h5", "r")
for i in (0, 41):
    nb = k["query/neighbours"][i]
    s = a["features"][:][nb] @ b["features"][i]
    assert (np.diff(s) <= 0).all() and np.allclose(s, k["query/neighbour_similarity"][i], atol=1e-6), (i, s)
    others = np.setdiff1d(np.arange(36), nb)
    assert (a["features"][:][others] @ b["features"][i]).max() <= s[-1], i
    assert [p for p in k["reference/path"][:][nb]] == [p for p in a["paths"][:][nb]]
print("neighbours ok")
EOF
  expect_exit 0 "$PYTHON3" nb.py
  expect_grep 'neighbours ok'
fi
# knn.keep_neighbours: fewer kept; two ranks with blocks of 5 query rows give the same report.
knn kAB3 'keep_neighbours = 3' >k3.nml
expect_exit 0 "$SCDINO" k3.nml
nchecks=$((nchecks + 1))
[ "$(h5ls kAB3/knn.h5/query/neighbours | sed 's/.*{\(.*\)}.*/\1/')" = "42, 3" ] || fail "keep_neighbours = 3 did not keep 3"
if [ "$MPIEXEC" != none ]; then
  knn kAB2 'block_rows = 5' >k2.nml
  expect_exit 0 $MPIEXEC -n 2 "$SCDINO" k2.nml
  nchecks=$((nchecks + 1))
  sed 's/kAB2/kAB/g' kAB2/knn.txt | cmp -s - kAB/knn.txt || { fail "knn.txt differs between 1 and 2 ranks"; diff kAB/knn.txt kAB2/knn.txt >&2; }
  for obj in trained/top1 trained/confusion query/prediction query/top2 query/neighbours group_columns \
    groups/folder/value_of_row groups/folder/top1_trained groups/folder/top2_trained; do
    nchecks=$((nchecks + 1))
    h5diff kAB/knn.h5 kAB2/knn.h5 "/$obj" "/$obj" >/dev/null || fail "knn.h5 /$obj differs between 1 and 2 ranks"
  done
  # (GEMMs of other shapes may round a similarity differently in its last bit)
  nchecks=$((nchecks + 1))
  h5diff -d 1e-6 kAB/knn.h5 kAB2/knn.h5 /query/neighbour_similarity /query/neighbour_similarity >/dev/null ||
    fail "knn.h5 /query/neighbour_similarity differs between 1 and 2 ranks"
fi
# Deck errors of the pair.
cat >e3.nml <<EOF
&control calculation = 'knn', run_dir = 'kE' /
&knn reference = 'fA/features_0001.h5' /
EOF
expect_exit 2 "$SCDINO" e3.nml
expect_grep "knn.reference needs knn.query"
knn kE "features = 'fA/features_0001.h5'" >e4.nml
expect_exit 2 "$SCDINO" e4.nml
expect_grep "knn.features \(one file, split into reference and query rows\) and knn.reference / knn.query \(two files\) are two ways"
knn kE "group_by = 'donor'" | sed "s/, group_by = 'folder'//" >e5.nml
expect_exit 2 "$SCDINO" e5.nml
expect_grep "knn.group_by = 'donor' is no metadata column of the query rows' file fB/features_0001.h5 \(it has no metadata columns\)"
knn kE "group_by = 'folder', 'none'" | sed "s/, group_by = 'folder'//" >e6.nml
expect_exit 2 "$SCDINO" e6.nml
expect_grep "group_by = 'none' \(no groups\) stands alone"
finish
