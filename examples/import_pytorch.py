#!/usr/bin/env python3
"""import_pytorch.py - a DINO/scDINO PyTorch checkpoint (.pth) as an scdino checkpoint (.h5).

    python3 examples/import_pytorch.py sc-ViT_checkpoint0100_vitsmall16.pth vits16.h5

Safe on files from anywhere: the .pth is unpickled weights-only, which builds tensors, plain
containers, numbers, strings and the training arguments (argparse.Namespace) and nothing else; a
file that names any other Python object (a class, a function such as os.system) is refused
before anything of it runs.  With torch 2.4 or newer this is torch's own weights-only load
(torch.load(weights_only=True), Namespace allowed with torch.serialization.safe_globals).  Older
torch has no way to allow Namespace there: its own file readers then run with an unpickler whose
find_class admits only those objects (Python's "restricting globals"); a torch without those
readers is refused, never loaded unsafely.  A TorchScript archive is refused (torch.load would run
it through torch.jit.load).

The result holds /student and /teacher with the state_dict names without 'module.' (what
&training init_from, &features checkpoint and the attention maps read), /dino_loss/center when the
.pth has it, and root attributes: format, version, epoch, imported_from, channels and the model's
hyperparameters.  It is a version 2 file, written as scdino writes its own (doc/formats.md,
"Integrity"), so scdino's reader checks every byte of it.  The hyperparameters come from the
tensor shapes (patch size, channels, width, depth, MLP width, position grid, head widths and
layers, out_dim) and from the checkpoint's 'args' where shapes cannot tell:
  num_heads          --num-heads, else args.num_heads, else args.arch (vit_tiny 3, vit_small 6,
                     vit_base 12), else embed_dim / 64 (the head width of every DINO ViT), at least 1
  norm_last_layer    args.norm_last_layer, else whether every weight_g is 1
  channels           --channels, else args.selected_channels, else 0 .. in_chans-1
  drop_path_rate     args.drop_path_rate, else 0.1 (upstream's default)
  gelu_approximate   args.gelu_approximate ('none' or 'tanh'; what export_pytorch.py writes), else 'none'
  records of the run seed, epochs, world_size, local_crops_number, global_size, local_size,
                     batch_size_per_rank (args.batch_size_per_rank, else args.batch_size_per_gpu),
                     each when args has it
Accepted inputs: a full DINO checkpoint ({'student', 'teacher', ...}; both networks are taken),
or a bare state_dict of one network (then written as both student and teacher).  The optimizer
state is not converted: the result starts fine-tuning (init_from), not a restart.  Needs torch,
h5py and numpy, and tool_errors.py beside it.

Exit status (one line on stderr, 'import_pytorch.py: FILE: reason'): 0 success; 1 runtime failure
(a missing module, the output cannot be written); 2 bad arguments (--channels, --num-heads, an
output that is the input); 3 bad input (missing, not a regular file, not a PyTorch checkpoint,
damaged, refused as unsafe, tensors missing or of the wrong kind).  The output is written under a
temporary name and renamed: it is complete or absent, and never replaces the input.
"""
import argparse
import codecs
import collections
import ctypes
import math
import os
import pickle
import re
import sys
import types
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tool_errors import EXIT_ARGS, EXIT_DATA, EXIT_FAILURE, ArgumentParser, ToolError, bad_data  # noqa: E402
from tool_errors import atomic_output, distinct_output, need_file, reading, run, writing  # noqa: E402

TOOL = "import_pytorch.py"
try:
    import h5py
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover - depends on the installation
    sys.exit(f"{TOOL}: needs h5py, numpy and torch ({e})")

FORMAT = "scdino-checkpoint"
VERSION = 2  # checksummed: fixed-length strings, Fletcher-32 chunks, compact headers (doc/formats.md)
# Standard DINO ViTs: embed_dim, depth, num_heads.
ARCHS = {"vit_tiny": (192, 12, 3), "vit_small": (384, 12, 6), "vit_base": (768, 12, 12)}
HEADS = {"vit_tiny": 3, "deit_tiny": 3, "vit_small": 6, "deit_small": 6, "vit_base": 12, "deit_base": 12}
# Integer records of the run that args may hold: attribute name, then the args names to try.
RUN_RECORDS = (("seed", ("seed",)), ("epochs", ("epochs",)), ("world_size", ("world_size",)),
               ("local_crops_number", ("local_crops_number",)), ("global_size", ("global_size",)),
               ("local_size", ("local_size",)), ("batch_size_per_rank", ("batch_size_per_rank", "batch_size_per_gpu")))


