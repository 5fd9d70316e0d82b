#!/bin/sh
# tests/cli/train_errors.sh - what training refuses and how it stops: incompatible checkpoints (key and
# shapes named, exit 3; the GELU form too), damaged checkpoints (exit 3), a non-finite loss (step and last good
# checkpoint named, exit 1), device = 'cuda' without a CUDA build (exit 2); and init_from: weights
# loaded exactly, epoch 0, fresh optimizer state.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
scratch train_errors
train_data shards

# A finished 1-epoch run to start from: 10 steps.
train_deck base epochs=1 warmup_epochs=0 batch_size_per_rank=4 >base.nml
expect_exit 0 "$SCDINO" base.nml

# restart with nothing there starts from scratch.
train_deck fresh epochs=1 warmup_epochs=0 batch_size_per_rank=4 restart=.true. max_steps=1 >fresh.nml
expect_exit 0 "$SCDINO" fresh.nml
expect_grep "restart: fresh/checkpoint.h5 does not exist; starting from scratch"

# Other out_dim: the first differing tensor with both shapes, and the key.
mkdir -p k && cp base/checkpoint.h5 k/ || exit 99
train_deck k epochs=2 warmup_epochs=0 batch_size_per_rank=4 restart=.true. | sed 's/out_dim = 64/out_dim = 128/' >k.nml
expect_exit 3 "$SCDINO" k.nml
expect_grep "checkpoint k/checkpoint.h5: tensor student/head.last_layer.weight_g has shape \[64, 1\] in the checkpoint, but the model of this deck needs \[128, 1\] \(key 'out_dim' is 64 in the checkpoint but 128 for this deck"
[ -e k/checkpoint.h5 ] && cmp -s k/checkpoint.h5 base/checkpoint.h5 || fail "the refused checkpoint was changed"

# Fewer channels (init_from): the patch embedding, and in_chans named.
train_deck c epochs=1 warmup_epochs=0 batch_size_per_rank=4 init_from="'base/checkpoint.h5'" | sed "s/train_fraction = 1.0/train_fraction = 1.0, channels = 0, 2/" >c.nml
expect_exit 3 "$SCDINO" c.nml
expect_grep "tensor student/backbone.patch_embed.proj.weight has shape \[16, 3, 4, 4\] in the checkpoint, but the model of this deck needs \[16, 2, 4, 4\] \(key 'in_chans' is 3 in the checkpoint but 2"

# Same shapes, other head count: only the key can tell.
train_deck h epochs=1 warmup_epochs=0 batch_size_per_rank=4 init_from="'base/checkpoint.h5'" | sed "s/num_heads = 2/num_heads = 4/" >h.nml
expect_exit 3 "$SCDINO" h.nml
expect_grep "does not fit the model of this deck: key 'num_heads' is 2 in the checkpoint but 4 for this deck"

# Same shapes, other GELU form: the key (files without it are 'none'); a 'tanh' run records its
# form, says it, and a deck of the exact form cannot restart from it.
train_deck g epochs=1 warmup_epochs=0 batch_size_per_rank=4 init_from="'base/checkpoint.h5'" | sed "s/num_heads = 2,/num_heads = 2, gelu_approximate = 'tanh',/" >g.nml
expect_exit 3 "$SCDINO" g.nml
expect_grep "does not fit the model of this deck: key 'gelu_approximate' is 'none' in the checkpoint but 'tanh' for this deck \(&model gelu_approximate\)"
train_deck gt epochs=2 warmup_epochs=0 batch_size_per_rank=4 max_steps=2 | sed "s/num_heads = 2,/num_heads = 2, gelu_approximate = 'tanh',/" >gt.nml
expect_exit 0 "$SCDINO" gt.nml
expect_grep 'norm_last_layer true; GELU tanh$'
out=$(h5dump -a /gelu_approximate gt/checkpoint.h5)
expect_grep '"tanh"'
# The forms differ by at most 4.7e-4: two steps leave the weights within 1e-5 of the exact form's
# (measured: 9e-8 of the student, 1e-9 of the teacher), and not equal to them.
train_deck ge epochs=2 warmup_epochs=0 batch_size_per_rank=4 max_steps=2 >ge.nml
expect_exit 0 "$SCDINO" ge.nml
nchecks=$((nchecks + 1))
if ! "$top_builddir/tests/fixtures/ckpt_compare" -r 1 -g 1e-5 -k 1 gt/checkpoint.h5 ge/checkpoint.h5 /student /teacher >cmp.out 2>&1; then
  fail "the tanh form's weights left the exact form's"
  sed 's/^/    | /' cmp.out >&2
fi
"$top_builddir/tests/fixtures/ckpt_compare" -r 1 -g 1e-9 -k 1 gt/checkpoint.h5 ge/checkpoint.h5 /student >/dev/null 2>&1 &&
  fail "the tanh and exact forms trained the same weights"
train_deck gt epochs=2 warmup_epochs=0 batch_size_per_rank=4 restart=.true. >gt2.nml
expect_exit 3 "$SCDINO" gt2.nml
expect_grep "key 'gelu_approximate' is 'tanh' in the checkpoint but 'none' for this deck"

