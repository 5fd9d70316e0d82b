#!/bin/sh
# tests/hostile/hostile_python.sh - the Python tools of examples/ (import_pytorch.py,
# export_pytorch.py, plot_run.py, plot_study.py) on hostile and damaged input.  A .pth whose args
# (or whole content) reduces to os.system is refused with exit 3 and the command never runs (its
# marker file stays absent), in the zip and in the legacy format; a truncated, garbage, junk-zip,
# TorchScript or HDF5 file as .pth, a missing or integer tensor, a directory, a missing file, a
# foreign or incomplete HDF5 file, a log, features, kNN, attention or study file lacking what the
# plot reads, and an output that is the input (also through a symlink; the input stays
# unchanged) each end with their exit status (1 runtime, 2 arguments, 3 bad input), exactly one
# line on stderr naming the file, and no traceback.  A DINO-style checkpoint (argparse.Namespace
# args, optimizer state, fp16 scaler None) still imports, as version 2 with args.num_heads, and
# exports again.  Everything is made here with torch and h5py: no scdino run.  Skipped (77)
# without torch, h5py or matplotlib.
. "$top_srcdir/tests/lib.sh"
[ "$PYTHON3" = none ] && skip "no python3 with h5py"
"$PYTHON3" -c "import torch, h5py, numpy, matplotlib" 2>/dev/null || skip "python3 has no torch or matplotlib"
scratch hostile_python
ex="$top_srcdir/examples"

# py_case EXIT REGEX SCRIPT ARGS...: exit status EXIT, exactly one line on stderr, matching REGEX
# (which names the file), and no traceback anywhere.
py_case() {
  want=$1 re=$2 script=$3
  shift 3
  nchecks=$((nchecks + 1))
  "$PYTHON3" "$ex/$script" "$@" >case.out 2>case.err </dev/null
  got=$?
  n=$(wc -l <case.err)
  if [ "$got" != "$want" ] || [ "$n" != 1 ] || ! grep -Eq -e "$re" case.err || grep -q Traceback case.out case.err; then
    fail "$script $*: exit $got (wanted $want), $n line(s) on stderr (wanted 1 matching /$re/)"
    sed 's/^/    | /' case.err >&2
  fi
}

cat >mk.py <<'EOF'
import argparse, collections, os, pickle, random, zipfile
import h5py, numpy as np, torch

class Shell:
    """What a hostile .pth holds: unpickling it runs a shell command."""
    def __init__(self, marker): self.marker = marker
    def __reduce__(self): return (os.system, ("touch " + os.path.abspath(self.marker),))

g = torch.Generator().manual_seed(1)
D, C, p, G, M, Hd, B, K = 16, 3, 4, 2, 32, 32, 16, 64
shapes = {"backbone.cls_token": (1, 1, D), "backbone.pos_embed": (1, 1 + G * G, D),
          "backbone.patch_embed.proj.weight": (D, C, p, p), "backbone.patch_embed.proj.bias": (D,),
          "backbone.blocks.0.norm1.weight": (D,), "backbone.blocks.0.norm1.bias": (D,),
          "backbone.blocks.0.attn.qkv.weight": (3 * D, D), "backbone.blocks.0.attn.qkv.bias": (3 * D,),
          "backbone.blocks.0.attn.proj.weight": (D, D), "backbone.blocks.0.attn.proj.bias": (D,),
          "backbone.blocks.0.norm2.weight": (D,), "backbone.blocks.0.norm2.bias": (D,),
          "backbone.blocks.0.mlp.fc1.weight": (M, D), "backbone.blocks.0.mlp.fc1.bias": (M,),
          "backbone.blocks.0.mlp.fc2.weight": (D, M), "backbone.blocks.0.mlp.fc2.bias": (D,),
          "backbone.norm.weight": (D,), "backbone.norm.bias": (D,),
          "head.mlp.0.weight": (Hd, D), "head.mlp.0.bias": (Hd,), "head.mlp.2.weight": (Hd, Hd),
          "head.mlp.2.bias": (Hd,), "head.mlp.4.weight": (B, Hd), "head.mlp.4.bias": (B,),
          "head.last_layer.weight_g": (K, 1), "head.last_layer.weight_v": (K, B)}
