#!/usr/bin/env python3
"""import_pytorch.py - a DINO/scDINO PyTorch checkpoint (.pth) as an scdino checkpoint (.h5).

    python3 examples/import_pytorch.py sc-ViT_checkpoint0100_vitsmall16.pth vits16.h5

The result holds /student and /teacher with the state_dict names without 'module.' (what
&training init_from, &features checkpoint and the attention maps read), /dino_loss/center when the
.pth has it, and root attributes: format, version, epoch and the model hyperparameters.  The
hyperparameters come from the tensor shapes (patch size, channels, width, depth, MLP width,
position grid, head widths and layers, out_dim) and from the checkpoint's 'args' where shapes
cannot tell: num_heads (args.arch: vit_tiny 3, vit_small 6, vit_base 12; else --num-heads, else
embed_dim / 64, the head width of every DINO ViT), norm_last_layer (args, else whether every
weight_g is 1), the selected channels (args.selected_channels, else 0..in_chans-1).
Accepted inputs: a full DINO checkpoint ({'student', 'teacher', ...}; both networks are taken),
or a bare state_dict of one network (then written as both student and teacher).  The optimizer
state is not converted: the result starts fine-tuning (init_from), not a restart.  Needs torch and
h5py.
"""
import argparse
import math
import os
import sys
import tempfile

try:
    import h5py
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover - depends on the installation
    sys.exit(f"import_pytorch.py: needs h5py, numpy and torch ({e})")

FORMAT = "scdino-checkpoint"
# Version 1: the layout without scdino's checksums (h5py cannot keep every attribute in the
# checksummed object header); scdino reads versions 1 and 2 alike.
VERSION = 1
HEADS = {"vit_tiny": 3, "deit_tiny": 3, "vit_small": 6, "deit_small": 6, "vit_base": 12, "deit_base": 12}


def fail(msg):
    sys.exit(f"import_pytorch.py: {msg}")


def load(path):
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except TypeError:  # torch without the weights_only argument
        return torch.load(path, map_location="cpu")


def clean(sd, what):
    """state_dict without 'module.' prefixes, as float32 numpy arrays."""
    out = {}
    for k, v in sd.items():
        if not torch.is_tensor(v):
            continue
        while k.startswith("module."):
            k = k[len("module."):]
        out[k] = v.detach().to(torch.float32).cpu().numpy()
    if not any(k.startswith("backbone.") for k in out):
        # A bare backbone (e.g. DINO's *_pretrain.pth): put it where the model expects it.
        if "patch_embed.proj.weight" in out:
            out = {"backbone." + k: v for k, v in out.items()}
        else:
            fail(f"the {what} state_dict has no ViT backbone tensors (patch_embed.proj.weight)")
    return out


