#!/bin/sh
# tests/eval/split.sh - kNN on one features file split by a column (&knn split_by, query_values), with
# both baselines on the same rows: two "donors" of demo images (B/donor1, B/donor2; labels from
# data.folder_depth_for_labels = 0), a tiny ViT trained on them, features of the whole set; donor2's
# rows voted by donor1's ('folder') equal a reference/query run of each donor's own features file
# (the same checkpoint and normalisation): Top-1/Top-2 at every k and every row's prediction; the
# report names the rule and has both baselines; 2 ranks give the same report; a metadata column of a
# CSV file list splits too; the errors.
. "$top_srcdir/tests/lib.sh"
scratch split_sh
demo="$top_builddir/scdino_demo_data"
"$demo" -o B/donor1 -n 8 -c 3 -s 2 -q && "$demo" -o B/donor2 -n 6 -c 3 -s 3 -q || exit 99

cat >train.nml <<EOF
&control calculation = 'train', run_dir = 'run', seed = 3 /
&data tiff_dir = 'B', shard_dir = 'shB', folder_depth_for_labels = 0, channels = 0, 1 /
&model arch = 'custom', patch_size = 8, embed_dim = 32, depth = 1, num_heads = 2, mlp_ratio = 2,
       out_dim = 32, head_hidden_dim = 32, head_bottleneck_dim = 16, head_nlayers = 2 /
&crops global_size = 32, local_size = 16, local_crops_number = 1 /
&training epochs = 1, batch_size_per_rank = 8, warmup_epochs = 0 /
EOF
expect_exit 0 "$SCDINO" train.nml

feat() { # feat RUN_DIR SHARD_DIR [TIFF_DIR]: features of every image with the checkpoint's statistics
  [ -n "${3:-}" ] && printf "&control calculation = 'prepare', run_dir = '%s' /\n&data tiff_dir = '%s', shard_dir = '%s' /\n" \
    "p$1" "$3" "$2" >"p$1.nml" && { "$SCDINO" "p$1.nml" >/dev/null 2>&1 || fail "prepare $3"; }
  cat >"$1.nml" <<EOF
&control calculation = 'features', run_dir = '$1', seed = 3 /
&data shard_dir = '$2', channels = 0, 1 /
&features checkpoint = 'run/checkpoint.h5', resize = 32, subset = 'all', normalization = 'checkpoint' /
EOF
  expect_exit 0 "$SCDINO" "$1.nml"
}
feat fall shB
feat f1 sh1 B/donor1
feat f2 sh2 B/donor2

knn() { # knn RUN_DIR EXTRA_KNN_KEYS [SHARD_DIR]
  cat <<EOF
&control calculation = 'knn', run_dir = '$1', seed = 3 /
&data shard_dir = '${3:-shB}', channels = 0, 1 /
&knn k = 1, 3, 20, pixel_size = 8, keep_neighbours = 3, group_by = 'none', $2 /
EOF
}
knn split "features = 'fall/features_0000.h5', split_by = 'folder', query_values = 'donor2'" >split.nml
expect_exit 0 "$SCDINO" split.nml
expect_grep "rows     : 42 = 24 reference \+ 18 test \(knn.split_by 'folder': query rows where it is 'donor2'\)"
expect_grep 'raw pixels 8x8'
expect_grep 'random init \(seed 3\)'
knn pair "reference = 'f1/features_0000.h5', query = 'f2/features_0000.h5', baselines = .false." >pair.nml
expect_exit 0 "$SCDINO" pair.nml

# Two ranks: the same report.
if [ "$MPIEXEC" != none ]; then
  knn split2 "features = 'fall/features_0000.h5', split_by = 'folder', query_values = 'donor2'" >split2.nml
  expect_exit 0 $MPIEXEC -n 2 "$SCDINO" split2.nml
  nchecks=$((nchecks + 1))
  sed -n '/^Accuracy in/,$p' split/knn.txt >a.txt
  sed -n '/^Accuracy in/,$p' split2/knn.txt >b.txt
  [ -s a.txt ] && cmp -s a.txt b.txt || fail "2 ranks gave another split report"
fi

if [ "$PYTHON3" != none ]; then
  cat >same.py <<'EOF'