teacher = collections.OrderedDict((k, torch.randn(s, generator=g)) for k, s in shapes.items())
teacher["head.last_layer.weight_g"].fill_(1)

def ckpt(**change):
    """What DINO's main_dino.py saves, with `change` applied."""
    ck = {"student": collections.OrderedDict(("module." + k, v.clone()) for k, v in teacher.items()),
          "teacher": teacher, "epoch": 5, "fp16_scaler": None,
          "optimizer": {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.zeros(3)}},
                        "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.04,
                                          "amsgrad": False, "foreach": None, "params": [0]}]},
          "dino_loss": collections.OrderedDict(center=torch.zeros(1, K)),
          "args": argparse.Namespace(arch="vit_small", patch_size=p, num_heads=2, norm_last_layer=True,
                                     drop_path_rate=0.1, selected_channels=[0, 1, 2], out_dim=K,
                                     local_crops_scale=(0.05, 0.4), output_dir="run", seed=0)}
    ck.update(change)
    return ck

torch.save(ckpt(), "good.pth")
bad_args = ckpt()["args"]
bad_args.evil = Shell("PWNED_args")
torch.save(ckpt(args=bad_args), "evil_args.pth")
torch.save(Shell("PWNED_whole"), "evil_whole.pth")
torch.save(ckpt(args=Shell("PWNED_legacy")), "evil_legacy.pth", _use_new_zipfile_serialization=False)
data = open("good.pth", "rb").read()
open("trunc.pth", "wb").write(data[: len(data) // 2])
open("garbage.pth", "wb").write(bytes(random.Random(1).getrandbits(8) for _ in range(4096)))
with zipfile.ZipFile("junk.pth", "w") as z:
    z.writestr("archive/data.pkl", b"\x80\x02junk")
    z.writestr("archive/version", b"3\n")
torch.jit.script(torch.nn.Linear(2, 2)).save("script.pth")
t = collections.OrderedDict(teacher)
del t["backbone.pos_embed"]
torch.save(ckpt(teacher=t, student=t), "missing.pth")
t = collections.OrderedDict(teacher)
t["backbone.norm.bias"] = torch.zeros(D, dtype=torch.int64)
torch.save(ckpt(teacher=t, student=t), "inttensor.pth")

# A foreign HDF5 file, and the plot scripts' inputs with one dataset missing each.
with h5py.File("foreign.h5", "w") as f:
    f.attrs["format"] = "scdino-features"
    f["features"] = np.zeros((4, 2), np.float32)
os.makedirs("run/plots", exist_ok=True)
with h5py.File("run/features_0001.h5", "w") as f:
    f["features"] = np.random.default_rng(0).normal(size=(12, 4)).astype(np.float32)
    f["class_names"] = np.array([b"a", b"b"])
with h5py.File("run/knn.h5", "w") as f:
    f["k"] = np.array([1, 3])
    f["class_names"] = np.array([b"a", b"b"])
with h5py.File("run/attention.h5", "w") as f:
    f.attrs["sizes"] = np.array([8])
    f.attrs["patch_size"] = 4
    f["labels"] = np.array([0])
open("run/log.txt", "w").write('{"epoch": 0, "train_loss": 1.0}\n{"epoch": 1, "train_loss": \n')
os.makedirs("study/plots", exist_ok=True)
with h5py.File("study/study.h5", "w") as f:
    f["name"] = np.array([b"all", b"dapi"])
    f["channel_set"] = np.array([b"0,1", b"1"])
    f["k"] = np.array([1, 3])
    f["trained/top1"] = np.array([[50.0, 60.0], [40.0, 45.0]])
os.makedirs("nostudy", exist_ok=True)
with h5py.File("nostudy/study.h5", "w") as f:
    f["name"] = np.array([b"all"])
    f["k"] = np.array([1])
EOF
"$PYTHON3" mk.py >mk.out 2>&1 || { sed 's/^/    | /' mk.out; echo "could not make the inputs"; exit 99; }

# ---- import_pytorch.py
py_case 3 "^import_pytorch.py: evil_args.pth: refused: .*Unsupported global.*(posix|os)[.:]system" import_pytorch.py evil_args.pth o.h5
py_case 3 "^import_pytorch.py: evil_whole.pth: refused: .*Unsupported global" import_pytorch.py evil_whole.pth o.h5
py_case 3 "^import_pytorch.py: evil_legacy.pth: refused: .*Unsupported global" import_pytorch.py evil_legacy.pth o.h5
nchecks=$((nchecks + 1))
ls PWNED_* 2>/dev/null && fail "a refused .pth ran its command"
py_case 3 "^import_pytorch.py: trunc.pth: cannot read" import_pytorch.py trunc.pth o.h5
py_case 3 "^import_pytorch.py: garbage.pth: cannot read it as a PyTorch checkpoint" import_pytorch.py garbage.pth o.h5
py_case 3 "^import_pytorch.py: junk.pth: cannot read it as a PyTorch checkpoint" import_pytorch.py junk.pth o.h5
py_case 3 "^import_pytorch.py: script.pth: a TorchScript archive, not a checkpoint" import_pytorch.py script.pth o.h5
py_case 3 "^import_pytorch.py: foreign.h5: cannot read it as a PyTorch checkpoint" import_pytorch.py foreign.h5 o.h5
py_case 3 "^import_pytorch.py: missing.pth: tensor backbone.pos_embed is missing$" import_pytorch.py missing.pth o.h5
py_case 3 "^import_pytorch.py: inttensor.pth: tensor backbone.norm.bias of the student holds torch.int64" \
  import_pytorch.py inttensor.pth o.h5
py_case 3 "^import_pytorch.py: run: not a regular file \(a directory\)$" import_pytorch.py run o.h5
py_case 3 "^import_pytorch.py: none.pth: no such file$" import_pytorch.py none.pth o.h5
py_case 2 "^import_pytorch.py: the following arguments are required: output \(see --help\)$" import_pytorch.py good.pth
py_case 2 "^import_pytorch.py: --channels 'x' is not a list of channel numbers$" import_pytorch.py --channels x good.pth o.h5
cp good.pth good.orig || exit 99
py_case 2 "^import_pytorch.py: good.pth: is also the input good.pth" import_pytorch.py good.pth good.pth
ln -s good.pth link.pth
py_case 2 "^import_pytorch.py: link.pth: is also the input good.pth" import_pytorch.py good.pth link.pth
nchecks=$((nchecks + 1))
cmp -s good.pth good.orig && [ -L link.pth ] || fail "the input was changed"
nchecks=$((nchecks + 1))
[ -e o.h5 ] && fail "a refused import wrote o.h5"
ls ./*.tmp 2>/dev/null && fail "temporary files left behind"
# The DINO-style checkpoint imports (version 2, args.num_heads) and exports again.
expect_exit 0 "$PYTHON3" "$ex/import_pytorch.py" good.pth good.h5
expect_grep "good.h5: 26 tensors per network, custom p4 D=16 depth 1 heads 2, 3 channels, out_dim 64, epoch 5"
cat >check.py <<'EOF'
import h5py
with h5py.File("good.h5", "r") as f:
    assert f.attrs["version"] == 2 and f.attrs["num_heads"] == 2 and f.attrs["format"] == b"scdino-checkpoint"
    assert f["student/backbone.pos_embed"].fletcher32 and f["dino_loss/center"].shape == (1, 64)
print("good.h5 ok")
EOF
expect_exit 0 "$PYTHON3" check.py
expect_grep "good.h5 ok"
expect_exit 0 "$PYTHON3" "$ex/export_pytorch.py" good.h5 again.pth
expect_grep "again.pth: student and teacher \(26 tensors each\), epoch 5"

# ---- export_pytorch.py
cp good.h5 noteacher.h5 && "$PYTHON3" -c 'import h5py; f = h5py.File("noteacher.h5", "a"); del f["teacher"]' || exit 99
head -c 3000 good.h5 >trunc.h5
py_case 3 "^export_pytorch.py: foreign.h5: not an scdino checkpoint \(format 'scdino-features'\)$" export_pytorch.py foreign.h5 o.pth
py_case 3 "^export_pytorch.py: noteacher.h5: no /teacher group$" export_pytorch.py noteacher.h5 o.pth
py_case 3 "^export_pytorch.py: trunc.h5: cannot read" export_pytorch.py trunc.h5 o.pth
py_case 3 "^export_pytorch.py: good.pth: cannot read it as an HDF5 file" export_pytorch.py good.pth o.pth
py_case 3 "^export_pytorch.py: run: not a regular file \(a directory\)$" export_pytorch.py run o.pth
py_case 3 "^export_pytorch.py: none.h5: no such file$" export_pytorch.py none.h5 o.pth
py_case 2 "^export_pytorch.py: good.h5: is also the input good.h5" export_pytorch.py good.h5 good.h5
nchecks=$((nchecks + 1))
[ -e o.pth ] && fail "a refused export wrote o.pth"

# ---- plot_run.py (log.txt, the features, knn.h5 and attention.h5 are each damaged)
py_case 3 "^plot_run.py: run/log.txt: line 2 is not JSON" plot_run.py run
mv run/log.txt run/log.bad
if "$PYTHON3" -c 'import sklearn' 2>/dev/null || "$PYTHON3" -c 'import umap' 2>/dev/null; then
  py_case 3 "^plot_run.py: run/features_0001.h5: no dataset /labels" plot_run.py run
  mv run/features_0001.h5 run/features.bad
  py_case 3 "^plot_run.py: run/features.bad: no dataset /labels" plot_run.py run --features run/features.bad
else
  echo "note: neither scikit-learn nor umap-learn: the features cases are left out"
  mv run/features_0001.h5 run/features.bad
fi
py_case 3 "^plot_run.py: run/knn.h5: no dataset /trained/confusion" plot_run.py run
mv run/knn.h5 run/knn.bad
py_case 3 "^plot_run.py: run/attention.h5: no dataset /size_8/maps" plot_run.py run
head -c 100 run/knn.bad >run/attention.h5
py_case 3 "^plot_run.py: run/attention.h5: cannot read the attention maps" plot_run.py run
rm run/attention.h5
py_case 1 "^plot_run.py: run: nothing to draw" plot_run.py run
py_case 3 "^plot_run.py: none.h5: no such file$" plot_run.py run --features none.h5
py_case 3 "^plot_run.py: good.pth: not a run directory$" plot_run.py good.pth
cp run/features.bad run/plots/embedding.png || exit 99
py_case 2 "^plot_run.py: run/plots/embedding.png: is also the input" plot_run.py run --features run/plots/embedding.png
nchecks=$((nchecks + 1))
cmp -s run/features.bad run/plots/embedding.png || fail "plot_run.py changed its input"

# ---- plot_study.py
py_case 3 "^plot_study.py: nostudy/study.h5: no /trained group" plot_study.py nostudy
py_case 3 "^plot_study.py: run/study.h5: no such file" plot_study.py run
py_case 2 "^plot_study.py: k = 7 is not one of the study's k \(1, 3\)$" plot_study.py study --k 7
ln -s ../study.h5 study/plots/study.png
py_case 2 "^plot_study.py: study/plots/study.png: is also the input study/study.h5" plot_study.py study
rm study/plots/study.png
expect_exit 0 "$PYTHON3" "$ex/plot_study.py" study
nchecks=$((nchecks + 1))
[ -s study/plots/study.png ] && [ ! -L study/plots/study.png ] || fail "study/plots/study.png not drawn"
finish
