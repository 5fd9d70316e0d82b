#!/bin/sh
# tests/eval/anndata.sh - features_EEEE.h5ad, the AnnData sibling of the features file, as the real
# anndata package reads it (anndata.read_h5ad; Debian python3-anndata): X equal to the features
# file's rows bit for bit, obs_names = the paths, obs columns label (categorical over the class
# names, in class order), split and index with their dtypes, var_names, the provenance in uns; the
# split of every row with features.subset = 'all'; the metadata columns of a CSV file list's shard
# set in obs (categorical, or strings when every row has its own value) and an unlabelled set's
# file without a label column; the same file from two ranks; &features
# anndata = .false.; a file scdino did not write is never replaced (exit 2 before any work, in the
# pipeline before training).  Where
# scanpy is importable, its neighbours, UMAP and Leiden run on the file.  Skipped (77) without
# anndata.
. "$top_srcdir/tests/lib.sh"
[ "$PYTHON3" = none ] && skip "no python3 with h5py and numpy"
"$PYTHON3" -c 'import anndata' 2>/dev/null || skip "python3 has no anndata (Debian: python3-anndata)"
scratch anndata_sh
"$top_builddir/tests/fixtures/feat_mkdata" . || exit 99

deck() { # deck RUN_DIR [EXTRA GROUPS]
  cat <<EOF
&control calculation = 'features', run_dir = '$1', seed = 11 /
&data shard_dir = 'shards', channels = 0, 2, train_fraction = 0.5 /
&features checkpoint = 'ckpt.h5', resize = 32, batch_size = 4 $2 /
EOF
}

deck run >f1.nml
expect_exit 0 "$SCDINO" f1.nml
expect_grep 'features: AnnData file run/features_0002.h5ad \(scanpy: sc.read_h5ad\)'
# scdino replaces an .h5ad it wrote.
expect_exit 0 "$SCDINO" f1.nml
nchecks=$((nchecks + 1))
[ -z "$(find run -name '*.tmp.*')" ] || fail "temporary files left in run_dir"
deck runall ", subset = 'all'" >f2.nml
expect_exit 0 "$SCDINO" f2.nml

cat >check.py <<'EOF'
import sys, anndata, h5py, numpy as np
from importlib.metadata import version
s = lambda v: v.decode() if isinstance(v, bytes) else v

def check(run, subset):
    a = anndata.read_h5ad(run + "/features_0002.h5ad")
    f = h5py.File(run + "/features_0002.h5", "r")
    x = f["features"][:]
    classes = [s(c) for c in f["class_names"][:]]
    assert a.shape == x.shape == (20 if subset == "val" else 40, 48), (a.shape, x.shape)
    assert a.X.dtype == np.float32 and np.array_equal(a.X, x), "X differs from the features file"
    assert list(a.obs_names) == [s(p) for p in f["paths"][:]]
    assert list(a.obs.columns) == ["label", "split", "index"], list(a.obs.columns)
    assert [str(t) for t in a.obs.dtypes] == ["category", "category", "int64"], a.obs.dtypes
    lab = a.obs["label"]
    assert list(lab.cat.categories) == classes == ["c0", "c1", "c2"] and not lab.cat.ordered
    assert (lab.cat.codes.to_numpy() == f["labels"][:]).all()
    assert (a.obs["index"].to_numpy() == f["index"][:]).all()
    assert list(a.obs["split"].cat.categories) == ["train", "val"]
    # The validation half of numpy.random.seed(40); shuffle(range(40)) (tests/eval/features.sh).
    perm = list(range(40)); np.random.seed(40); np.random.shuffle(perm)
    want = ["val" if i in perm[:20] else "train" for i in a.obs["index"]]
    assert list(a.obs["split"]) == want, list(a.obs["split"])
    assert subset != "val" or set(want) == {"val"}
    assert list(a.var_names) == ["f%d" % j for j in range(48)]
    u = a.uns
    keys = {"scdino_version", "date", "deck_path", "deck", "features_file", "checkpoint", "checkpoint_key",
            "epoch", "arch", "patch_size", "embed_dim", "depth", "num_heads", "channels", "channel_indices",
            "resize", "input_size", "normalize", "subset", "shard_dir", "train_fraction", "split_seed"}
    assert set(u.keys()) == keys, set(u.keys()) ^ keys
    assert u["checkpoint"] == "ckpt.h5" and u["checkpoint_key"] == "teacher" and u["epoch"] == 2
    assert u["features_file"] == run + "/features_0002.h5" and u["subset"] == subset
    assert list(u["channels"]) == ["ch0", "ch2"] and list(u["channel_indices"]) == [0, 2]
    assert u["resize"] == 32 and list(u["input_size"]) == [32, 32] and u["normalize"] == True
    assert u["patch_size"] == 8 and u["embed_dim"] == 48 and u["depth"] == 2 and u["num_heads"] == 3
    assert u["train_fraction"] == 0.5 and u["split_seed"] == 40 and u["shard_dir"] == "shards"
    assert u["deck_path"].endswith("/f%d.nml" % (1 if subset == "val" else 2))
    assert "calculation = 'features'" in u["deck"] and u["date"].endswith("Z")
    return a

