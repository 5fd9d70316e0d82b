#!/usr/bin/env python3
"""Write tests/data/imgops_ref.h5: reference resizes for tests/unit/data/test_imgops.c.

Computed by PyTorch 1.13.1 and torchvision 0.14.1 (Debian python3-torch, python3-torchvision) with torch.nn.functional.interpolate
on CPU in float32, run with ATEN_CPU_CAPABILITY=default so that PyTorch uses its portable kernels
(no fused multiply-add).  scdino's imgops.c is meant to reproduce those bit for bit; the AVX2
kernels that PyTorch picks by default differ from them only by FMA rounding (dino_tiny.h5, made with
the AVX2 kernels, is compared with a tolerance instead).

    ATEN_CPU_CAPABILITY=default /usr/bin/python3 tests/data/make_imgops_ref.py tests/data/imgops_ref.h5

Layout: /input [3, 37, 29] (values in [0, 1) from a fixed numpy seed); /bicubic_HxW and
/bilinear_HxW (size= resizes of /input; the 224-pixel ones of channels 0-1 only); /crop_T_L_H_W_to_S (crop then bicubic to SxS, as
torchvision's RandomResizedCrop does); /posembed_S_to_N (a [3, S, S] grid /posgrid_S_to_N interpolated with
scale_factor=(N+0.1)/S, as DINO's interpolate_pos_encoding does); /gauss_sigma [200] float32 sigmas
drawn as torchvision's GaussianBlur draws them (uniform_(0.1, 1.5)) and /gauss_kernel5 [200, 5] the
1-D kernels torchvision 0.14.1 builds for them (_get_gaussian_kernel1d).
"""
import os
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F
from torchvision.transforms.functional_tensor import _get_gaussian_kernel1d

if os.environ.get("ATEN_CPU_CAPABILITY") != "default":
    sys.exit("run with ATEN_CPU_CAPABILITY=default (portable PyTorch kernels)")

out = sys.argv[1] if len(sys.argv) > 1 else "imgops_ref.h5"
rng = np.random.RandomState(1234)
x = rng.rand(3, 37, 29).astype(np.float32)
t = torch.from_numpy(x)[None]

with h5py.File(out, "w") as f:
    f.attrs["torch_version"] = str(torch.__version__)
    f.attrs["aten_cpu_capability"] = "default"
    f["input"] = x
    # 224-pixel outputs use channels 0-1 only, to keep the file small.  Not channel 0 alone: a
    # one-channel tensor is also channels-last contiguous, and PyTorch then takes a different
    # bilinear kernel (cpu_upsample_linear_channels_last) with its own rounding.
    for h, w in [(224, 224), (96, 96), (50, 61), (13, 11), (37, 29)]:
        src = t[:, :2] if h == 224 else t
        f["bicubic_%dx%d" % (h, w)] = F.interpolate(src, size=(h, w), mode="bicubic",
                                                      align_corners=False)[0].numpy()
        f["bilinear_%dx%d" % (h, w)] = F.interpolate(src, size=(h, w), mode="bilinear",
                                                       align_corners=False)[0].numpy()
    for top, left, h, w, s in [(3, 2, 30, 21, 96), (10, 4, 9, 13, 96), (0, 0, 37, 29, 96)]:
        c = t[:, :, top:top + h, left:left + w]
        f["crop_%d_%d_%d_%d_to_%d" % (top, left, h, w, s)] = F.interpolate(
            c, size=(s, s), mode="bicubic", align_corners=False)[0].numpy()
    for S, n in [(14, 6), (28, 12), (14, 30), (4, 2)]:
        g = (rng.rand(3, S, S).astype(np.float32) - 0.5) * 0.04
        f["posgrid_%d_to_%d" % (S, n)] = g
        sf = (n + 0.1) / S
        r = F.interpolate(torch.from_numpy(g)[None], scale_factor=(sf, sf), mode="bicubic",
                          align_corners=False)[0].numpy()
        assert r.shape[-1] == n
        f["posembed_%d_to_%d" % (S, n)] = r
    sig = torch.empty(200).uniform_(0.1, 1.5, generator=torch.Generator().manual_seed(7))
    f["gauss_sigma"] = sig.numpy()
    f["gauss_kernel5"] = np.stack([_get_gaussian_kernel1d(5, float(v)).numpy() for v in sig])
