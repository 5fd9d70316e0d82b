#!/bin/sh
# tests/eval/linear.sh - features of several blocks (&features n_last_blocks, avgpool_patchtokens) and the
# linear probe (calculation = 'linear') on the tiny fixture (tests/fixtures/feat_mkdata): the features
# file's layout attributes, its rows against today's (one block: no attributes, the same rows), the
# kNN's random-init baseline in the same layout; the probe against its PyTorch reference
# (linear_ref.py: the same features, initial weights and batch order, fp32), identical linear.h5 and
# linear.txt from 1, 2 and 3 ranks (and with augmentation from 1 and 2), its evaluation features
# against the features file, its Top-1 and confusion matrix against its own logits, a query set, and
# input errors.
. "$top_srcdir/tests/lib.sh"
scratch linear_sh
"$top_builddir/tests/fixtures/feat_mkdata" . || exit 99

deck() { # deck CALCULATION RUN_DIR [&linear GROUP] [MORE &features KEYS] [MORE &knn KEYS]
  cat <<EOF
&control calculation = '$1', run_dir = '$2', seed = 11 /
&data shard_dir = 'shards', channels = 0, 2, train_fraction = 0.5 /
&features checkpoint = 'ckpt.h5', resize = 32, batch_size = 4, anndata = .false.$4 /
&knn k = 1, 3, pixel_size = 8$5 /
$3
EOF
}
probe='&linear epochs = 12, lr = 0.5, batch_size = 6, n_last_blocks = 2, avgpool_patchtokens = .true., weight_decay = 1e-4, save_inputs = .true. /'

# Features: one block as today (no layout attributes), and two blocks with the mean patch token.
deck features f1 >f1.nml
expect_exit 0 "$SCDINO" f1.nml
deck features f1b '' ', n_last_blocks = 1, avgpool_patchtokens = .false.' >f1b.nml
expect_exit 0 "$SCDINO" f1b.nml
nchecks=$((nchecks + 1))
h5diff f1/features_0002.h5 f1b/features_0002.h5 >/dev/null || fail "n_last_blocks = 1 changed the features file"
deck features f2 '' ', n_last_blocks = 2, avgpool_patchtokens = .true.' >f2.nml
expect_exit 0 "$SCDINO" f2.nml
expect_grep 'features: rows of 144 values: the CLS tokens of blocks 0 to 1 and the mean patch token of the last \(embed_dim 48 each\)'
expect_grep 'features: 20 x 144 written to f2/features_0002.h5'

# kNN of the two-block file: the random-init baseline has the same layout.
deck knn f2 '' '' ", features = 'f2/features_0002.h5'" >k2.nml
expect_exit 0 "$SCDINO" k2.nml
expect_grep 'kNN on random init \(seed 11\) \(144-d\)'

# The probe on one rank, against PyTorch.
deck linear l1 "$probe" >l1.nml
expect_exit 0 "$SCDINO" l1.nml
expect_grep 'linear: teacher network of ckpt.h5 \(epoch 2\), 144 features per image \(the CLS tokens of its last 2 blocks and the mean patch token\), 20 training and 20 evaluation images, 3 classes'
expect_grep 'linear: epoch 12/12: lr '
expect_grep 'linear: Top-1 [0-9.]+ % after 12 epochs'
nchecks=$((nchecks + 1))
[ -f l1/linear.txt ] && [ -f l1/linear.h5 ] || fail "linear.txt or linear.h5 missing"
ls l1 | grep -q tmp && fail "temporary files left in run_dir"
if [ "$PYTHON3" != none ]; then
  "$PYTHON3" "$top_srcdir/tests/eval/linear_ref.py" l1/linear.h5 >ref.out 2>&1
  rc=$?
  nchecks=$((nchecks + 1))
  case $rc in
    0) grep -q 'linear_ref: agree' ref.out || fail "linear_ref.py did not report agreement" ;;
    77) echo "linear_ref.py skipped (no torch)" ;;
    *) fail "the probe differs from its PyTorch reference"; sed 's/^/    | /' ref.out >&2 ;;
  esac
  cat >check.py <<'EOF'