a = check("run", "val")
check("runall", "all")
print("anndata %s reads it" % version("anndata"))
try:
    import scanpy as sc
except ImportError:
    print("scanpy not installed: neighbours/UMAP/Leiden not run")
    sys.exit(0)
sc.pp.neighbors(a, n_neighbors=5, use_rep="X")
sc.tl.umap(a)
assert a.obsm["X_umap"].shape == (20, 2) and np.isfinite(a.obsm["X_umap"]).all()
try:
    sc.tl.leiden(a)
    assert a.obs["leiden"].dtype.name == "category" and len(a.obs["leiden"]) == 20
    print("scanpy %s: neighbours, UMAP, Leiden ran" % version("scanpy"))
except ImportError:
    print("scanpy %s: neighbours, UMAP ran (no leidenalg)" % version("scanpy"))
EOF
expect_exit 0 "$PYTHON3" check.py
expect_grep '^anndata .* reads it$'
printf '%s\n' "$out" | grep -E 'scanpy'

# ---- metadata (a CSV file list's columns) and an unlabelled set ----
MK="$top_builddir/tests/fixtures/mktiff"
mkdir -p imgs || exit 99
{
  echo "path,label,donor,well"
  for n in 1 2 3 4 5 6; do
    "$MK" imgs/i$n.tif 3 20 20 u16 ramp $n || exit 99
    echo "imgs/i$n.tif,$(if [ $((n % 2)) = 0 ]; then echo A; else echo B; fi),d$((n % 3 + 1)),W$n"
  done
} >list.csv
cut -d, -f1,3,4 list.csv >nolabel.csv
for set in list nolabel; do
  printf "&control calculation = 'prepare', run_dir = 'p_%s' /\n&data file_list = '%s.csv', shard_dir = 'sh_%s' /\n" \
    $set $set $set >p_$set.nml
  expect_exit 0 "$SCDINO" p_$set.nml
  printf "&control calculation = 'features', run_dir = 'run_%s' /\n&data shard_dir = 'sh_%s', channels = 0, 2 /\n%s\n" \
    $set $set "&features checkpoint = 'ckpt.h5', resize = 32, batch_size = 4, subset = 'all' /" >f_$set.nml
  expect_exit 0 "$SCDINO" f_$set.nml
  expect_grep "features: AnnData file run_$set/features_0002.h5ad"
