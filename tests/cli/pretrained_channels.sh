#!/bin/sh
# tests/cli/pretrained_channels.sh - weights of another channel count (&model
# use_mean_patch_embedding, custom_embedding_map; scDINO's options): a 3-channel checkpoint in
# upstream's layout (a .pth written by examples/export_pytorch.py, read back by import_pytorch.py)
# used on 5-channel data for init_from, features and attention.  The adapted patch embedding is
# checked against numpy (the mean over the pretrained channels; the mapped slices), every other
# tensor loads unchanged; bad maps and both keys together are refused.  Skipped without torch/h5py.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
[ "$PYTHON3" = none ] && skip "no python3 with h5py"
"$PYTHON3" -c "import torch, h5py, numpy" 2>/dev/null || skip "python3 has no torch"
scratch pretrained_channels
train_data shards
train_deck base epochs=1 warmup_epochs=0 batch_size_per_rank=4 >base.nml
expect_exit 0 "$SCDINO" base.nml
expect_exit 0 "$PYTHON3" "$top_srcdir/examples/export_pytorch.py" base/checkpoint.h5 base.pth
expect_exit 0 "$PYTHON3" "$top_srcdir/examples/import_pytorch.py" base.pth pre3.h5
expect_grep "pre3.h5: 38 tensors per network, custom p4 D=16 depth 2 heads 2, 3 channels"
"$top_builddir/tests/fixtures/train_mkdata" shards5 40 5 20 20 >/dev/null || exit 99

# init_from with lr = 0 keeps the loaded weights: the checkpoint after one step holds the adaptation.
adapt_deck() { # adapt_deck RUN KEYS
  TRAIN_SHARDS=shards5 train_deck "$1" epochs=1 warmup_epochs=0 batch_size_per_rank=4 lr=0 min_lr=0 max_steps=1 \
    "init_from='pre3.h5'" | sed "s/&model /\&model $2, /"
}
adapt_deck mean "use_mean_patch_embedding = .true." >mean.nml
expect_exit 0 "$SCDINO" mean.nml
expect_grep "pre3.h5: patch embedding of 3 channel\(s\) adapted to 5 \(use_mean_patch_embedding: their mean\)"
adapt_deck map "custom_embedding_map = 2, 0, 1, 1, 0" >map.nml
expect_exit 0 "$SCDINO" map.nml
expect_grep "pre3.h5: patch embedding of 3 channel\(s\) adapted to 5 \(custom_embedding_map\)"
cat >check.py <<'EOF'
import h5py, numpy as np
with h5py.File("pre3.h5", "r") as f:
    pre = {g: {k: f[g][k][()] for k in f[g]} for g in ("student", "teacher")}
name = "backbone.patch_embed.proj.weight"
for run, want in (("mean", lambda w: np.repeat(w.mean(axis=1, keepdims=True), 5, axis=1)),
                  ("map", lambda w: w[:, [2, 0, 1, 1, 0]])):
    with h5py.File(run + "/checkpoint.h5", "r") as f:
        got = f["student"][name][()]
        ref = want(pre["student"][name])
        assert got.shape == (16, 5, 4, 4), got.shape
        err = np.abs(got - ref).max() / np.abs(ref).max()
        assert err <= (1e-6 if run == "mean" else 0.0), (run, err)
        for k, v in pre["student"].items():
            if k != name and not k.startswith("head.last_layer"):
                assert np.array_equal(f["student"][k][()], v), (run, k)
        print(run, "patch embedding matches numpy, relative error %.2e" % err)
EOF
expect_exit 0 "$PYTHON3" check.py
expect_grep "mean patch embedding matches numpy"
expect_grep "map patch embedding matches numpy"

# features and attention with the 3-channel checkpoint on the 5-channel data.
cat >feat.nml <<'EOF'
&control calculation = 'features', run_dir = 'f' /
&data shard_dir = 'shards5' /
&model use_mean_patch_embedding = .true. /
&features checkpoint = 'pre3.h5', resize = 16 /
&attention images_per_class = 1, image_size = 24 /
EOF
expect_exit 0 "$SCDINO" feat.nml
expect_grep "patch embedding of 3 channel\(s\) adapted to 5"
sed 's/calculation = .features./calculation = '"'"'attention'"'"'/' feat.nml >att.nml
expect_exit 0 "$SCDINO" att.nml
nchecks=$((nchecks + 1))
[ -f f/attention.h5 ] && ls f/features_*.h5 >/dev/null 2>&1 || fail "no features or attention file"
# Without an adaptation the channel counts must agree.
sed '/&model/d' feat.nml >plain.nml
expect_exit 2 "$SCDINO" plain.nml
expect_grep "checkpoint pre3.h5 was trained on source channels 0, 1, 2, but data.channels selects 0, 1, 2, 3, 4"

# Bad maps.
sed 's/use_mean_patch_embedding = .true./custom_embedding_map = 0, 1/' feat.nml >short.nml
expect_exit 2 "$SCDINO" short.nml
expect_grep "&model custom_embedding_map has 2 entries, but 5 channel\(s\) are selected"
sed 's/use_mean_patch_embedding = .true./custom_embedding_map = 0, 1, 2, 3, 4/' feat.nml >range.nml
expect_exit 2 "$SCDINO" range.nml
expect_grep "&model custom_embedding_map\(4\) = 3, but the patch embedding of pre3.h5 has 3 channel\(s\) \(0 .. 2\)"
sed 's/use_mean_patch_embedding = .true./use_mean_patch_embedding = .true., custom_embedding_map = 0, 1, 2, 0, 1/' feat.nml >both.nml
expect_exit 2 "$SCDINO" both.nml
expect_grep "custom_embedding_map and use_mean_patch_embedding = .true. are two ways to adapt the patch embedding: set one"
finish
