#!/usr/bin/env python3
"""Regenerate tests/data/dino_tiny.h5 with the upstream PyTorch DINO code.

    /usr/bin/python3 tests/data/make_dino_tiny.py [--inputs-from FILE] [--force] UPSTREAM_DIR OUT.h5

UPSTREAM_DIR is a checkout of https://github.com/facebookresearch/dino (the reference was made at
commit 7c446df5b9f45747937fb0d72314eb9f7b66930a); only vision_transformer.py, utils.py and
main_dino.py are used.  They are imported as modules (main_dino's main() is never run) and the
tensors of the reference are computed with them on the CPU in float32: the tiny ViT and DINO head
(VisionTransformer, DINOHead, MultiCropWrapper), the loss and its centre (DINOLoss), per-parameter
gradient clipping (clip_gradients), the parameter groups (get_params_groups) with torch's AdamW,
the cosine schedules (cosine_scheduler), and two training steps carried out in the order that
main_dino's train_one_epoch uses.  The image operations are torch's interpolate and a Gaussian
blur computed as torchvision 0.14 computes it on tensors (checked against torchvision where it is
installed); the split permutations come from numpy.  No upstream code lives in this repository.

Random draws follow one torch stream seeded with the `seed` attribute (7): the student is built,
then the teacher (built, as main_dino does, before it is overwritten with the student's weights),
then randn crops for step 1 (global, local) and step 2, then rand for /image_ops/input.  With
PyTorch 1.13.1 this reproduces the stored draws exactly, and with its AVX2 CPU kernels (the
default on x86-64) every other tensor too.  --inputs-from FILE takes the initial
weights, the crops and the image-ops input from an existing dino_tiny.h5 instead, so every derived
tensor can be compared with FILE (tests/data/compare_h5.py).

Exit status: 0 written; 77 skipped (UPSTREAM_DIR missing or incomplete, or no PyTorch/h5py/numpy);
1 failure; 2 usage error.  OUT is written under a temporary name in its directory and renamed
into place at the end; an existing OUT is replaced only with --force.
"""
import argparse
import functools
import hashlib
import importlib.util
import math
import os
import sys
import tempfile
import types

SKIP = 77

UPSTREAM_URL = "https://github.com/facebookresearch/dino"
UPSTREAM_COMMIT = "7c446df5b9f45747937fb0d72314eb9f7b66930a"
# git blob ids of the three files at UPSTREAM_COMMIT (`git ls-tree`), to tell whether
# UPSTREAM_DIR holds that version.
UPSTREAM_BLOBS = {
    "utils.py": "9586250123a125a83ea2679e121b1b0ef8089916",
    "vision_transformer.py": "f69a7ad0522500ca2a85305a789be5ca6ac474d0",
    "main_dino.py": "cade9873dcb1d1c6c69ddba61dbdcf3f01dd7540",
}

# The configuration, written as the root attributes (tests/data/README).
CONFIG = {
    "patch": 8, "chans": 3, "embed": 48, "depth": 2, "heads": 3, "mlp_ratio": 4,
    "global_size": 32, "local_size": 16,
    "out_dim": 64, "hidden": 96, "bottleneck": 32, "nlayers": 3, "norm_last_layer": True,
    "batch": 2, "ncrops": 4, "n_local": 2,
    "student_temp": 0.1, "teacher_temp": 0.04, "center_momentum": 0.9,
    "epoch": 0, "freeze_last_layer": 0,
    "lr": 1e-3, "wd": 0.04, "clip": 3.0, "momentum": 0.996,
    "seed": 7,
}
NSTEPS = 2
LN_EPS = 1e-6

# /schedules: name -> (base, final, epochs, niter_per_ep, warmup_epochs)
SCHEDULES = {
    "lr": (1.25e-4, 1e-6, 7, 13, 2),
    "wd": (0.04, 0.4, 7, 13, 0),
    "momentum": (0.996, 1.0, 7, 13, 0),
}
SPLITS = [(5, 0), (37, 42), (1000, 40)]  # /split/n{N}_seed{S}

