#!/usr/bin/env python3
"""torch_dino_step.py - the DINO training step of bench/gpu_train_bench, written in PyTorch.

The same model and step (ViT with a DINO head, teacher on the 2 global crops, student on all
crops, DINO loss with centring, backward, per-parameter clipping, AdamW with DINO's two parameter
groups, teacher EMA), timed in three modes:
  eager         bf16 autocast, F.scaled_dot_product_attention (flash attention kernels)
  compile       the same with torch.compile on the student and teacher networks
  max-autotune  torch.compile(mode="max-autotune"): GEMM templates autotuned per shape, CUDA graphs
                (compiles for minutes)
--fused uses torch.optim.AdamW(fused=True), one kernel for the whole update, instead of the
default (foreach) implementation.  --precision fp16 is upstream's use_fp16: fp16 autocast with a
GradScaler (scale the loss, unscale_ before the clipping, step and update: a step whose gradients
overflow is skipped), scdino's &training precision = 'fp16'; bf16 (the default) has no scaler.
Crops are random tensors already on the GPU (no augmentation): compare with the "model only" line
of gpu_train_bench.  The FLOP count and the MFU peak are those of gpu_train_bench.
The last lines are "RESULT key=value ..." for tests/gpu/run.sh and BENCH lines named
torch_dino_step.MODE for bench/run_all (bench/bench_result.py).

usage: python3 bench/torch_dino_step.py [--mode eager|compile|max-autotune] [--fused] [--batch 64]
       [--steps 10] [--gelu none|tanh] [--precision bf16|fp16] ...
(--device cpu with a small model checks the script where there is no GPU; its numbers mean nothing.)
"""
import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from bench_result import bench_result  # bench/bench_result.py, next to this script

GELU = "none"  # nn.GELU's approximate= (--gelu; scdino's &model gelu_approximate)


# Dense bf16 (= fp16) tensor-core peaks by CUDA device name (NVIDIA's datasheets; gpu_train_bench's
# table); the T4 and V100 have fp16 tensor cores only.
GPU_PEAKS = [(("H100", "PCIe"), 756.5e12), (("H100", "NVL"), 835.5e12), (("H200", "NVL"), 835.5e12),
             (("H200",), 989.4e12), (("H100",), 989.4e12), (("T4",), 65e12), (("V100",), 125e12)]


def gpu_peak_bf16(name):
    for keys, peak in GPU_PEAKS:
        if all(k in name for k in keys):
            return peak
    return float("nan")


def drop_path(x, rate, training):
    """Stochastic depth: per sample, the branch is dropped with probability rate, else scaled up."""
    if rate == 0.0 or not training:
        return x
    keep = 1.0 - rate
    mask = torch.empty((x.shape[0],) + (1,) * (x.ndim - 1), dtype=x.dtype, device=x.device)
    return x * mask.bernoulli_(keep) / keep


class Block(nn.Module):
    def __init__(self, dim, heads, hidden, rate):
        super().__init__()
        self.heads, self.rate = heads, rate
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def attention(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v)
        else:  # torch < 2.0 (Debian's 1.13: the --device cpu check in make check)
            y = torch.softmax((q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1), dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, n, d))

    def forward(self, x):
        x = x + drop_path(self.attention(self.norm1(x)), self.rate, self.training)
        h = self.fc2(F.gelu(self.fc1(self.norm2(x)), approximate=GELU))
        return x + drop_path(h, self.rate, self.training)