import h5py, numpy as np
s, p = h5py.File("split/knn.h5", "r"), h5py.File("pair/knn.h5", "r")
assert s.attrs["split"] == b"knn.split_by 'folder': query rows where it is 'donor2'", s.attrs["split"]
assert "seed" not in s.attrs and "train_fraction" not in s.attrs
assert s.attrs["n_train"] == p.attrs["n_train"] == 24 and s.attrs["n_test"] == p.attrs["n_test"] == 18
for key in ("top1", "top2"):
    assert np.array_equal(s["trained/" + key][:], p["trained/" + key][:]), (key, s["trained/" + key][:], p["trained/" + key][:])
for key in ("prediction", "top2", "neighbours"):
    assert np.array_equal(s["query/" + key][:], p["query/" + key][:]), key
assert np.allclose(s["query/neighbour_similarity"][:], p["query/neighbour_similarity"][:], rtol=0, atol=1e-6)
for b in ("raw_pixels", "random_init"):
    t = s[b + "/top1"][:]
    assert t.shape == s["trained/top1"].shape and ((t >= 0) & (t <= 100)).all(), (b, t)
paths = [x.decode() for x in s["reference/path"][:]]
assert all(paths[r].startswith("donor1/") for r in s["query/neighbours"][:].ravel())
assert all(x.decode().startswith("donor2/") for x in s["query/path"][:])
print("split ok")
EOF
  expect_exit 0 "$PYTHON3" same.py
  expect_grep 'split ok'
fi

# A metadata column of a CSV file list splits too: the frames 3 and 4 against the others.
mkdir -p csv && : >csv/list.csv
echo "path,label,frame" >csv/list.csv
i=0
for f in B/donor1/*/*.tif*; do
  cls=$(basename "$(dirname "$f")")
  echo "../$f,$cls,$((i % 5))" >>csv/list.csv
  i=$((i + 1))
done
cat >pcsv.nml <<EOF
&control calculation = 'prepare', run_dir = 'pcsv' /
&data file_list = 'csv/list.csv', shard_dir = 'shC', label_column = 'label' /
EOF
expect_exit 0 "$SCDINO" pcsv.nml
feat fcsv shC
knn csvsplit "features = 'fcsv/features_0000.h5', split_by = 'frame', query_values = '3', '4'" shC >csvsplit.nml
expect_exit 0 "$SCDINO" csvsplit.nml
q=$(grep -c ',[34]$' csv/list.csv)
expect_grep "rows     : $i = $((i - q)) reference \+ $q test \(knn.split_by 'frame': query rows where it is '3', '4'\)"

# Errors: a column the file lacks, values that leave no query or no reference row (exit 2 at start).
knn e1 "features = 'fcsv/features_0000.h5', split_by = 'plate', query_values = '3'" shC >e1.nml
deck_error e1.nml "knn.split_by = 'plate' is no metadata column of fcsv/features_0000.h5 \(its columns: 'frame'\)"
knn e2 "features = 'fcsv/features_0000.h5', split_by = 'frame', query_values = '9'" shC >e2.nml
deck_error e2.nml "knn.split_by = 'frame' with knn.query_values = '9' leaves no query rows among the $i rows of fcsv/features_0000.h5"
knn e3 "features = 'fcsv/features_0000.h5', split_by = 'frame', query_values = '0', '1', '2', '3', '4'" shC >e3.nml
deck_error e3.nml "leaves no reference rows among the $i rows"
# Deck errors: values without a column, a column without values, beside reference/query, a value twice.
knn d1 "query_values = '3'" >d1.nml
deck_error d1.nml "query_values are the values of knn.split_by's column for the query rows: set split_by"
knn d2 "split_by = 'frame'" >d2.nml
deck_error d2.nml "split_by = 'frame' needs query_values"
knn d3 "reference = 'f1/features_0000.h5', query = 'f2/features_0000.h5', split_by = 'folder', query_values = 'x'" >d3.nml
deck_error d3.nml "knn.split_by splits one features file; knn.reference / knn.query are two files: give one of them"
knn d4 "split_by = 'frame', query_values = '3', '3'" >d4.nml
deck_error d4.nml "query_values lists '3' twice"
finish
