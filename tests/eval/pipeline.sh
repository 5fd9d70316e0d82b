#!/bin/sh
# tests/eval/pipeline.sh - calculation='pipeline' end to end on a tiny TIFF set (scdino_demo_data, 3
# classes x 20 images) with a tiny ViT: prepare, train, features, knn (with both baselines) and
# attention in one launch; every output and the summary (its kNN numbers against knn.h5); a second
# launch on two ranks that finds the shards and skips prepare; the error without TIFFs or shards;
# examples/plot_run.py on the run.
. "$top_srcdir/tests/lib.sh"
scratch pipeline_sh
"$top_builddir/scdino_demo_data" -o tiff -n 20 -c 3 -q || exit 99

deck() { # deck RUN_DIR [TIFF_DIR [SHARD_DIR]]
  cat <<EOF
&control calculation = 'pipeline', run_dir = '$1', seed = 3 /
&data tiff_dir = '${2-tiff}', shard_dir = '${3-shards}', channels = 1, 2, 4 /
&model arch = 'custom', patch_size = 8, embed_dim = 48, depth = 2, num_heads = 3, mlp_ratio = 4,
       out_dim = 64, head_hidden_dim = 96, head_bottleneck_dim = 32, head_nlayers = 3 /
&crops global_size = 32, local_size = 16, local_crops_number = 2 /
&training epochs = 2, batch_size_per_rank = 8, warmup_epochs = 1, saveckp_freq = 1 /
&features resize = 32, batch_size = 16 /
&knn k = 1, 3, 20 /
&attention images_per_class = 1, image_size = 48 /
EOF
}

deck run >p.nml
expect_exit 0 "$SCDINO" p.nml
expect_grep 'pipeline step 1: prepare'
expect_grep 'prepare: 60 TIFF files in 3 classes'
expect_grep 'pipeline step 5: attention'
expect_grep '==== scdino pipeline summary ===='
# floor((1 - 0.8) * 60) is 11 in double precision, as in upstream's Python: 49 + 11.
expect_grep 'images      : 60 in shards \(49 in the training split\); 11 feature rows'
expect_grep 'training    : 2 epochs, final loss [0-9]+\.[0-9]+'
expect_grep 'k  trained: teacher +raw pixels 16x16 +random init \(seed 3\)'
for f in shards/manifest.h5 run/checkpoint.h5 run/checkpoint_0001.h5 run/log.txt run/features_0001.h5 run/features_0001.h5ad run/knn.txt \
  run/knn.h5 run/attention.h5 run/pipeline.txt run/input.echo.nml; do
  nchecks=$((nchecks + 1))
  [ -s "$f" ] || fail "$f missing or empty"
done
nchecks=$((nchecks + 2))
[ "$(find run/attention -name 'attn-head*.png' | wc -l)" = 18 ] || fail "expected 3 images x 2 sizes x 3 heads of maps"
ls run shards | grep -q tmp && fail "temporary files left behind"

# The summary's kNN table is knn.h5's.
if [ "$PYTHON3" != none ]; then
  cat >check.py <<'EOF'
import h5py
f = h5py.File("run/knn.h5", "r")
rows = [l.split() for l in open("run/pipeline.txt") if l.strip()[:2] in ("1 ", "3 ", "20")]
assert len(rows) == 3, rows
for i, (k, r) in enumerate(zip(f["k"][:], rows)):
    assert int(r[0]) == k
    cells = [float(x) for x in r[1:] if x != "/"]
    want = []
    for g in ("trained", "raw_pixels", "random_init"):
        want += [f[g + "/top1"][i], f[g + "/top2"][i]]
    assert all(abs(a - b) < 0.006 for a, b in zip(cells, want)) and len(cells) == 6, (cells, want)
print("summary matches knn.h5")
EOF
  expect_exit 0 "$PYTHON3" check.py
  expect_grep 'summary matches knn.h5'
fi

# The plotting script on this run (when matplotlib and scikit-learn are there).
if [ "$PYTHON3" != none ] && "$PYTHON3" -c 'import matplotlib, sklearn' 2>/dev/null; then
  expect_exit 0 "$PYTHON3" "$top_srcdir/examples/plot_run.py" run
  for f in loss embedding knn attention; do
    nchecks=$((nchecks + 1))
    [ -s "run/plots/$f.png" ] || fail "run/plots/$f.png missing"
  done
  ls run/plots | grep -q tmp && fail "temporary files left in run/plots"
else
  echo "note: plot check not run (no Python with matplotlib and scikit-learn: scripts/setup.sh --tests)"
fi

# Again on two ranks, into another run_dir: the shards are complete, so prepare is skipped.
if [ "$MPIEXEC" != none ]; then
  deck run2 >p2.nml
  expect_exit 0 $MPIEXEC -n 2 "$SCDINO" p2.nml
  expect_grep 'holds a complete shard set; prepare skipped'
  expect_grep 'wall time   : prepare skipped, train'
  nchecks=$((nchecks + 1))
  [ -s run2/pipeline.txt ] || fail "run2/pipeline.txt missing"
fi

# The TIFF tree changed since the shards were made: refused as prepare refuses it (exit 2), by
# pipeline and by train; &data check_tiff_tree = .false. takes the shards as they are.
cp tiff/$(ls tiff | head -n 1)/$(ls tiff/$(ls tiff | head -n 1) | head -n 1) "tiff/$(ls tiff | head -n 1)/zz_new.tif" || exit 99
deck run4 >p4.nml
expect_exit 2 "$SCDINO" p4.nml
expect_grep "shard_dir 'shards' holds a complete shard set of other input: it was made from another file list \(60 files, now 61\)"
sed "s/calculation = 'pipeline'/calculation = 'train'/" p4.nml >t4.nml
expect_exit 2 "$SCDINO" t4.nml
expect_grep "shard_dir 'shards' holds a complete shard set of other input: it was made from another file list"
nchecks=$((nchecks + 1))
[ -e run4/checkpoint.h5 ] && fail "training ran on stale shards"
sed "s/calculation = 'pipeline'/calculation = 'train'/; s/channels = 1, 2, 4/channels = 1, 2, 4, check_tiff_tree = .false./; s/epochs = 2,/epochs = 2, max_steps = 1,/" p4.nml >t5.nml
expect_exit 0 "$SCDINO" t5.nml
expect_grep "stopped after 1 steps? of this launch \(max_steps\)"
rm "tiff/$(ls tiff | head -n 1)/zz_new.tif"

# No TIFF tree and no shards: refused (exit 2) before any step runs.
deck run3 '' noshards >e.nml
expect_exit 2 "$SCDINO" e.nml
expect_grep "holds no complete shard set and data.tiff_dir and data.file_list are empty"
nchecks=$((nchecks + 1))
[ -e noshards/manifest.h5 ] && fail "a refused pipeline wrote shards"
nchecks=$((nchecks + 1))
[ -e run3/checkpoint.h5 ] && fail "a refused pipeline trained"
finish