# ---- weights-only loading --------------------------------------------------------------------------
def _restricted_pickle():
    """A pickle module whose unpickler builds only what a DINO checkpoint holds: torch.load's own
    tensor machinery (its wrapper resolves storage types before asking this find_class) and the
    allow-list below; any other global ends the load before it is called."""
    allowed = {("argparse", "Namespace"): argparse.Namespace,
               ("collections", "OrderedDict"): collections.OrderedDict,
               ("builtins", "set"): set, ("builtins", "frozenset"): frozenset, ("builtins", "complex"): complex,
               ("builtins", "slice"): slice, ("builtins", "bytearray"): bytearray,
               ("_codecs", "encode"): codecs.encode,  # bytes under pickle protocol 2
               ("torch", "Size"): torch.Size, ("torch", "device"): torch.device}
    for name in ("_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_parameter"):
        allowed[("torch._utils", name)] = getattr(torch._utils, name)
    for name in dir(torch):
        obj = getattr(torch, name, None)
        if isinstance(obj, torch.dtype):
            allowed[("torch", name)] = obj
    for cls in torch._storage_classes:
        allowed[(cls.__module__, cls.__name__)] = cls

    class Unpickler(pickle.Unpickler):
        def find_class(self, module, name):
            obj = allowed.get((module, name))
            if obj is None:
                raise pickle.UnpicklingError(f"Unsupported global: {module}.{name}")
            return obj

    mod = types.ModuleType("weights_only_pickle")
    mod.Unpickler = Unpickler
    mod.load = lambda f, **kw: Unpickler(f, **kw).load()
    return mod


def _load_restricted(path):
    """torch.load's own readers (zip, and the legacy formats) with the restricted unpickler.  Not
    through torch.load: torch 1.13 ignores its pickle_module argument unless weights_only is set,
    and would unpickle with the unrestricted pickle."""
    ser = torch.serialization
    if not all(hasattr(ser, n) for n in ("_is_zipfile", "_open_zipfile_reader", "_load", "_legacy_load")):
        raise ToolError(EXIT_FAILURE, path, f"torch {torch.__version__} has no way to load a checkpoint safely "
                                            "(weights only): use torch 2.4 or newer")
    mod = _restricted_pickle()
    with open(path, "rb") as fh:
        if ser._is_zipfile(fh):
            with ser._open_zipfile_reader(fh) as zf:
                return ser._load(zf, "cpu", mod, encoding="utf-8")
        return ser._legacy_load(fh, "cpu", mod, encoding="utf-8")


def _refusal(e):
    """The reason in torch's weights-only error, without its advice to load unsafely."""
    text = str(e)
    m = re.search(r"WeightsUnpickler error:\s*(.*)", text)
    line = (m.group(1) if m else text).strip().split("\n")[0]
    return line.split(". ")[0].rstrip(".")


def load(path):
    """The checkpoint at path, unpickled weights-only (see the docstring)."""
    need_file(path)
    with open(path, "rb") as fh:
        zipped = fh.read(4) == b"PK\x03\x04"
    if zipped:
        with reading(path, "the checkpoint (a damaged zip archive?)"):
            names = zipfile.ZipFile(path).namelist()
        if any(n.split("/")[-1] == "constants.pkl" for n in names):
            raise bad_data(path, "a TorchScript archive, not a checkpoint (refused: loading it would run its code)")
    ser = torch.serialization
    with reading(path, "it as a PyTorch checkpoint (truncated, damaged or another format?)"):
        try:
            if hasattr(ser, "safe_globals"):
                with ser.safe_globals([argparse.Namespace]):
                    return torch.load(path, map_location="cpu", weights_only=True)
            if hasattr(ser, "add_safe_globals"):
                ser.add_safe_globals([argparse.Namespace])
                return torch.load(path, map_location="cpu", weights_only=True)
            return _load_restricted(path)
        except pickle.UnpicklingError as e:
            if "Unsupported global" in str(e) or "WeightsUnpickler" in str(e):
                raise bad_data(path, "refused: it holds more than tensors, containers and argparse.Namespace "
                                     f"(a weights-only load runs nothing): {_refusal(e)}") from None
            raise


