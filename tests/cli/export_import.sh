#!/bin/sh
# tests/cli/export_import.sh - examples/export_pytorch.py and import_pytorch.py: checkpoint.h5 -> .pth in
# upstream's layout (student keys with 'module.', teacher without, AdamW state that PyTorch's own
# AdamW loads, dino_loss.center, epoch, args) -> .h5 again gives the same tensors bit for bit and
# hyperparameters, and scdino starts from the imported file (init_from).  Skipped without torch/h5py.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
[ "$PYTHON3" = none ] && skip "no python3 with h5py"
"$PYTHON3" -c "import torch, h5py, numpy" 2>/dev/null || skip "python3 has no torch"
scratch export_import
train_data shards
train_deck base epochs=1 warmup_epochs=0 batch_size_per_rank=4 >base.nml
expect_exit 0 "$SCDINO" base.nml

expect_exit 0 "$PYTHON3" "$top_srcdir/examples/export_pytorch.py" base/checkpoint.h5 base.pth
expect_grep "base.pth: student and teacher \(38 tensors each\), epoch 1, optimizer, dino_loss.center"
cat >check.py <<'EOF'
import sys, torch, h5py, numpy as np
ck = torch.load("base.pth", map_location="cpu", **({"weights_only": False} if "weights_only" in torch.load.__code__.co_varnames else {}))
s, t = ck["student"], ck["teacher"]
assert all(k.startswith("module.backbone.") or k.startswith("module.head.") for k in s), list(s)[:3]
assert all(k.startswith("backbone.") or k.startswith("head.") for k in t), list(t)[:3]
assert {k[len("module."):] for k in s} == set(t)
# named_parameters() order of DINO's ViT and head
order = list(t)
assert order[:4] == ["backbone.cls_token", "backbone.pos_embed", "backbone.patch_embed.proj.weight",
                     "backbone.patch_embed.proj.bias"], order[:4]
assert order[4:8] == ["backbone.blocks.0.norm1.weight", "backbone.blocks.0.norm1.bias",
                      "backbone.blocks.0.attn.qkv.weight", "backbone.blocks.0.attn.qkv.bias"], order[4:8]
assert order[-2:] == ["head.last_layer.weight_g", "head.last_layer.weight_v"], order[-2:]
assert tuple(t["backbone.patch_embed.proj.weight"].shape) == (16, 3, 4, 4)
assert tuple(ck["dino_loss"]["center"].shape) == (1, 64)
assert ck["epoch"] == 1 and ck["args"].embed_dim == 16 and ck["args"].norm_last_layer is True
assert ck["args"].gelu_approximate == "none", ck["args"].gelu_approximate
assert ck["args"].selected_channels == [0, 1, 2]
with h5py.File("base/checkpoint.h5", "r") as f:
    for k, v in t.items():
        assert np.array_equal(v.numpy(), f["teacher/" + k][()]), k
# PyTorch's AdamW accepts the optimizer state for upstream's parameter groups.
params = {k: torch.nn.Parameter(v.clone()) for k, v in t.items()}
train = [k for k in order if k != "head.last_layer.weight_g"]
reg = [params[k] for k in train if not (k.endswith(".bias") or params[k].ndim == 1)]
noreg = [params[k] for k in train if k.endswith(".bias") or params[k].ndim == 1]
opt = torch.optim.AdamW([{"params": reg}, {"params": noreg, "weight_decay": 0.0}])
opt.load_state_dict(ck["optimizer"])
st = opt.state[params["backbone.pos_embed"]]
with h5py.File("base/checkpoint.h5", "r") as f:
    assert np.array_equal(st["exp_avg"].numpy(), f["optimizer/exp_avg/backbone.pos_embed"][()])
    assert int(st["step"]) == int(f["optimizer/step/backbone.pos_embed"][()]) == 10
# weight_v was frozen for the whole epoch (freeze_last_layer = 1): no state, as in PyTorch
assert len(opt.state) == len(train) - 1 and params["head.last_layer.weight_v"] not in opt.state
print("pth layout ok")
EOF
expect_exit 0 "$PYTHON3" check.py
expect_grep "pth layout ok"

expect_exit 0 "$PYTHON3" "$top_srcdir/examples/import_pytorch.py" base.pth back.h5
expect_grep "back.h5: 38 tensors per network, custom p4 D=16 depth 2 heads 1, 3 channels, out_dim 64, epoch 1"
# heads cannot be read from shapes: with --num-heads the import matches the model exactly
expect_exit 0 "$PYTHON3" "$top_srcdir/examples/import_pytorch.py" --num-heads 2 base.pth back.h5
expect_grep "heads 2"
nchecks=$((nchecks + 1))
"$top_builddir/tests/fixtures/ckpt_compare" -e base/checkpoint.h5 back.h5 /student /teacher /dino_loss >cmp.out 2>&1 ||
  { fail "export + import changed the tensors"; sed 's/^/    | /' cmp.out >&2; }
for a in patch_size in_chans embed_dim depth num_heads mlp_hidden pos_grid out_dim head_hidden_dim \
         head_bottleneck_dim head_nlayers norm_last_layer channels epoch; do
  nchecks=$((nchecks + 1))
  x=$(h5dump -a "/$a" base/checkpoint.h5 | grep '(0)')
  y=$(h5dump -a "/$a" back.h5 | grep '(0)')
  [ -n "$x" ] && [ "$x" = "$y" ] || fail "attribute $a: $x vs $y"
done

# scdino starts from the imported weights.
train_deck ft epochs=1 warmup_epochs=0 batch_size_per_rank=4 init_from="'back.h5'" max_steps=2 >ft.nml
expect_exit 0 "$SCDINO" ft.nml
expect_grep "init_from: student and teacher weights from back.h5 \(written at epoch 1\)"
# ... and refuses it for a restart (no optimizer state).
mkdir -p rs && cp back.h5 rs/checkpoint.h5 || exit 99
train_deck rs epochs=2 warmup_epochs=0 batch_size_per_rank=4 restart=.true. >rs.nml
expect_exit 3 "$SCDINO" rs.nml
expect_grep "holds weights but no training state"
finish
