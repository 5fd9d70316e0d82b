#!/bin/sh
# tests/cli/export_import.sh - examples/export_pytorch.py and import_pytorch.py: checkpoint.h5 -> .pth in
# upstream's layout (student keys with 'module.', teacher without, AdamW state that PyTorch's own
# AdamW loads, dino_loss.center, epoch, args) -> .h5 again gives the same tensors bit for bit and
# every hyperparameter (num_heads from args.num_heads: the custom model's 2; the precedence
# --num-heads > args.num_heads > args.arch > embed_dim / 64; gelu_approximate), in a version 2 file
# stored as scdino stores its own (fixed-length strings, Fletcher-32 chunks, no dense storage);
# scdino's features of the imported file equal those of the original, and scdino starts from it
# (init_from).  Skipped without torch/h5py.
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
sys.path.insert(0, sys.argv[1])
from import_pytorch import load  # weights only: nothing in the file runs
ck = load("base.pth")
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
expect_exit 0 "$PYTHON3" check.py "$top_srcdir/examples"
expect_grep "pth layout ok"

# heads cannot be read from shapes: the import takes args.num_heads (2), and the model is the same
expect_exit 0 "$PYTHON3" "$top_srcdir/examples/import_pytorch.py" base.pth back.h5
expect_grep "back.h5: 38 tensors per network, custom p4 D=16 depth 2 heads 2, 3 channels, out_dim 64, epoch 1"
nchecks=$((nchecks + 1))
"$top_builddir/tests/fixtures/ckpt_compare" -e base/checkpoint.h5 back.h5 /student /teacher /dino_loss >cmp.out 2>&1 ||
  { fail "export + import changed the tensors"; sed 's/^/    | /' cmp.out >&2; }
for a in version patch_size in_chans embed_dim depth num_heads mlp_hidden pos_grid out_dim head_hidden_dim \
         head_bottleneck_dim head_nlayers norm_last_layer channels epoch drop_path_rate gelu_approximate \
         seed epochs world_size batch_size_per_rank local_crops_number global_size local_size; do
  nchecks=$((nchecks + 1))
  x=$(h5dump -a "/$a" base/checkpoint.h5 | grep '(0)')
  y=$(h5dump -a "/$a" back.h5 | grep '(0)')
  [ -n "$x" ] && [ "$x" = "$y" ] || fail "attribute $a: $x vs $y"
done

# Version 2, stored as scdino stores its own: the tensors' types, chunks and filters (Fletcher-32)
# are those of scdino's checkpoint, no string is variable-length (global heap), and no link or
# attribute is in dense storage (fractal heap, B-tree).
nchecks=$((nchecks + 1))
h5dump -p -H -g /student base/checkpoint.h5 | sed 1d >props.base
h5dump -p -H -g /student back.h5 | sed 1d >props.back
grep -q 'CHECKSUM FLETCHER32' props.back && cmp -s props.base props.back ||
  { fail "the imported tensors are not stored as scdino stores them"; diff props.base props.back | head -20 >&2; }
nchecks=$((nchecks + 1))
! h5dump -p -H back.h5 | grep -q H5T_VARIABLE || fail "back.h5 has variable-length strings"
nchecks=$((nchecks + 1))
dense=$(h5stat back.h5 | sed -n '/^	Groups:$/,/^	Chunked datasets:$/p' | grep -E 'B-tree/List|Heap' | grep -v ': 0$')
[ -z "$dense" ] || fail "back.h5 has links or attributes in dense storage: $dense"

# scdino computes the same features from the imported file as from the original.
for c in base/checkpoint.h5 back.h5; do
  r=feat_$(basename "$c" .h5)
  printf "&control calculation = 'features', run_dir = '%s' /\n&data shard_dir = 'shards' /\n&features checkpoint = '%s', resize = 16 /\n" \
    "$r" "$c" >"$r.nml"
  expect_exit 0 "$SCDINO" "$r.nml"
done
nchecks=$((nchecks + 1))
h5diff feat_checkpoint/features_0000.h5 feat_back/features_0000.h5 /features /features >/dev/null ||
  fail "features of back.h5 differ from those of base/checkpoint.h5"

# The precedence of num_heads: --num-heads, args.num_heads, args.arch, embed_dim / 64; GELU from args.
cat >variants.py <<'EOF'
import sys, torch
sys.path.insert(0, sys.argv[1])
from import_pytorch import load  # weights only: nothing in the file runs
ck = load("base.pth")
a = ck["args"]
a.gelu_approximate = "tanh"
torch.save(ck, "tanh.pth")
a.gelu_approximate = "relu"
torch.save(ck, "relu.pth")
del a.gelu_approximate, a.num_heads
torch.save(ck, "noheads.pth")
a.arch = "vit_small"
torch.save(ck, "small.pth")
EOF
expect_exit 0 "$PYTHON3" variants.py "$top_srcdir/examples"
expect_exit 0 "$PYTHON3" "$top_srcdir/examples/import_pytorch.py" --num-heads 4 base.pth h4.h5
expect_grep "heads 4,"
expect_exit 0 "$PYTHON3" "$top_srcdir/examples/import_pytorch.py" noheads.pth h1.h5
expect_grep "heads 1,"
expect_exit 3 "$PYTHON3" "$top_srcdir/examples/import_pytorch.py" small.pth h6.h5
expect_grep "^import_pytorch.py: small.pth: num_heads 6 does not divide embed_dim 16; give --num-heads$"
expect_exit 2 "$PYTHON3" "$top_srcdir/examples/import_pytorch.py" --num-heads 3 base.pth h3.h5
expect_grep "^import_pytorch.py: base.pth: num_heads 3 does not divide embed_dim 16$"
expect_exit 0 "$PYTHON3" "$top_srcdir/examples/import_pytorch.py" tanh.pth tanh.h5
expect_exit 3 "$PYTHON3" "$top_srcdir/examples/import_pytorch.py" relu.pth relu.h5
expect_grep "^import_pytorch.py: relu.pth: args.gelu_approximate is 'relu', not 'none' or 'tanh'$"
attr_is() { # attr_is FILE NAME VALUE (as h5dump prints it)
  nchecks=$((nchecks + 1))
  h5dump -a "/$2" "$1" | grep -q "(0): $3\$" || fail "$1: attribute $2 is not $3"
}
attr_is h4.h5 num_heads 4
attr_is h1.h5 num_heads 1
attr_is tanh.h5 gelu_approximate '"tanh"'
attr_is h1.h5 gelu_approximate '"none"'
nchecks=$((nchecks + 1))
ls h3.h5 h6.h5 relu.h5 ./*.tmp 2>/dev/null && fail "a refused import left a file"

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