def hyperparameters(sd, args, num_heads):
    def need(name):
        if name not in sd:
            fail(f"tensor {name} is missing")
        return sd[name]
    w = need("backbone.patch_embed.proj.weight")
    D, C, p, p2 = w.shape
    if p != p2:
        fail(f"non-square patches {p}x{p2}")
    depth = 1 + max(int(k.split(".")[2]) for k in sd if k.startswith("backbone.blocks."))
    npos = need("backbone.pos_embed").shape[1] - 1
    grid = int(round(math.sqrt(npos)))
    if grid * grid != npos:
        fail(f"pos_embed has {npos} patch positions, not a square grid")
    hp = {"patch_size": p, "in_chans": C, "embed_dim": D, "depth": depth,
          "mlp_hidden": need("backbone.blocks.0.mlp.fc1.weight").shape[0], "pos_grid": grid}
    arch = str(getattr(args, "arch", "") or "")
    if num_heads:
        hp["num_heads"] = num_heads
    elif arch in HEADS:
        hp["num_heads"] = HEADS[arch]
    else:
        hp["num_heads"] = max(1, D // 64)
    if D % hp["num_heads"]:
        fail(f"num_heads {hp['num_heads']} does not divide embed_dim {D}; give --num-heads")
    hp["arch"] = arch if arch in ("vit_tiny", "vit_small", "vit_base") and hp["num_heads"] == HEADS[arch] else "custom"
    if "head.last_layer.weight_v" in sd:
        v = sd["head.last_layer.weight_v"]
        hp["out_dim"], hp["head_bottleneck_dim"] = v.shape
        lin = sorted(int(k.split(".")[2]) for k in sd if k.startswith("head.mlp.") and k.endswith(".weight")
                     and k.count(".") == 3)
        if lin:
            hp["head_nlayers"] = len(lin)
            hp["head_hidden_dim"] = sd["head.mlp.0.weight"].shape[0] if len(lin) > 1 else 2048
        elif "head.mlp.weight" in sd:
            hp["head_nlayers"], hp["head_hidden_dim"] = 1, 2048
        else:
            fail("the head has a last layer but no MLP")
        nll = getattr(args, "norm_last_layer", None)
        if nll is None and "head.last_layer.weight_g" in sd:
            nll = bool(np.all(sd["head.last_layer.weight_g"] == 1))
        hp["norm_last_layer"] = int(bool(nll if nll is not None else True))
    hp["drop_path_rate"] = float(getattr(args, "drop_path_rate", 0.1) or 0.0)
    return hp


def write(dst, student, teacher, hp, channels, epoch, center):
    tmp = None
    d = os.path.dirname(os.path.abspath(dst))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(dst) + ".", suffix=".tmp", dir=d)
    os.close(fd)
    try:
        with h5py.File(tmp, "w") as f:
            f.attrs["format"] = FORMAT
            f.attrs["version"] = np.int64(VERSION)
            f.attrs["epoch"] = np.int64(epoch)
            for k, v in hp.items():
                f.attrs[k] = v if isinstance(v, str) else (np.float64(v) if isinstance(v, float) else np.int64(v))
            f.attrs["channels"] = np.asarray(channels, dtype=np.int64)
            f.attrs["imported_from"] = "PyTorch checkpoint (examples/import_pytorch.py)"
            for g, sd in (("student", student), ("teacher", teacher)):
                grp = f.create_group(g)
                for k, v in sd.items():
                    grp.create_dataset(k, data=v.astype(np.float32))
            if center is not None:
                f.create_dataset("dino_loss/center", data=center.reshape(1, -1).astype(np.float32))
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, dst)
        tmp = None
    finally:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("pth", help="DINO/scDINO checkpoint (.pth)")
    p.add_argument("output", help="scdino checkpoint to write (.h5)")
    p.add_argument("--num-heads", type=int, default=0, help="attention heads (when args.arch cannot tell)")
    p.add_argument("--channels", default="", help="selected source channels, e.g. 0,1,2,3,4")
    a = p.parse_args()
    ck = load(a.pth)
    if not isinstance(ck, dict):
        fail(f"{a.pth}: not a checkpoint dictionary")
    args = ck.get("args", argparse.Namespace())
    if "student" in ck or "teacher" in ck:
        student = clean(ck.get("student", ck.get("teacher")), "student")
        teacher = clean(ck.get("teacher", ck.get("student")), "teacher")
    else:
        student = teacher = clean(ck.get("state_dict", ck.get("model", ck)), "model")
    if set(student) != set(teacher):
        fail("student and teacher hold different tensors")
    hp = hyperparameters(student, args, a.num_heads)
    if a.channels:
        channels = [int(c) for c in a.channels.split(",")]
    else:
        sel = getattr(args, "selected_channels", None)
        channels = [int(c) for c in sel] if sel is not None else list(range(hp["in_chans"]))
    if len(channels) != hp["in_chans"]:
        fail(f"{len(channels)} channels given, the patch embedding has {hp['in_chans']}")
    center = None
    if isinstance(ck.get("dino_loss"), dict) and "center" in ck["dino_loss"]:
        center = ck["dino_loss"]["center"].detach().cpu().numpy()
    epoch = int(ck.get("epoch", 0)) if not torch.is_tensor(ck.get("epoch")) else int(ck["epoch"])
    write(a.output, student, teacher, hp, channels, epoch, center)
    print(f"{a.output}: {len(student)} tensors per network, {hp['arch']} p{hp['patch_size']} "
          f"D={hp['embed_dim']} depth {hp['depth']} heads {hp['num_heads']}, {hp['in_chans']} channels"
          + (f", out_dim {hp['out_dim']}" if "out_dim" in hp else ", no head") + f", epoch {epoch}")


if __name__ == "__main__":
    main()