done
cat >meta.py <<'EOF'
import anndata, h5py
s = lambda v: v.decode() if isinstance(v, bytes) else v
for run, cols in (("run_list", ["label", "split", "index", "donor", "well"]),
                  ("run_nolabel", ["split", "index", "donor", "well"])):
    a = anndata.read_h5ad(run + "/features_0002.h5ad")
    f = h5py.File(run + "/features_0002.h5", "r")
    assert list(a.obs.columns) == cols, (run, list(a.obs.columns))
    assert [str(a.obs[c].dtype) for c in ("donor", "well")] == ["category", "object"], a.obs.dtypes
    assert list(a.obs["donor"].cat.categories) == ["d1", "d2", "d3"]
    assert list(a.obs["donor"]) == [s(v) for v in f["metadata/donor"][:]] == ["d2", "d3", "d1", "d2", "d3", "d1"]
    assert list(a.obs["well"]) == ["W%d" % n for n in range(1, 7)]
    if "label" in cols:
        assert list(a.obs["label"].cat.categories) == ["A", "B"] and list(a.obs["label"]) == list("BABABA")
print("metadata in obs ok")
EOF
expect_exit 0 "$PYTHON3" meta.py
expect_grep '^metadata in obs ok$'

# Two ranks: the same X and obs.
if [ "$MPIEXEC" != none ]; then
  deck run2 >f3.nml
  expect_exit 0 $MPIEXEC -n 2 "$SCDINO" f3.nml
  for obj in X obs var; do
    nchecks=$((nchecks + 1))
    h5diff run/features_0002.h5ad run2/features_0002.h5ad "/$obj" "/$obj" >/dev/null ||
      fail "features_0002.h5ad /$obj differs between 1 and 2 ranks"
  done
fi

# Turned off: no .h5ad.
deck run3 ", anndata = .false." >f4.nml
expect_exit 0 "$SCDINO" f4.nml
expect_nogrep 'features: AnnData file'
nchecks=$((nchecks + 2))
[ -f run3/features_0002.h5 ] || fail "run3/features_0002.h5 missing"
[ -e run3/features_0002.h5ad ] && fail "anndata = .false. wrote run3/features_0002.h5ad"

# A file of that name that scdino did not write: refused before any work, left as it was.
mkdir -p run4 && echo "my notes" >run4/features_0002.h5ad
deck run4 >f5.nml
expect_exit 2 "$SCDINO" f5.nml
expect_grep 'refusing to write the AnnData file run4/features_0002.h5ad: it exists and is not scdino.s own AnnData file; an output only creates or replaces its own kind of file; move it away, or set &features anndata = .false.'
expect_nogrep 'written to'
nchecks=$((nchecks + 2))
[ "$(cat run4/features_0002.h5ad)" = "my notes" ] || fail "the foreign file was changed"
[ -e run4/features_0002.h5 ] && fail "a refused run wrote a features file"
# On two ranks: rank 0 looks, and says it once; the other rank is not left computing.
if [ "$MPIEXEC" != none ]; then
  expect_exit 2 $MPIEXEC -n 2 "$SCDINO" f5.nml
  expect_grep 'error \(rank 0 of 2\): refusing to write the AnnData file run4/features_0002.h5ad: it exists and is not scdino.s own AnnData file'
  expect_nogrep 'SIGTERM received'
  nchecks=$((nchecks + 1))
  n=$(printf '%s\n' "$out" | grep -c '^scdino: error')
  [ "$n" = 1 ] || fail "$n error messages from 2 ranks, wanted 1"
fi
# The pipeline refuses it before training (the file of its last epoch, EEEE = epochs - 1).
mkdir -p run5 && echo "my notes" >run5/features_0002.h5ad
printf "&control calculation = 'pipeline', run_dir = 'run5' /\n&data shard_dir = 'shards' /\n&training epochs = 3, warmup_epochs = 1 /\n" >p.nml
expect_exit 2 "$SCDINO" p.nml
expect_grep 'refusing to write the AnnData file run5/features_0002.h5ad: it exists and is not scdino.s own AnnData file'
expect_nogrep 'pipeline step'
nchecks=$((nchecks + 1))
[ -e run5/checkpoint.h5 ] && fail "a refused pipeline trained"
finish
