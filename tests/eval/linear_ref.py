#!/usr/bin/env python3
"""linear_ref.py - the PyTorch reference of scdino's linear probe (tests/eval/linear.sh).

    /usr/bin/python3 tests/eval/linear_ref.py run/linear.h5 [--wtol W] [--ltol L]

Trains DINO eval_linear's classifier again from what scdino's linear.h5 holds with
&linear save_inputs = .true.: the frozen features of the training and evaluation rows, the
initial weights, each epoch's order of the training rows and the settings.  As eval_linear.py:
nn.Linear(F, C) (weight given, bias 0), CrossEntropyLoss, torch.optim.SGD(lr = the scaled lr,
momentum, weight_decay), CosineAnnealingLR(T_max = epochs, eta_min = 0) stepped once per epoch,
batches of batch_size rows in the given order (the last one smaller), all in fp32 on the CPU.
It then compares, and prints the largest differences:
  - each epoch's lr: equal to the last bit (the same double arithmetic);
  - the final weight and bias: max |scdino - torch| <= W * max |torch| (default W = 1e-5);
  - each epoch's mean training loss, and the evaluation loss: relative difference <= L (1e-5);
  - each epoch's Top-1 / Top-5 and the final predictions: equal, on rows whose best two logits
    are further apart than the weights' tolerance (ties are left to the implementations).
Exit status: 0 agreement, 1 a difference beyond the tolerances, 77 without torch, h5py or numpy.
"""
import argparse
import sys

try:
    import h5py
    import numpy as np
    import torch
    from torch import nn
except ImportError as e:  # pragma: no cover - depends on the installation
    print(f"linear_ref.py: skipped: needs h5py, numpy and torch ({e})")
    sys.exit(77)


def topk_hits(logits, labels, k):
    k = min(k, logits.shape[1])
    best = torch.topk(logits, k, dim=1).indices
    return (best == labels[:, None]).any(dim=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("linear_h5")
    ap.add_argument("--wtol", type=float, default=1e-5)
    ap.add_argument("--ltol", type=float, default=1e-5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    f = h5py.File(a.linear_h5, "r")
    at = f.attrs
    epochs, bs = int(at["epochs"]), int(at["batch_size"])
    C = int(at["classes"])
    inp = f["inputs"]
    xt = torch.from_numpy(inp["train_features"][:])
    yt = torch.from_numpy(inp["train_labels"][:].astype(np.int64))
    order = inp["order"][:]
    xe = torch.from_numpy(inp["eval_features"][:])
    ye_all = torch.from_numpy(f["eval/label"][:].astype(np.int64))
    assert xt.dtype == torch.float32 and order.shape == (epochs, xt.shape[0]), (xt.dtype, order.shape)
    F = xt.shape[1]

    lin = nn.Linear(F, C)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(f["weight_init"][:]))
        lin.bias.zero_()
    opt = torch.optim.SGD(lin.parameters(), float(at["lr_scaled"]), momentum=float(at["momentum"]),
                          weight_decay=float(at["weight_decay"]))
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs, eta_min=0)
    ce = nn.CrossEntropyLoss()
    has_loss = ye_all < C
    lrs, train_loss, eval_loss, top1, top5 = [], [], [], [], []
    for e in range(epochs):
        lrs.append(opt.param_groups[0]["lr"])
        losses = []
        for b0 in range(0, xt.shape[0], bs):
            rows = torch.from_numpy(order[e, b0:b0 + bs].astype(np.int64))
            loss = ce(lin(xt[rows]), yt[rows])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        sched.step()
        train_loss.append(sum(losses) / len(losses))
        with torch.no_grad():
            out = lin(xe)
            eval_loss.append(ce(out[has_loss], ye_all[has_loss]).item() if has_loss.any() else 0.0)
            top1.append(100.0 * topk_hits(out, ye_all, 1).double().mean().item())
            top5.append(100.0 * topk_hits(out, ye_all, 5).double().mean().item())

    ok = True

    def check(what, good, detail):
        nonlocal ok
        print(f"{'ok  ' if good else 'FAIL'} {what}: {detail}")
        ok = ok and good

    ep = f["epochs"]
    s_lr = ep["lr"][:]
    check("lr per epoch", np.array_equal(s_lr, np.array(lrs)), f"max |diff| {np.abs(s_lr - lrs).max():.3g}")
    w_t, b_t = lin.weight.detach().numpy(), lin.bias.detach().numpy()
    scale = max(np.abs(w_t).max(), np.abs(b_t).max())
    dw = max(np.abs(f["weight"][:] - w_t).max(), np.abs(f["bias"][:] - b_t).max())
    check("final weight and bias", dw <= a.wtol * scale, f"max |diff| {dw:.3g}, {dw / scale:.3g} of max |w| {scale:.3g}")
    for name, mine, ref in (("training loss", ep["train_loss"][:], train_loss), ("evaluation loss", ep["eval_loss"][:],
                                                                                  eval_loss)):
        rel = np.abs(mine - np.array(ref)) / np.maximum(np.abs(ref), 1e-30)
        check(f"{name} per epoch", rel.max() <= a.ltol, f"max relative diff {rel.max():.3g}")
    # Accuracies and predictions: rows whose best two logits are close may go either way.
    with torch.no_grad():
        out = lin(xe)
    two = torch.topk(out, min(2, C), dim=1).values
    margin = (two[:, 0] - two[:, -1]) if C > 1 else torch.full((out.shape[0],), float("inf"))
    clear = margin > 10 * a.wtol * scale * (1 + xe.abs().sum(dim=1))
    pred = f["eval/prediction"][:]
    same = pred[clear.numpy()] == out.argmax(dim=1).numpy()[clear.numpy()]
    check("final predictions", same.all(), f"{int(same.sum())} of {int(clear.sum())} clear rows agree "
          f"({out.shape[0] - int(clear.sum())} near-ties skipped)")
    if bool(clear.all()):
        check("Top-1 per epoch", np.allclose(ep["top1"][:], top1, rtol=0, atol=1e-9),
              f"scdino {ep['top1'][-1]:.2f} %, torch {top1[-1]:.2f} % after the last epoch")
    if C >= 5:
        check("Top-5 per epoch", np.allclose(ep["top5"][:], top5, rtol=0, atol=1e-9) or not bool(clear.all()),
              f"scdino {ep['top5'][-1]:.2f} %, torch {top5[-1]:.2f} %")
    print("linear_ref: agree" if ok else "linear_ref: DIFFER")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