IMAGE_SHAPE = (3, 13, 11)
BLUR_SIGMAS = ("0.1", "0.7", "1.5")
BLUR_KSIZE = 5
CROP = (2, 1, 9, 7, 16)  # top, left, height, width, output size


class Skip(Exception):
    pass


class Failure(Exception):
    pass


def git_blob_id(path):
    with open(path, "rb") as fh:
        data = fh.read()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def check_upstream(d):
    if not os.path.isdir(d):
        raise Skip("upstream DINO sources not found: %s is not a directory (clone %s, commit %s)"
                   % (d, UPSTREAM_URL, UPSTREAM_COMMIT))
    missing = [n for n in UPSTREAM_BLOBS if not os.path.isfile(os.path.join(d, n))]
    if missing:
        raise Skip("upstream DINO sources incomplete: %s lacks %s (clone %s, commit %s)"
                   % (d, ", ".join(missing), UPSTREAM_URL, UPSTREAM_COMMIT))
    differ = [n for n, b in UPSTREAM_BLOBS.items() if git_blob_id(os.path.join(d, n)) != b]
    if differ:
        print("make_dino_tiny: warning: %s in %s differ from commit %s; the numbers may differ"
              % (", ".join(differ), d, UPSTREAM_COMMIT[:12]), file=sys.stderr)
        return "modified"
    return UPSTREAM_COMMIT[:7]


def import_numerics():
    try:
        import numpy
        import torch
        import h5py
    except ImportError as e:
        raise Skip("needs PyTorch, numpy and h5py (Debian: python3-torch python3-numpy python3-h5py): %s" % e)
    if not torch.__version__.startswith("1.13"):
        print("make_dino_tiny: warning: the reference was made with PyTorch 1.13.1; this is %s"
              % torch.__version__, file=sys.stderr)
    # and with its AVX2 CPU kernels (1.13's default on x86-64 with AVX2; ATEN_CPU_CAPABILITY picks
    # others).  Other kernels round differently: about 1e-6 relative, more in the key part of the
    # qkv bias, whose gradient is zero up to rounding.
    cap = [l.split(":", 1)[1].strip() for l in torch.__config__.show().splitlines()
           if "CPU capability usage" in l]
    if cap and cap[0] != "AVX2":
        print("make_dino_tiny: warning: PyTorch uses its %s CPU kernels, the reference was made with "
              "AVX2; expect rounding differences" % cap[0], file=sys.stderr)
    return numpy, torch, h5py


def stand_in_module(name, **attrs):
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    m.__scdino_stand_in__ = True
    return m


def provide_stand_ins():
    """main_dino.py and utils.py import torchvision and PIL at module level but use them only in
    code this script never calls (data loading and augmentation).  Where a package is missing,
    an empty stand-in module lets the import succeed; installed packages are used as they are."""
    used = []
    try:
        importlib.import_module("torchvision")
    except ImportError:
        subs = {n: stand_in_module("torchvision." + n) for n in ("datasets", "transforms", "models")}
        sys.modules["torchvision"] = stand_in_module("torchvision", **subs)
        for n, m in subs.items():
            sys.modules["torchvision." + n] = m
        used.append("torchvision")
    try:
        for n in ("PIL", "PIL.Image", "PIL.ImageFilter", "PIL.ImageOps"):
            importlib.import_module(n)
    except ImportError:
        subs = {n: stand_in_module("PIL." + n) for n in ("Image", "ImageFilter", "ImageOps")}
        sys.modules["PIL"] = stand_in_module("PIL", **subs)
        for n, m in subs.items():
            sys.modules["PIL." + n] = m
        used.append("PIL")
    if used:
        print("make_dino_tiny: note: empty stand-ins for %s (not used by the computation)"
              % ", ".join(used), file=sys.stderr)