# ---- tensors and hyperparameters -------------------------------------------------------------------
def clean(path, sd, what):
    """state_dict without 'module.' prefixes, as float32 numpy arrays; only float tensors."""
    if not isinstance(sd, dict):
        raise bad_data(path, f"the {what} entry is a {type(sd).__name__}, not a state_dict")
    out = {}
    for k, v in sd.items():
        if not torch.is_tensor(v):
            continue
        if not isinstance(k, str) or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,200}", k):
            raise bad_data(path, f"the {what} state_dict has a tensor named {k!r}")
        while k.startswith("module."):
            k = k[len("module."):]
        if not v.is_floating_point():
            raise bad_data(path, f"tensor {k} of the {what} holds {v.dtype}, not floating-point values")
        a = v.detach().to(torch.float32).cpu().numpy()
        if not np.isfinite(a).all():
            raise bad_data(path, f"tensor {k} of the {what} holds a non-finite value")
        out[k] = a
    if not any(k.startswith("backbone.") for k in out):
        # A bare backbone (e.g. DINO's *_pretrain.pth): put it where the model expects it.
        if "patch_embed.proj.weight" in out:
            out = {"backbone." + k: v for k, v in out.items()}
        else:
            raise bad_data(path, f"the {what} state_dict has no ViT backbone tensors (patch_embed.proj.weight)")
    return out


def arg(args, name, kinds):
    """args.name (args a Namespace or a dict) when it is one of kinds (bool never counts as int)."""
    v = args.get(name) if isinstance(args, dict) else getattr(args, name, None)
    if v is None or (isinstance(v, bool) and bool not in kinds) or not isinstance(v, kinds):
        return None
    return v


