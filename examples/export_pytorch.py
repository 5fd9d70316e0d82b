#!/usr/bin/env python3
"""export_pytorch.py - an scdino checkpoint.h5 as a PyTorch .pth in DINO/scDINO's layout.

    python3 examples/export_pytorch.py run/checkpoint.h5 checkpoint.pth

The .pth holds what upstream's main_dino.py saves:
    {'student': {'module.backbone.cls_token': ..., 'module.head.last_layer.weight_v': ...},
     'teacher': {'backbone.cls_token': ..., ...},
     'optimizer': AdamW state_dict (param groups as upstream: weights, then biases and norms),
     'epoch': next epoch to run, 'args': argparse.Namespace with the hyperparameters,
     'dino_loss': {'center': [1, out_dim]}}
so upstream's restart_from_checkpoint, eval_knn.py and visualize_attention.py read it
(checkpoint_key 'teacher' or 'student'; the 'module.' prefix is what they strip).
Needs h5py, numpy and torch, and tool_errors.py beside it.  --no-optimizer leaves the optimizer
state out (a much smaller file).

Exit status (one line on stderr, 'export_pytorch.py: FILE: reason'): 0 success; 1 runtime failure
(a missing module, the output cannot be written); 2 bad arguments (an output that is the input);
3 bad input (missing, not a regular file, not HDF5, not an scdino checkpoint, damaged, lacking a
group or dataset).  The .pth is written under a temporary name and renamed: it is complete or
absent, and never replaces the input.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tool_errors import ArgumentParser, atomic_output, bad_data, distinct_output, need_file  # noqa: E402
from tool_errors import reading, run, writing  # noqa: E402

TOOL = "export_pytorch.py"
try:
    import h5py
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover - depends on the installation
    sys.exit(f"{TOOL}: needs h5py, numpy and torch ({e})")

FORMAT = "scdino-checkpoint"
VERSIONS = (1, 2)  # 2: checksummed files (fixed-length strings, Fletcher-32); same content

# Position of each name component in PyTorch's named_parameters() order of DINO's ViT and head.
_ORDER = {"cls_token": 0, "pos_embed": 1, "patch_embed": 2, "blocks": 3, "norm": 4,
          "norm1": 0, "attn": 1, "norm2": 2, "mlp": 3, "qkv": 0, "proj": 1, "fc1": 0, "fc2": 1,
          "last_layer": 9, "weight": 0, "bias": 1, "weight_g": 0, "weight_v": 1,
          "backbone": 0, "head": 1}


def param_order(name):
    """Sort key giving PyTorch's named_parameters() order for scdino/DINO tensor names."""
    return tuple(int(p) if p.isdigit() else _ORDER.get(p, 50) for p in name.split("."))


def is_regularized(name, shape):
    """Upstream's get_params_groups: biases and 1-D tensors get no weight decay."""
    return not (name.endswith(".bias") or len(shape) == 1)


def attr(f, key, default=None):
    v = f.attrs.get(key, default)
    if isinstance(v, bytes):
        v = v.decode()
    if isinstance(v, np.generic):
        v = v.item()
    return v


def read_group(g):
    return {name: torch.from_numpy(np.array(g[name][()], dtype=np.float32)) for name in g}