class ViT(nn.Module):
    def __init__(self, chans, patch, dim, depth, heads, rate, grid):
        super().__init__()
        self.patch, self.grid = patch, grid
        self.patch_embed = nn.Conv2d(chans, dim, patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, 1 + grid * grid, dim) * 0.02)
        rates = [rate * i / max(depth - 1, 1) for i in range(depth)]
        self.blocks = nn.ModuleList(Block(dim, heads, 4 * dim, r) for r in rates)
        self.norm = nn.LayerNorm(dim, eps=1e-6)

    def pos(self, gh, gw):
        if gh == self.grid and gw == self.grid:
            return self.pos_embed
        cls, p = self.pos_embed[:, :1], self.pos_embed[:, 1:]
        d = p.shape[-1]
        p = p.reshape(1, self.grid, self.grid, d).permute(0, 3, 1, 2)
        # DINO's interpolate_pos_encoding: scale factors (n + 0.1) / grid, bicubic
        p = F.interpolate(p, scale_factor=((gh + 0.1) / self.grid, (gw + 0.1) / self.grid), mode="bicubic")
        return torch.cat([cls, p.permute(0, 2, 3, 1).reshape(1, gh * gw, d)], dim=1)

    def forward(self, x):
        b, _, h, w = x.shape
        t = self.patch_embed(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls_token.expand(b, -1, -1), t], dim=1) + self.pos(h // self.patch, w // self.patch)
        for blk in self.blocks:
            t = blk(t)
        return self.norm(t)[:, 0]


class Head(nn.Module):
    def __init__(self, dim, hidden, bottleneck, out, nlayers=3):
        super().__init__()
        layers, d = [], dim
        for _ in range(nlayers - 1):
            layers += [nn.Linear(d, hidden), nn.GELU(approximate=GELU)]
            d = hidden
        layers.append(nn.Linear(d, bottleneck))
        self.mlp = nn.Sequential(*layers)
        if hasattr(nn.utils.parametrizations, "weight_norm"):
            self.last_layer = nn.utils.parametrizations.weight_norm(nn.Linear(bottleneck, out, bias=False))
            g = self.last_layer.parametrizations.weight.original0
        else:  # torch < 2.1
            self.last_layer = nn.utils.weight_norm(nn.Linear(bottleneck, out, bias=False))
            g = self.last_layer.weight_g
        g.data.fill_(1.0)
        g.requires_grad = False  # norm_last_layer

    def forward(self, x):
        return self.last_layer(F.normalize(self.mlp(x), dim=-1, p=2))


class MultiCrop(nn.Module):
    def __init__(self, backbone, head):
        super().__init__()
        self.backbone, self.head = backbone, head

    def forward(self, crops):
        return self.head(torch.cat([self.backbone(c) for c in crops]))


def dino_loss(student, teacher, center, ncrops, st=0.1, tt=0.04):
    s = (student / st).chunk(ncrops)
    t = F.softmax((teacher - center) / tt, dim=-1).detach().chunk(2)
    total, n = 0.0, 0
    for i, q in enumerate(t):
        for v, sv in enumerate(s):
            if v == i:
                continue
            total = total + torch.sum(-q * F.log_softmax(sv, dim=-1), dim=-1).mean()
            n += 1
    return total / n


def vit_flops(dim, depth, hidden, chans, patch, b, n, npatch):
    block = 2 * b * n * (4 * dim * dim + 2 * dim * hidden) + 4 * b * n * n * dim
    return depth * block + 2 * b * npatch * dim * chans * patch * patch


def head_flops(dim, hidden, bottleneck, out, nlayers, rows):
    return 2 * rows * (dim * hidden + hidden * hidden * (nlayers - 2) + hidden * bottleneck + bottleneck * out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["eager", "compile", "max-autotune"], default="eager")
    ap.add_argument("--fused", action="store_true", help="torch.optim.AdamW(fused=True)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--depth", type=int, default=12)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--patch", type=int, default=16)
    ap.add_argument("--chans", type=int, default=5)
    ap.add_argument("--global-size", type=int, default=224)
    ap.add_argument("--local-size", type=int, default=96)
    ap.add_argument("--n-local", type=int, default=8)
    ap.add_argument("--out-dim", type=int, default=65536)
    ap.add_argument("--peak-tflops", type=float, default=0.0)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--gelu", choices=["none", "tanh"], default="none",
                    help="GELU form (nn.GELU approximate=), as scdino's &model gelu_approximate")
    ap.add_argument("--precision", choices=["bf16", "fp16"], default="bf16",
                    help="autocast type; fp16 with a GradScaler, as upstream's use_fp16")
    a = ap.parse_args()
    global GELU
    GELU = a.gelu
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize()
    torch.manual_seed(40)
    grid = 224 // a.patch

    def build():
        return MultiCrop(ViT(a.chans, a.patch, a.dim, a.depth, a.heads, 0.1, grid),
                         Head(a.dim, 2048, 256, a.out_dim)).to(dev)

    student, teacher = build(), build()
    teacher.load_state_dict(student.state_dict())
    for p in teacher.parameters():
        p.requires_grad = False
    teacher.eval()
    reg = [p for n, p in student.named_parameters() if p.requires_grad and not (n.endswith(".bias") or p.ndim == 1)]
    noreg = [p for n, p in student.named_parameters() if p.requires_grad and (n.endswith(".bias") or p.ndim == 1)]
    kw = {"fused": True} if a.fused else {}
    opt = torch.optim.AdamW([{"params": reg}, {"params": noreg, "weight_decay": 0.0}], lr=1e-4, weight_decay=0.04,
                            **kw)
    fs, ft = student, teacher
    if a.mode == "compile":
        fs, ft = torch.compile(student), torch.compile(teacher)
    elif a.mode == "max-autotune":
        fs, ft = torch.compile(student, mode="max-autotune"), torch.compile(teacher, mode="max-autotune")
    center = torch.zeros(1, a.out_dim, device=dev)
    b = a.batch
    g = [torch.randn(b, a.chans, a.global_size, a.global_size, device=dev) for _ in range(2)]
    loc = [torch.randn(b, a.chans, a.local_size, a.local_size, device=dev) for _ in range(a.n_local)]
    params = [p for p in student.parameters() if p.requires_grad]
    amp = torch.float16 if a.precision == "fp16" else torch.bfloat16
    scaler = None
    if a.precision == "fp16":  # GradScaler's defaults (init 2^16, growth 2 every 2000, backoff 0.5)
        scaler = (torch.amp.GradScaler(dev.type) if hasattr(torch.amp, "GradScaler")
                  else torch.cuda.amp.GradScaler(enabled=cuda))
    s_params = [p for p in student.parameters()]
    t_params = [p for p in teacher.parameters()]

    def step():
        with torch.autocast(dev.type, dtype=amp):
            with torch.no_grad():
                t_out = ft([torch.cat(g)]).float()
            s_out = fs([torch.cat(g)] + ([torch.cat(loc)] if loc else [])).float()
            loss = dino_loss(s_out, t_out, center, 2 + a.n_local)
        opt.zero_grad(set_to_none=True)
        if scaler is not None:  # upstream's order: scale, backward, unscale_, clip, step, update
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
        else:
            loss.backward()
        grads = [p.grad for p in params]
        norms = torch._foreach_norm(grads)  # per-parameter clipping, without host syncs
        coefs = [torch.clamp(3.0 / (n + 1e-6), max=1.0) for n in norms]
        torch._foreach_mul_(grads, coefs)
        if scaler is not None:
            scaler.step(opt)  # skipped when unscale_ found an inf or NaN
            scaler.update()
        else:
            opt.step()
        with torch.no_grad():
            center.mul_(0.9).add_(t_out.sum(dim=0, keepdim=True) / t_out.shape[0], alpha=0.1)
            torch._foreach_mul_(t_params, 0.996)
            torch._foreach_add_(t_params, s_params, alpha=0.004)
        return loss

    times, first = [], 0.0
    for it in range(a.warmup + a.steps):
        sync()
        t0 = time.perf_counter()
        loss = step()
        sync()
        dt = time.perf_counter() - t0
        if it >= a.warmup:
            times.append(dt)
        if it == 0:
            first = dt  # with the compilation
        print(f"{a.mode} step {it:2d}{' (warm-up)' if it < a.warmup else ''}: {1e3 * dt:.1f} ms, loss {loss.item():.4f}")
    ms = statistics.median(times) * 1e3
    ng = 1 + (a.global_size // a.patch) ** 2
    nl = 1 + (a.local_size // a.patch) ** 2
    hid = 4 * a.dim
    fwd_s = (vit_flops(a.dim, a.depth, hid, a.chans, a.patch, 2 * b, ng, ng - 1)
             + vit_flops(a.dim, a.depth, hid, a.chans, a.patch, a.n_local * b, nl, nl - 1)
             + head_flops(a.dim, 2048, 256, a.out_dim, 3, (2 + a.n_local) * b))
    fwd_t = vit_flops(a.dim, a.depth, hid, a.chans, a.patch, 2 * b, ng, ng - 1) + head_flops(a.dim, 2048, 256, a.out_dim, 3, 2 * b)
    flops = 3 * fwd_s + fwd_t
    name = torch.cuda.get_device_name() if cuda else "CPU"
    peak = a.peak_tflops * 1e12 or gpu_peak_bf16(name)
    mfu = flops / (ms * 1e-3) / peak
    mem = torch.cuda.max_memory_allocated() / 2**20 if cuda else float("nan")
    label = a.mode + ("-fused" if a.fused else "") + ("-fp16" if a.precision == "fp16" else "")
    scale = scaler.get_scale() if scaler is not None else 1.0
    print(f"{name}, torch {torch.__version__}: {label}, batch {b}: median {ms:.1f} ms per step, "
          f"{b / (ms * 1e-3):.1f} images/s, {flops / 1e9:.1f} GFLOP per step, MFU {100 * mfu:.1f}%, peak memory {mem:.0f} MiB")
    print(f"RESULT mode={a.mode} batch={b} step_ms={ms:.2f} images_per_s={b / (ms * 1e-3):.1f} mfu={mfu:.4f} "
          f"peak_mib={mem:.0f} gflop={flops / 1e9:.1f} flop={flops} torch={torch.__version__} gelu={a.gelu} "
          f"fused={int(a.fused)} first_step_s={first:.1f} precision={a.precision} loss_scale={scale:g}")
    notes = (f"{name}, torch {torch.__version__}, batch {b}, {a.precision} autocast"
             f"{' + GradScaler' if scaler is not None else ''}, AdamW {'fused' if a.fused else 'foreach'}, "
             f"{flops / 1e9:.1f} GFLOP per step")
    bn = (f"torch_dino_step.{a.mode}" + (".fused" if a.fused else "") + (".gelu-tanh" if a.gelu == "tanh" else "")
          + (".fp16" if a.precision == "fp16" else ""))
    bench_result(bn, "step_time", ms, "ms", notes + f", median of {a.steps}")
    bench_result(bn, "images_per_s", b / (ms * 1e-3), "images/s", notes)
    bench_result(bn, "mfu", 100 * mfu, "%", f"against {peak / 1e12:.1f} TFLOP/s")
    bench_result(bn, "peak_memory", mem, "MiB", "torch.cuda.max_memory_allocated")


if __name__ == "__main__":
    main()