def load_upstream(d):
    """Import utils, vision_transformer and main_dino from directory d.  main_dino imports the
    other two by their plain names, so they are registered under those names first."""
    sys.dont_write_bytecode = True  # leave no __pycache__ in the upstream checkout
    provide_stand_ins()
    mods = {}
    for name in ("utils", "vision_transformer", "main_dino"):
        spec = importlib.util.spec_from_file_location(name, os.path.join(d, name + ".py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        try:
            spec.loader.exec_module(mod)
        except Exception as e:
            raise Failure("cannot import %s from %s: %s: %s" % (name + ".py", d, type(e).__name__, e))
        mods[name] = mod
    for name, attr in (("utils", "MultiCropWrapper"), ("utils", "clip_gradients"),
                       ("utils", "cancel_gradients_last_layer"), ("utils", "get_params_groups"),
                       ("utils", "cosine_scheduler"), ("vision_transformer", "VisionTransformer"),
                       ("vision_transformer", "DINOHead"), ("main_dino", "DINOLoss")):
        if not hasattr(mods[name], attr):
            raise Failure("%s.py in %s has no %s" % (name, d, attr))
    # DINOLoss.update_center all-reduces the batch centre over the ranks.  This is one process
    # with no process group: a world of one rank, where the all-reduce leaves its input as it is.
    mods["main_dino"].dist = types.SimpleNamespace(all_reduce=lambda tensor, *a, **k: None,
                                                   get_world_size=lambda *a, **k: 1)
    return mods


class Reference:
    """Builds the tensors of dino_tiny.h5: self.data maps a path to (array, attrs)."""

    def __init__(self, np, torch, mods, source):
        self.np, self.torch, self.m = np, torch, mods
        self.data = {}
        self.group_attrs = {}
        self.root_attrs = dict(CONFIG)
        self.root_attrs["source"] = ("facebookresearch/dino@%s (vision_transformer.py, utils.py, "
                                     "main_dino.py), torch %s" % (source, torch.__version__))

    def put(self, path, value, dtype="float32", attrs=None):
        np = self.np
        if hasattr(value, "detach"):
            value = value.detach().cpu().numpy()
        # a copy: parameters, gradients and the centre change in place later on
        self.data[path] = (np.array(value, dtype=dtype, copy=True), attrs or {})

    def put_params(self, group, named):
        for name, t in named:
            self.put("%s/%s" % (group, name), t)

    # --- models
    def build(self):
        torch, vt, ut = self.torch, self.m["vision_transformer"], self.m["utils"]
        c = CONFIG
        backbone = vt.VisionTransformer(
            img_size=[c["global_size"]], patch_size=c["patch"], in_chans=c["chans"],
            embed_dim=c["embed"], depth=c["depth"], num_heads=c["heads"], mlp_ratio=c["mlp_ratio"],
            qkv_bias=True, drop_path_rate=0.0,
            norm_layer=functools.partial(torch.nn.LayerNorm, eps=LN_EPS))
        head = vt.DINOHead(c["embed"], c["out_dim"], use_bn=False,
                           norm_last_layer=c["norm_last_layer"], nlayers=c["nlayers"],
                           hidden_dim=c["hidden"], bottleneck_dim=c["bottleneck"])
        return ut.MultiCropWrapper(backbone, head)

    def run(self, inputs_from=None):
        torch = self.torch
        c = CONFIG
        B, nl, G, L, C = c["batch"], c["n_local"], c["global_size"], c["local_size"], c["chans"]
        torch.manual_seed(c["seed"])
        student = self.build()
        teacher = self.build()  # main_dino builds the teacher, then copies the student into it
        if inputs_from is not None:
            sd = student.state_dict()
            for name in sd:
                ref = inputs_from.array("init/student/" + name, tuple(sd[name].shape))
                sd[name] = torch.from_numpy(ref)
            student.load_state_dict(sd)
        teacher.load_state_dict(student.state_dict())
        for p in teacher.parameters():
            p.requires_grad = False
        self.put_params("init/student", student.state_dict().items())

        inputs = []
        for step in range(1, NSTEPS + 1):
            if inputs_from is None:
                g = torch.randn(2 * B, C, G, G)
                l = torch.randn(nl * B, C, L, L)
            else:
                g = torch.from_numpy(inputs_from.array("step%d/inputs/global" % step, (2 * B, C, G, G)))
                l = torch.from_numpy(inputs_from.array("step%d/inputs/local" % step, (nl * B, C, L, L)))
            inputs.append((g, l))

        loss_fn = self.m["main_dino"].DINOLoss(
            c["out_dim"], c["ncrops"], c["teacher_temp"], c["teacher_temp"], 0, c["epoch"] + 1,
            student_temp=c["student_temp"], center_momentum=c["center_momentum"])
        optimizer = torch.optim.AdamW(self.m["utils"].get_params_groups(student))
        for step, (g, l) in enumerate(inputs, 1):
            self.step(step, student, teacher, loss_fn, optimizer, g, l)

        if inputs_from is None:
            img = torch.rand(*IMAGE_SHAPE)
        else:
            img = torch.from_numpy(inputs_from.array("image_ops/input", IMAGE_SHAPE))
        self.image_ops(img)
        self.schedules()
        self.splits()

    def step(self, step, student, teacher, loss_fn, optimizer, g, l):
        torch, ut, c = self.torch, self.m["utils"], CONFIG
        B, L = c["batch"], c["local_size"]
        pre = "step%d/" % step
        self.put(pre + "inputs/global", g)
        self.put(pre + "inputs/local", l)
        # the DataLoader's batch: a list of ncrops tensors [B, C, S, S]
        crops = list(g.split(B)) + list(l.split(B))
        for i, group in enumerate(optimizer.param_groups):  # as train_one_epoch sets them
            group["lr"] = c["lr"]
            if i == 0:
                group["weight_decay"] = c["wd"]
        self.put(pre + "center_before", loss_fn.center)

        bb = student.backbone
        with torch.no_grad():
            self.put(pre + "outputs/student_cls_global", bb(g))
            self.put(pre + "outputs/student_cls_local", bb(l))
            self.put(pre + "outputs/attention_last_global", bb.get_last_selfattention(g))
            tokens = bb.patch_embed(l)
            tokens = torch.cat((bb.cls_token.expand(l.shape[0], -1, -1), tokens), dim=1)
            self.put(pre + "outputs/pos_embed_local", bb.interpolate_pos_encoding(tokens, L, L))

        teacher_out = teacher(crops[:2])
        student_out = student(crops)
        loss = loss_fn(student_out, teacher_out, c["epoch"])
        if not math.isfinite(loss.item()):
            raise Failure("step %d: the loss is %r" % (step, loss.item()))
        self.put(pre + "outputs/student_logits", student_out)
        self.put(pre + "outputs/teacher_logits", teacher_out)
        self.put(pre + "outputs/loss", loss.item(), dtype="float64")
        self.put(pre + "center_after", loss_fn.center)

        optimizer.zero_grad()
        loss.backward()
        grads = [(n, p.grad) for n, p in student.named_parameters() if p.grad is not None]
        self.put_params(pre + "grads", [(n, t.clone()) for n, t in grads])
        ut.clip_gradients(student, c["clip"])
        self.put_params(pre + "clipped_grads", grads)
        ut.cancel_gradients_last_layer(c["epoch"], student, c["freeze_last_layer"])
        optimizer.step()
        with torch.no_grad():  # the teacher's EMA, as in train_one_epoch
            m = c["momentum"]
            for q, k in zip(student.parameters(), teacher.parameters()):
                k.data.mul_(m).add_((1 - m) * q.detach().data)
        self.put_params(pre + "student", student.state_dict().items())
        self.put_params(pre + "teacher", teacher.state_dict().items())

    # --- image operations (the augmentation's building blocks, as torchvision 0.14 computes them
    # on float tensors: torch.nn.functional.interpolate without antialiasing; a separable
    # Gaussian kernel over linspace(-(k-1)/2, (k-1)/2) normalised to sum 1, its outer product,
    # reflect padding and a depthwise convolution)
    def gaussian_blur(self, img, ksize, sigma):
        torch = self.torch
        half = (ksize - 1) * 0.5
        x = torch.linspace(-half, half, steps=ksize)
        k1 = torch.exp(-0.5 * (x / sigma).pow(2))
        k1 = k1 / k1.sum()
        k2 = torch.mm(k1[:, None], k1[None, :])
        ch = img.shape[0]
        padded = torch.nn.functional.pad(img[None], [ksize // 2] * 4, mode="reflect")
        return torch.nn.functional.conv2d(padded, k2.expand(ch, 1, ksize, ksize), groups=ch)[0]

    def image_ops(self, img):
        F = self.torch.nn.functional
        self.put("image_ops/input", img)
        x = img[None]
        for mode, (h, w) in (("bicubic", (20, 24)), ("bicubic", (5, 4)), ("bilinear", (20, 24))):
            self.put("image_ops/%s_to_%dx%d" % (mode, h, w),
                     F.interpolate(x, size=(h, w), mode=mode, align_corners=False)[0])
        blurred = {}
        for s in BLUR_SIGMAS:
            blurred[s] = self.gaussian_blur(img, BLUR_KSIZE, float(s))
            self.put("image_ops/gaussian_blur_%dx%d_sigma%s" % (BLUR_KSIZE, BLUR_KSIZE, s), blurred[s])
        top, left, h, w, size = CROP
        crop = F.interpolate(x[:, :, top:top + h, left:left + w], size=(size, size), mode="bicubic",
                             align_corners=False)[0]
        self.put("image_ops/resized_crop_top%d_left%d_h%d_w%d_to_%d" % CROP, crop)
        self.cross_check_torchvision(img, blurred, crop)

    def cross_check_torchvision(self, img, blurred, crop):
        """Where the real torchvision is installed, its functions must give the same numbers."""
        try:
            import torchvision
            if getattr(torchvision, "__scdino_stand_in__", False):
                return
            import torchvision.transforms.functional as TF
        except ImportError:
            return
        torch = self.torch
        top, left, h, w, size = CROP
        checks = [("resized_crop", crop, TF.resized_crop(img, top, left, h, w, [size, size],
                                                         interpolation=TF.InterpolationMode.BICUBIC))]
        for s, b in blurred.items():
            checks.append(("gaussian_blur sigma " + s, b,
                           TF.gaussian_blur(img, [BLUR_KSIZE, BLUR_KSIZE], [float(s), float(s)])))
        for what, ours, theirs in checks:
            if not torch.equal(ours, theirs):
                raise Failure("image_ops: %s differs from torchvision %s (max |diff| %.3g)"
                              % (what, torchvision.__version__, float((ours - theirs).abs().max())))

    def schedules(self):
        np, ut = self.np, self.m["utils"]
        self.group_attrs["schedules"] = {
            "doc": "cosine_scheduler(base, final, epochs, niter_per_ep, warmup_epochs)"}
        for name, (base, final, epochs, niter, warmup) in SCHEDULES.items():
            sched = ut.cosine_scheduler(base, final, epochs, niter, warmup_epochs=warmup)
            self.put("schedules/" + name, sched, dtype="float64",
                     attrs={"args": np.array([base, final, epochs, niter, warmup], dtype=np.float64)})

    def splits(self):
        np = self.np
        for n, seed in SPLITS:  # scDINO's train/validation split
            np.random.seed(seed)
            perm = list(range(n))
            np.random.shuffle(perm)
            self.put("split/n%d_seed%d" % (n, seed), perm, dtype="int64",
                     attrs={"n": np.int64(n), "seed": np.int64(seed)})


class InputsFrom:
    """The weights and inputs of an existing dino_tiny.h5."""

    def __init__(self, h5py, np, path):
        self.np = np
        try:
            self.f = h5py.File(path, "r")
        except OSError as e:
            raise Failure("--inputs-from %s: cannot open: %s" % (path, e))
        self.path = path
        for k, v in CONFIG.items():
            if k == "seed":
                continue
            if k not in self.f.attrs:
                raise Failure("--inputs-from %s: no root attribute %s" % (path, k))
            if self.f.attrs[k] != v:
                raise Failure("--inputs-from %s: attribute %s = %r, this script uses %r"
                              % (path, k, self.f.attrs[k], v))

    def array(self, name, shape):
        if name not in self.f:
            raise Failure("--inputs-from %s: no dataset /%s" % (self.path, name))
        a = self.f[name][()]
        if tuple(a.shape) != tuple(shape):
            raise Failure("--inputs-from %s: /%s has shape %s, expected %s"
                          % (self.path, name, a.shape, tuple(shape)))
        return self.np.ascontiguousarray(a, dtype=self.np.float32)


def root_attr_value(np, v):
    if isinstance(v, bool):
        return np.bool_(v)
    if isinstance(v, int):
        return np.int64(v)
    if isinstance(v, float):
        return np.float64(v)
    return v


def write_atomically(h5py, np, ref, out):
    d = os.path.dirname(os.path.abspath(out))
    fd, tmp = tempfile.mkstemp(dir=d, prefix="." + os.path.basename(out) + ".", suffix=".tmp")
    os.close(fd)
    try:
        with h5py.File(tmp, "w") as f:
            for k, v in ref.root_attrs.items():
                f.attrs[k] = root_attr_value(np, v)
            for path in sorted(ref.data):
                arr, attrs = ref.data[path]
                ds = f.create_dataset(path, data=arr)
                for k, v in attrs.items():
                    ds.attrs[k] = v
            for g, attrs in ref.group_attrs.items():
                for k, v in attrs.items():
                    f[g].attrs[k] = v
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def main(argv):
    ap = argparse.ArgumentParser(
        prog="make_dino_tiny.py",
        description="Recompute the DINO reference tensors (dino_tiny.h5) with the upstream PyTorch code.",
        epilog="Exit status 77 (skipped) when UPSTREAM_DIR lacks the upstream sources or "
               "PyTorch/numpy/h5py is missing.")
    ap.add_argument("upstream_dir", metavar="UPSTREAM_DIR",
                    help="checkout of %s (commit %s)" % (UPSTREAM_URL, UPSTREAM_COMMIT))
    ap.add_argument("out", metavar="OUT.h5", help="file to write")
    ap.add_argument("--inputs-from", metavar="FILE",
                    help="take the initial weights, crops and image-ops input from this dino_tiny.h5")
    ap.add_argument("--force", action="store_true", help="replace OUT if it exists")
    args = ap.parse_args(argv)

    try:
        source = check_upstream(args.upstream_dir)
        np, torch, h5py = import_numerics()
        out = args.out
        if os.path.isdir(out):
            raise Failure("%s is a directory" % out)
        if not os.path.isdir(os.path.dirname(os.path.abspath(out))):
            raise Failure("the directory of %s does not exist" % out)
        if args.inputs_from and os.path.exists(out) and os.path.samefile(out, args.inputs_from):
            raise Failure("OUT and --inputs-from are the same file (%s)" % out)
        if os.path.exists(out) and not args.force:
            raise Failure("%s exists; pass --force to replace it" % out)
        torch.set_num_threads(1)
        mods = load_upstream(os.path.abspath(args.upstream_dir))
        ref = Reference(np, torch, mods, source)
        inputs = InputsFrom(h5py, np, args.inputs_from) if args.inputs_from else None
        ref.run(inputs)
        write_atomically(h5py, np, ref, out)
    except Skip as e:
        print("make_dino_tiny: skipped: %s" % e, file=sys.stderr)
        return SKIP
    except Failure as e:
        print("make_dino_tiny: error: %s" % e, file=sys.stderr)
        return 1
    print("make_dino_tiny: wrote %s (%d datasets%s)" % (
        out, len(ref.data), ", inputs from " + args.inputs_from if args.inputs_from else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