import h5py, numpy as np
s = lambda v: v.decode() if isinstance(v, bytes) else v
f2 = h5py.File("f2/features_0002.h5", "r"); f1 = h5py.File("f1/features_0002.h5", "r")
# layout attributes only where a row is more than one CLS token
assert "n_last_blocks" not in f1.attrs and "avgpool_patchtokens" not in f1.attrs
a = f2.attrs
assert a["n_last_blocks"] == 2 and a["avgpool_patchtokens"] == 1 and a["embed_dim"] == 48, dict(a)
assert list(a["blocks"]) == [0, 1]
x2, x1 = f2["features"][:], f1["features"][:]
assert x2.shape == (20, 144) and np.allclose(np.linalg.norm(x2, axis=1), 1, atol=1e-5)
# the second part is the last block's CLS: over its norm, today's rows
last = x2[:, 48:96] / np.linalg.norm(x2[:, 48:96], axis=1, keepdims=True)
assert np.abs(last - x1).max() < 1e-6, np.abs(last - x1).max()
# the probe's evaluation rows (not L2-normalised) are the features file's rows over their norm
l = h5py.File("l1/linear.h5", "r")
assert s(l.attrs["format"]) == "scdino-linear" and l.attrs["feature_dim"] == 144 and l.attrs["n_last_blocks"] == 2
xe = l["inputs/eval_features"][:]
assert list(l["eval/index"][:]) == list(f2["index"][:])
assert np.abs(np.linalg.norm(xe, axis=1) - 1).min() > 1e-2  # raw, as eval_linear
assert np.abs(xe / np.linalg.norm(xe, axis=1, keepdims=True) - x2).max() < 1e-6
# Top-1, the confusion matrix and the per-class recall from the stored logits
lab, lg = l["eval/label"][:], l["eval/logits"][:]
pred = lg.argmax(axis=1)
assert (pred == l["eval/prediction"][:]).all()
assert abs(l.attrs["top1"] - 100 * (pred == lab).mean()) < 1e-9 and abs(l["epochs/top1"][-1] - l.attrs["top1"]) < 1e-9
cm = np.zeros((3, 3), int)
for t, p in zip(lab, pred): cm[t, p] += 1
assert (cm == l["confusion"][:]).all()
sup = cm.sum(axis=1)
assert np.allclose(l["recall"][:], np.where(sup > 0, np.diag(cm) / np.maximum(sup, 1), 0))
assert l["weight"].shape == (3, 144) and l["inputs/order"].shape == (12, 20)
# every epoch visits every training row once
assert all(sorted(o) == list(range(20)) for o in l["inputs/order"][:])
assert (l["weight"][:] != l["weight_init"][:]).any()
print("h5py linear ok")
EOF
  expect_exit 0 "$PYTHON3" check.py
  expect_grep 'h5py linear ok'
fi

# 2 and 3 ranks: the same report and layer, bit for bit (features in whole batches, SGD on rank 0).
if [ "$MPIEXEC" != none ]; then
  for n in 2 3; do
    deck linear "l$n" "$probe" >"l$n.nml"
    expect_exit 0 $MPIEXEC -n "$n" "$SCDINO" "l$n.nml"
    for obj in weight bias epochs/train_loss epochs/eval_loss eval/logits inputs/eval_features inputs/train_features; do
      nchecks=$((nchecks + 1))
      h5diff l1/linear.h5 "l$n/linear.h5" "/$obj" "/$obj" >/dev/null || fail "linear.h5 /$obj differs between 1 and $n ranks"
    done
    nchecks=$((nchecks + 1))
    cmp -s l1/linear.txt "l$n/linear.txt" || { fail "linear.txt differs between 1 and $n ranks"; diff l1/linear.txt "l$n/linear.txt" >&2; }
  done
fi

# Augmentation: the training features again every epoch, the same on 1 and 2 ranks.
aug='&linear epochs = 2, lr = 0.5, batch_size = 6, n_last_blocks = 1, augment = .true. /'
deck linear a1 "$aug" | sed 's/seed = 11 \//seed = 11, progress_seconds = 0 \//' >a1.nml
expect_exit 0 "$SCDINO" a1.nml
expect_grep 'linear: augmented training features, epoch 1: 20/20 images \(100 %\)'
deck linear a0 "$(echo "$aug" | sed 's/augment = .true./augment = .false./')" >a0.nml
expect_exit 0 "$SCDINO" a0.nml
if [ "$MPIEXEC" != none ]; then
  deck linear a2 "$aug" >a2.nml
  expect_exit 0 $MPIEXEC -n 2 "$SCDINO" a2.nml
  for obj in weight epochs/train_loss; do
    nchecks=$((nchecks + 1))
    h5diff a1/linear.h5 a2/linear.h5 "/$obj" "/$obj" >/dev/null || fail "augmented linear.h5 /$obj differs between 1 and 2 ranks"
  done
fi
nchecks=$((nchecks + 1))
h5diff a0/linear.h5 a1/linear.h5 /epochs/train_loss /epochs/train_loss >/dev/null 2>&1 && fail "augmentation changed nothing"

# A query set: every image of another shard set (here the same images) is evaluated.
deck linear q1 '&linear epochs = 2, n_last_blocks = 1, query_dir = "shards" /' >q1.nml
expect_exit 0 "$SCDINO" q1.nml
expect_grep '20 training and 40 evaluation images, 3 classes'
nchecks=$((nchecks + 1))
grep -qF 'evaluated: 40 rows, every image of shards (linear.query_dir' q1/linear.txt ||
  fail "linear.txt does not name the query set"

# Input errors: more blocks than the network has; a report that would replace the deck.
deck linear e1 '&linear n_last_blocks = 3 /' >e1.nml
expect_exit 2 "$SCDINO" e1.nml
expect_grep 'linear.n_last_blocks = 3, but the network of ckpt.h5 has 2 blocks'
deck features e2 '' ', n_last_blocks = 5' >e2.nml
expect_exit 2 "$SCDINO" e2.nml
expect_grep 'features.n_last_blocks = 5, but the network of ckpt.h5 has 2 blocks'
mkdir -p own && deck linear own '&linear n_last_blocks = 1 /' >own/linear.txt && cp own/linear.txt own.before
expect_exit 2 "$SCDINO" own/linear.txt
expect_grep "refusing to write the linear probe report own/linear.txt: it is this run's input deck"
nchecks=$((nchecks + 1))
cmp -s own/linear.txt own.before || fail "the deck own/linear.txt was changed"
finish