# One block less: the extra tensor is named.
train_deck d epochs=1 warmup_epochs=0 batch_size_per_rank=4 init_from="'base/checkpoint.h5'" | sed "s/depth = 2/depth = 1/" >d.nml
expect_exit 3 "$SCDINO" d.nml
expect_grep "key 'depth' is 2 in the checkpoint but 1 for this deck"

# Damaged files: truncated, and not HDF5 at all.  Nothing is written over them.
mkdir -p t && head -c 20000 base/checkpoint.h5 >t/checkpoint.h5 || exit 99
train_deck t epochs=2 warmup_epochs=0 batch_size_per_rank=4 restart=.true. >t.nml
expect_exit 3 "$SCDINO" t.nml
expect_grep "checkpoint t/checkpoint.h5: .*(truncated or damaged|cannot read)"
nchecks=$((nchecks + 1))
[ "$(wc -c <t/checkpoint.h5)" = 20000 ] || fail "the truncated checkpoint was replaced"
mkdir -p g && echo "not a checkpoint" >g/checkpoint.h5
train_deck g epochs=2 warmup_epochs=0 batch_size_per_rank=4 restart=.true. >g.nml
expect_exit 3 "$SCDINO" g.nml
expect_grep "checkpoint g/checkpoint.h5: not a readable HDF5 file"
# An HDF5 file of another kind.
train_deck s epochs=1 warmup_epochs=0 batch_size_per_rank=4 init_from="'shards/manifest.h5'" >s.nml
expect_exit 3 "$SCDINO" s.nml
expect_grep "checkpoint shards/manifest.h5: format is 'scdino-shards', expected 'scdino-checkpoint'"

# init_from: with lr = 0 and a frozen teacher (momentum 1) the weights stay exactly those loaded;
# the run starts at epoch 0 with fresh optimizer state (2 steps taken by this run only).
train_deck i epochs=1 warmup_epochs=0 batch_size_per_rank=4 init_from="'base/checkpoint.h5'" lr=0 \
  min_lr=0 momentum_teacher=1.0 freeze_last_layer=0 max_steps=2 >i.nml
expect_exit 0 "$SCDINO" i.nml
expect_grep "init_from: student and teacher weights from base/checkpoint.h5 \(written at epoch 1\); optimizer state and centre start fresh at epoch 0"
expect_grep "stopped after 2 steps of this launch \(max_steps\) inside epoch 0"
nchecks=$((nchecks + 1))
"$top_builddir/tests/fixtures/ckpt_compare" -e base/checkpoint.h5 i/checkpoint.h5 /student /teacher >cmp.out 2>&1 ||
  { fail "init_from did not load the weights exactly"; sed 's/^/    | /' cmp.out >&2; }
out=$(h5dump -d /optimizer/step/backbone.cls_token i/checkpoint.h5; h5dump -d /optimizer/step/backbone.cls_token base/checkpoint.h5)
expect_grep "\(0\): 2$"
expect_grep "\(0\): 10$"
out=$(h5dump -a /epoch -a /iteration i/checkpoint.h5)
expect_grep "\(0\): 0$"

# Shards whose channel std is 1e-45 (normalised pixels would overflow) are refused before training,
# naming the manifest (exit 3).
mkdir -p nanshards || exit 99
train_data nanshards 1e-45
TRAIN_SHARDS=nanshards train_deck nanstd epochs=1 batch_size_per_rank=4 >nanstd.nml
expect_exit 3 "$SCDINO" nanstd.nml
expect_grep "error: nanshards/manifest\.h5: std of channel 0 is 1e-45, neither 0 nor in \[1e-06, 0\.5\]"

# A non-finite loss stops the run at its step and names the last good checkpoint: a NaN in the
# input batch (&debug nan_tensor = 'input') at the first step after the restart.
cp -r base nan || exit 99
train_deck nan epochs=2 warmup_epochs=0 batch_size_per_rank=4 restart=.true. |
  sed "s/&system /\&debug nan_at_step = 10, nan_tensor = 'input' \/\n\&system /" >nan.nml
expect_exit 1 "$SCDINO" nan.nml
expect_grep "error: non-finite loss at epoch 1, iteration 0 of 10 \(global step 10\) on 1 of 1 rank .*Last good checkpoint: nan/checkpoint.h5"
expect_grep "every weight is finite, so it arose in the forward pass \(input data or an overflowing activation\)"
if [ "$MPIEXEC" != none ]; then
  train_deck nan2 epochs=1 warmup_epochs=0 batch_size_per_rank=4 |
    sed "s/&system /\&debug nan_at_step = 0, nan_tensor = 'input', nan_rank = 1 \/\n\&system /" >nan2.nml
  expect_exit 1 $MPIEXEC -n 2 "$SCDINO" nan2.nml
  expect_grep "error: non-finite loss at epoch 0, iteration 0 of 5 \(global step 0\) on 1 of 2 ranks .*Last good checkpoint: none"
fi

# device = 'cuda' without the CUDA backend.
if "$SCDINO" --version | grep -q "CUDA *: not built"; then
  train_deck base epochs=1 | sed "s/&system /\&system device = 'cuda', /" >cuda.nml
  expect_exit 2 "$SCDINO" cuda.nml
  expect_grep "device = 'cuda', but this scdino was built without the CUDA backend"
fi
ls -a base k t nan i | grep -q '\.tmp\.' && fail "temporary files left behind"
finish