def hyperparameters(path, sd, args, num_heads):
    def need(name, ndim):
        if name not in sd:
            raise bad_data(path, f"tensor {name} is missing")
        if sd[name].ndim != ndim:
            raise bad_data(path, f"tensor {name} has shape {list(sd[name].shape)}, not {ndim} dimensions")
        return sd[name]
    D, C, p, p2 = need("backbone.patch_embed.proj.weight", 4).shape
    if p != p2:
        raise bad_data(path, f"non-square patches {p}x{p2}")
    blocks = [int(m.group(1)) for k in sd for m in [re.match(r"backbone\.blocks\.(\d+)\.", k)] if m]
    if not blocks:
        raise bad_data(path, "no transformer blocks (backbone.blocks.*)")
    npos = need("backbone.pos_embed", 3).shape[1] - 1
    grid = int(round(math.sqrt(max(npos, 0))))
    if npos < 1 or grid * grid != npos:
        raise bad_data(path, f"pos_embed has {npos} patch positions, not a square grid")
    hp = {"patch_size": p, "in_chans": C, "embed_dim": D, "depth": 1 + max(blocks),
          "mlp_hidden": need("backbone.blocks.0.mlp.fc1.weight", 2).shape[0], "pos_grid": grid}
    arch = arg(args, "arch", (str,)) or ""
    heads = num_heads or arg(args, "num_heads", (int,)) or HEADS.get(arch) or max(1, D // 64)
    if heads < 1 or D % heads:
        hint = "" if num_heads else "; give --num-heads"
        raise ToolError(EXIT_ARGS if num_heads else EXIT_DATA, path,
                        f"num_heads {heads} does not divide embed_dim {D}{hint}")
    hp["num_heads"] = heads
    hp["arch"] = arch if ARCHS.get(arch) == (D, hp["depth"], heads) else "custom"
    if "head.last_layer.weight_v" in sd:
        hp["out_dim"], hp["head_bottleneck_dim"] = need("head.last_layer.weight_v", 2).shape
        lin = sorted(int(m.group(1)) for k in sd for m in [re.fullmatch(r"head\.mlp\.(\d+)\.weight", k)] if m)
        if lin:
            hp["head_nlayers"] = len(lin)
            hp["head_hidden_dim"] = need("head.mlp.0.weight", 2).shape[0] if len(lin) > 1 else 2048
        elif "head.mlp.weight" in sd:
            hp["head_nlayers"], hp["head_hidden_dim"] = 1, 2048
        else:
            raise bad_data(path, "the head has a last layer but no MLP")
        nll = arg(args, "norm_last_layer", (bool, int))
        if nll is None and "head.last_layer.weight_g" in sd:
            nll = bool(np.all(sd["head.last_layer.weight_g"] == 1))
        hp["norm_last_layer"] = int(bool(nll if nll is not None else True))
    dpr = arg(args, "drop_path_rate", (float, int))
    hp["drop_path_rate"] = float(dpr) if dpr is not None else 0.1
    if not 0.0 <= hp["drop_path_rate"] < 1.0:
        raise bad_data(path, f"args.drop_path_rate = {hp['drop_path_rate']} is not in [0, 1)")
    gelu = arg(args, "gelu_approximate", (str,))
    if gelu is not None and gelu not in ("none", "tanh"):
        raise bad_data(path, f"args.gelu_approximate is {gelu!r}, not 'none' or 'tanh'")
    hp["gelu_approximate"] = gelu or "none"
    for key, names in RUN_RECORDS:
        v = next((v for v in (arg(args, n, (int,)) for n in names) if v is not None), None)
        if v is not None and 0 <= v <= 1 << 30:
            hp[key] = v
    return hp


# ---- writing (version 2) ---------------------------------------------------------------------------
def _compact_links(plist):
    """Links kept in the group's checksummed header, never in dense storage (doc/formats.md).  h5py
    has no binding for H5Pset_link_phase_change: call it in the HDF5 library h5py itself uses."""
    try:
        fn = ctypes.CDLL(h5py.h5p.__file__).H5Pset_link_phase_change
    except (OSError, AttributeError) as e:
        raise RuntimeError(f"this h5py's HDF5 has no H5Pset_link_phase_change ({e})") from None
    fn.argtypes, fn.restype = [ctypes.c_int64, ctypes.c_uint, ctypes.c_uint], ctypes.c_int
    if fn(plist.id, 65535, 0) < 0:
        raise RuntimeError("H5Pset_link_phase_change failed")


def _untimed(plist, links):
    plist.set_obj_track_times(False)  # the same content gives the same bytes
    plist.set_attr_phase_change(65535, 0)  # attributes stay in the checksummed header
    if links:
        _compact_links(plist)
    return plist


def _chunks(shape, elem=4):
    """Chunks of at most about 1 MiB, halving the outermost dimensions first (as scdino)."""
    chunk, nbytes = list(shape), float(np.prod(shape)) * elem
    for i in range(len(chunk)):
        while chunk[i] > 1 and nbytes > (1 << 20):
            half = (chunk[i] + 1) // 2
            nbytes = nbytes / chunk[i] * half
            chunk[i] = half
    return tuple(chunk)


def _group(parent, name):
    gcpl = _untimed(h5py.h5p.create(h5py.h5p.GROUP_CREATE), True)
    return h5py.Group(h5py.h5g.create(parent.id, name.encode(), gcpl=gcpl))


def _dataset(grp, name, a):
    """a as f32: chunked with Fletcher-32, or compact (inside the header) when it holds nothing."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    dcpl = _untimed(h5py.h5p.create(h5py.h5p.DATASET_CREATE), False)
    if a.ndim == 0 or a.size == 0:
        dcpl.set_layout(h5py.h5d.COMPACT)
    else:
        dcpl.set_chunk(_chunks(a.shape))
        dcpl.set_fletcher32()
    space = h5py.h5s.create_simple(a.shape) if a.ndim else h5py.h5s.create(h5py.h5s.SCALAR)
    d = h5py.h5d.create(grp.id, name.encode(), h5py.h5t.IEEE_F32LE, space, dcpl=dcpl)
    if a.size:
        d.write(h5py.h5s.ALL, h5py.h5s.ALL, a)


def _attr(obj, name, v):
    """Fixed-length null-terminated UTF-8 strings (no global heap), i64 integers, f64 reals."""
    if isinstance(v, str):
        b = v.encode()
        t = h5py.h5t.C_S1.copy()
        t.set_size(len(b) + 1)
        t.set_strpad(h5py.h5t.STR_NULLTERM)
        t.set_cset(h5py.h5t.CSET_UTF8)
        obj.attrs.create(name, np.array(b, dtype=f"S{len(b) + 1}"), dtype=h5py.Datatype(t))
    elif isinstance(v, float):
        obj.attrs.create(name, np.float64(v), dtype="<f8")
    else:
        obj.attrs.create(name, np.asarray(v, dtype=np.int64), dtype="<i8")


def write(dst, student, teacher, hp, channels, epoch, center):
    with atomic_output(dst) as tmp:
        fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
        fapl.set_libver_bounds(h5py.h5f.LIBVER_LATEST, h5py.h5f.LIBVER_LATEST)
        fcpl = _untimed(h5py.h5p.create(h5py.h5p.FILE_CREATE), True)
        with h5py.File(h5py.h5f.create(tmp.encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl)) as f:
            _attr(f, "format", FORMAT)
            _attr(f, "version", VERSION)
            _attr(f, "epoch", epoch)
            for k, v in hp.items():
                _attr(f, k, v)
            _attr(f, "channels", np.asarray(channels, dtype=np.int64))
            _attr(f, "imported_from", "PyTorch checkpoint (examples/import_pytorch.py)")
            for g, sd in (("student", student), ("teacher", teacher)):
                grp = _group(f, g)
                for k, v in sd.items():
                    _dataset(grp, k, v)
            if center is not None:
                _dataset(_group(f, "dino_loss"), "center", center.reshape(1, -1))


# ---- the tool ------------------------------------------------------------------------------------
def convert(pth, num_heads, channels_opt):
    ck = load(pth)
    if not isinstance(ck, dict):
        raise bad_data(pth, f"holds a {type(ck).__name__}, not a checkpoint dictionary")
    args = ck.get("args")
    if not isinstance(args, (argparse.Namespace, dict)):
        args = {}
    if "student" in ck or "teacher" in ck:
        student = clean(pth, ck.get("student", ck.get("teacher")), "student")
        teacher = clean(pth, ck.get("teacher", ck.get("student")), "teacher")
    else:
        student = teacher = clean(pth, ck.get("state_dict", ck.get("model", ck)), "model")
    if set(student) != set(teacher):
        raise bad_data(pth, "student and teacher hold different tensors")
    for k in student:
        if student[k].shape != teacher[k].shape:
            raise bad_data(pth, f"tensor {k} has shape {list(student[k].shape)} in the student, "
                                f"{list(teacher[k].shape)} in the teacher")
    hp = hyperparameters(pth, student, args, num_heads)
    if channels_opt is not None:
        channels = channels_opt
    else:
        sel = arg(args, "selected_channels", (list, tuple))
        if sel is not None and not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c < 4096 for c in sel):
            raise bad_data(pth, f"args.selected_channels is {sel!r}, not a list of channel numbers")
        channels = [int(c) for c in sel] if sel is not None else list(range(hp["in_chans"]))
    if len(channels) != hp["in_chans"]:
        raise ToolError(EXIT_ARGS if channels_opt is not None else EXIT_DATA, pth,
                        f"{len(channels)} channels given, the patch embedding has {hp['in_chans']}")
    center = None
    dl = ck.get("dino_loss")
    if isinstance(dl, dict) and torch.is_tensor(dl.get("center")):
        center = dl["center"].detach().to(torch.float32).cpu().numpy()
        if center.size != hp.get("out_dim", center.size) or not np.isfinite(center).all():
            raise bad_data(pth, f"dino_loss.center has shape {list(center.shape)} or non-finite values "
                                f"(out_dim {hp.get('out_dim')})")
    e = ck.get("epoch", 0)
    epoch = int(e) if (torch.is_tensor(e) and e.numel() == 1) or (isinstance(e, int) and not isinstance(e, bool)) else 0
    if not 0 <= epoch <= 1 << 30:
        raise bad_data(pth, f"epoch {epoch} is out of range")
    return student, teacher, hp, channels, epoch, center


def main():
    p = ArgumentParser(prog=TOOL, description=__doc__.split("\n")[0])
    p.add_argument("pth", help="DINO/scDINO checkpoint (.pth)")
    p.add_argument("output", help="scdino checkpoint to write (.h5)")
    p.add_argument("--num-heads", type=int, default=0, help="attention heads (overrides args.num_heads and args.arch)")
    p.add_argument("--channels", default="", help="selected source channels, e.g. 0,1,2,3,4")
    a = p.parse_args()
    if a.num_heads < 0:
        raise ToolError(EXIT_ARGS, None, f"--num-heads {a.num_heads} must be positive")
    channels = None
    if a.channels:
        try:
            channels = [int(c) for c in a.channels.split(",")]
        except ValueError:
            raise ToolError(EXIT_ARGS, None, f"--channels {a.channels!r} is not a list of channel numbers") from None
        if any(c < 0 or c >= 4096 for c in channels):
            raise ToolError(EXIT_ARGS, None, f"--channels {a.channels!r}: channel numbers are 0 .. 4095")
    distinct_output(a.output, [a.pth])
    with reading(a.pth, "the checkpoint"):
        student, teacher, hp, channels, epoch, center = convert(a.pth, a.num_heads, channels)
    with writing(a.output):
        write(a.output, student, teacher, hp, channels, epoch, center)
    print(f"{a.output}: {len(student)} tensors per network, {hp['arch']} p{hp['patch_size']} "
          f"D={hp['embed_dim']} depth {hp['depth']} heads {hp['num_heads']}, {hp['in_chans']} channels"
          + (f", out_dim {hp['out_dim']}" if "out_dim" in hp else ", no head") + f", epoch {epoch}")


if __name__ == "__main__":
    run(TOOL, main)
