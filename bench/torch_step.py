#!/usr/bin/env python3
"""torch_step.py - time full DINO training steps of a ViT in PyTorch on the CPU (bench/cpu_vs_torch.sh).

    python3 bench/torch_step.py -D 192 -L 12 -H 3 -p 16 -C 5 -B 8 -g 224 -l 96 -n 8 -K 65536 -s 3 -t 2

The same step as scdino's bench/train_step (same options): teacher forward on the 2 global crops,
student forward on all crops (backbone once per crop size, head once on all rows), DINO loss with
centring, backward, per-parameter gradient clipping, AdamW on upstream's two parameter groups,
teacher EMA.  The model follows DINO's vision_transformer.py (pre-norm blocks, qkv with bias,
exact GELU, LayerNorm eps 1e-6, CLS output after the final norm, bicubic position-embedding
interpolation with the +0.1 offset) and DINOHead (Linear-GELU-Linear-GELU-Linear, L2 normalisation,
weight-normalised last layer with weight_g frozen); inputs are random normal crops.  Written for
this benchmark; prints one line per step and "best step X s" like train_step.
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from bench_result import bench_result  # bench/bench_result.py, next to this script


class Block(nn.Module):
    def __init__(self, d, heads, hidden, drop):
        super().__init__()
        self.norm1 = nn.LayerNorm(d, eps=1e-6)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.norm2 = nn.LayerNorm(d, eps=1e-6)
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)
        self.heads, self.drop = heads, drop

    def droppath(self, x):
        if not self.training or self.drop == 0:
            return x
        keep = 1 - self.drop
        mask = torch.floor(keep + torch.rand(x.shape[0], 1, 1, dtype=x.dtype))
        return x / keep * mask

    def attn(self, x):
        B, N, D = x.shape
        h = self.heads
        q, k, v = self.qkv(x).reshape(B, N, 3, h, D // h).permute(2, 0, 3, 1, 4)
        a = torch.softmax((q @ k.transpose(-2, -1)) * (D // h) ** -0.5, dim=-1)
        return self.proj((a @ v).transpose(1, 2).reshape(B, N, D))

    def forward(self, x):
        x = x + self.droppath(self.attn(self.norm1(x)))
        return x + self.droppath(self.fc2(F.gelu(self.fc1(self.norm2(x)))))


class ViT(nn.Module):
    def __init__(self, p, c, d, depth, heads, hidden, grid, drop_path):
        super().__init__()
        self.p, self.grid = p, grid
        self.patch = nn.Conv2d(c, d, p, p)
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, grid * grid + 1, d) * 0.02)
        rates = [drop_path * i / max(1, depth - 1) for i in range(depth)]
        self.blocks = nn.ModuleList(Block(d, heads, hidden, r) for r in rates)
        self.norm = nn.LayerNorm(d, eps=1e-6)

    def pos_for(self, h, w):
        gh, gw = h // self.p, w // self.p
        if gh == self.grid and gw == self.grid:
            return self.pos
        d = self.pos.shape[-1]
        patch = self.pos[:, 1:].reshape(1, self.grid, self.grid, d).permute(0, 3, 1, 2)
        patch = F.interpolate(patch, scale_factor=((gh + 0.1) / self.grid, (gw + 0.1) / self.grid),
                              mode="bicubic", align_corners=False)
        return torch.cat((self.pos[:, :1], patch.permute(0, 2, 3, 1).reshape(1, -1, d)), dim=1)

    def forward(self, x):
        B, _, h, w = x.shape
        t = self.patch(x).flatten(2).transpose(1, 2)
        t = torch.cat((self.cls.expand(B, -1, -1), t), dim=1) + self.pos_for(h, w)
        for b in self.blocks:
            t = b(t)
        return self.norm(t)[:, 0]


class Head(nn.Module):
    def __init__(self, d, out_dim, hidden, bottleneck):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
                                 nn.Linear(hidden, bottleneck))
        self.last = nn.utils.weight_norm(nn.Linear(bottleneck, out_dim, bias=False))
        self.last.weight_g.data.fill_(1)
        self.last.weight_g.requires_grad = False

    def forward(self, x):
        return self.last(F.normalize(self.mlp(x), dim=-1, p=2))


class Net(nn.Module):
    def __init__(self, a, drop_path):
        super().__init__()
        self.backbone = ViT(a.p, a.C, a.D, a.L, a.H, 4 * a.D, 224 // a.p, drop_path)
        self.head = Head(a.D, a.K, a.M, a.b)

    def forward(self, crops):
        out, start = [], 0
        while start < len(crops):  # one backbone call per run of equal-size crops
            end = start
            while end < len(crops) and crops[end].shape[-1] == crops[start].shape[-1]:
                end += 1
            out.append(self.backbone(torch.cat(crops[start:end])))
            start = end
        return self.head(torch.cat(out))


def dino_loss(s, t, center, ncrops, tt=0.04, st=0.1):
    s = (s / st).chunk(ncrops)
    q = F.softmax((t - center) / tt, dim=-1).detach().chunk(2)
    total, n = 0, 0
    for i, qi in enumerate(q):
        for v in range(ncrops):
            if v != i:
                total = total + torch.sum(-qi * F.log_softmax(s[v], dim=-1), dim=-1).mean()
                n += 1
    return total / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for k, v in (("D", 192), ("L", 12), ("H", 3), ("p", 16), ("C", 5), ("B", 8), ("g", 224), ("l", 96),
                 ("n", 8), ("K", 65536), ("M", 2048), ("b", 256), ("s", 3), ("t", 0)):
        ap.add_argument("-" + k, type=int, default=v)
    a = ap.parse_args()
    if a.t > 0:
        torch.set_num_threads(a.t)
    torch.manual_seed(0)
    student, teacher = Net(a, 0.1), Net(a, 0.0)
    teacher.load_state_dict(student.state_dict())
    for p in teacher.parameters():
        p.requires_grad = False
    named = [(n, p) for n, p in student.named_parameters() if p.requires_grad]
    groups = [{"params": [p for n, p in named if not (n.endswith(".bias") or p.ndim == 1)]},
              {"params": [p for n, p in named if n.endswith(".bias") or p.ndim == 1], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups)
    for g in opt.param_groups:
        g["lr"] = 1e-4
    opt.param_groups[0]["weight_decay"] = 0.04
    center = torch.zeros(1, a.K)
    crops = [torch.randn(a.B, a.C, a.g, a.g) for _ in range(2)] + \
            [torch.randn(a.B, a.C, a.l, a.l) for _ in range(a.n)]
    ncrops = 2 + a.n
    nparam = sum(p.numel() for p in student.parameters())
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads; ViT D={a.D} depth={a.L} "
          f"heads={a.H} p={a.p} C={a.C}, head K={a.K}; B={a.B}, global {a.g} x2, local {a.l} x{a.n}; "
          f"{nparam} parameters")
    best = math.inf
    for it in range(a.s + 1):
        t0 = time.perf_counter()
        with torch.no_grad():
            t_out = teacher(crops[:2])
        s_out = student(crops)
        loss = dino_loss(s_out, t_out, center, ncrops)
        with torch.no_grad():
            center = center * 0.9 + t_out.sum(dim=0, keepdim=True) / len(t_out) * 0.1
        t1 = time.perf_counter()
        opt.zero_grad()
        loss.backward()
        t2 = time.perf_counter()
        for p in student.parameters():
            if p.grad is not None:
                c = 3.0 / (p.grad.data.norm(2) + 1e-6)
                if c < 1:
                    p.grad.data.mul_(c)
        opt.step()
        with torch.no_grad():
            for ps, pt in zip(student.parameters(), teacher.parameters()):
                pt.data.mul_(0.996).add_((1 - 0.996) * ps.detach().data)
        t3 = time.perf_counter()
        tot = t3 - t0
        print(f"{'(warm-up)' if it == 0 else ''} step {it}: {tot:.3f} s (forward+loss {t1 - t0:.3f}, "
              f"backward {t2 - t1:.3f}, optimizer+EMA {t3 - t2:.3f}); {a.B / tot:.2f} images/s; "
              f"loss {loss.item():.4f}")
        if it and tot < best:
            best = tot
    print(f"best step {best:.3f} s, {a.B / best:.2f} images/s")
    notes = (f"PyTorch {torch.__version__}, ViT D={a.D} L={a.L} p={a.p} C={a.C} K={a.K}, batch {a.B}, "
             f"crops 2x{a.g}+{a.n}x{a.l}, {torch.get_num_threads()} threads, best of {a.s}")
    bench_result("torch_step", "step_time", best, "s", notes)
    bench_result("torch_step", "images_per_s", a.B / best, "images/s", notes)


if __name__ == "__main__":
    main()