def read(src, with_optimizer=True):
    """The .pth dictionary of the scdino checkpoint src."""
    need_file(src)
    with reading(src, "it as an HDF5 file"):
        f = h5py.File(src, "r")
    with f, reading(src, "the checkpoint"):
        if attr(f, "format") != FORMAT:
            raise bad_data(src, f"not an scdino checkpoint (format {attr(f, 'format')!r})")
        if attr(f, "version") not in VERSIONS:
            raise bad_data(src, f"version {attr(f, 'version')!r} is not one of {VERSIONS}")
        for g in ("student", "teacher"):
            if not isinstance(f.get(g), h5py.Group):
                raise bad_data(src, f"no /{g} group")
        student = read_group(f["student"])
        teacher = read_group(f["teacher"])
        names = sorted(student, key=param_order)
        out = {
            "student": {"module." + n: student[n] for n in names},
            "teacher": {n: teacher[n] for n in sorted(teacher, key=param_order)},
            "epoch": int(attr(f, "epoch", 0)),
        }
        if "dino_loss/center" in f:
            out["dino_loss"] = {"center": torch.from_numpy(np.array(f["dino_loss/center"][()], dtype=np.float32))}
        hp = {k: attr(f, k) for k in ("arch", "patch_size", "in_chans", "embed_dim", "depth", "num_heads",
                                      "mlp_hidden", "out_dim", "head_hidden_dim", "head_bottleneck_dim",
                                      "head_nlayers", "norm_last_layer", "drop_path_rate", "seed",
                                      "batch_size_per_rank", "world_size", "epochs", "local_crops_number",
                                      "global_size", "local_size") if k in f.attrs}
        if "norm_last_layer" in hp:
            hp["norm_last_layer"] = bool(hp["norm_last_layer"])
        gelu = attr(f, "gelu_approximate", "none")
        hp["gelu_approximate"] = gelu
        if gelu != "none":
            print(f"export_pytorch.py: warning: {src} was trained with GELU approximate={gelu!r}; "
                  "upstream's ViT uses the exact GELU, so its outputs from these weights differ "
                  "slightly (build the model with nn.GELU(approximate='tanh') to match)", file=sys.stderr)
        if "channels" in f.attrs:
            hp["selected_channels"] = [int(c) for c in np.atleast_1d(f.attrs["channels"])]
        # Upstream's argument names where they differ.
        if "batch_size_per_rank" in hp:
            hp["batch_size_per_gpu"] = hp["batch_size_per_rank"]
        hp["use_bn_in_head"] = False
        out["args"] = argparse.Namespace(**hp)

        if with_optimizer and "optimizer/exp_avg" in f:
            trainable = [n for n in names if n in f["optimizer/exp_avg"]]
            groups = [[n for n in trainable if is_regularized(n, student[n].shape)],
                      [n for n in trainable if not is_regularized(n, student[n].shape)]]
            state, params, idx = {}, [[], []], 0
            for gi, g in enumerate(groups):
                for n in g:
                    step = int(f["optimizer/step/" + n][()])
                    if step > 0:  # PyTorch has no state for a parameter that never stepped
                        state[idx] = {"step": torch.tensor(float(step)),
                                      "exp_avg": torch.from_numpy(np.array(f["optimizer/exp_avg/" + n][()])),
                                      "exp_avg_sq": torch.from_numpy(np.array(f["optimizer/exp_avg_sq/" + n][()]))}
                    params[gi].append(idx)
                    idx += 1
            og = f["optimizer"]
            betas = (float(attr(og, "beta1", 0.9)), float(attr(og, "beta2", 0.999)))
            eps = float(attr(og, "eps", 1e-8))
            # lr and weight_decay are rewritten every iteration upstream; these are placeholders
            # with PyTorch's constructor defaults.
            pg = [{"lr": 1e-3, "betas": betas, "eps": eps, "weight_decay": 1e-2, "amsgrad": False,
                   "maximize": False, "foreach": None, "capturable": False, "params": params[0]},
                  {"lr": 1e-3, "betas": betas, "eps": eps, "weight_decay": 0.0, "amsgrad": False,
                   "maximize": False, "foreach": None, "capturable": False, "params": params[1]}]
            out["optimizer"] = {"state": state, "param_groups": pg}
    return out


def save(out, dst):
    with atomic_output(dst) as tmp:
        torch.save(out, tmp)


def main():
    p = ArgumentParser(prog=TOOL, description=__doc__.split("\n")[0])
    p.add_argument("checkpoint", help="scdino checkpoint (.h5)")
    p.add_argument("output", help="PyTorch file to write (.pth)")
    p.add_argument("--no-optimizer", action="store_true", help="leave the AdamW state out")
    a = p.parse_args()
    distinct_output(a.output, [a.checkpoint])
    out = read(a.checkpoint, not a.no_optimizer)
    with writing(a.output):
        save(out, a.output)
    print(f"{a.output}: student and teacher ({len(out['student'])} tensors each), epoch {out['epoch']}"
          + (", optimizer" if "optimizer" in out else "") + (", dino_loss.center" if "dino_loss" in out else ""))


if __name__ == "__main__":
    run(TOOL, main)
