#!/usr/bin/env python3
"""plot_study.py - the picture of a scdino channel study (calculation = 'study'), written to
RUN_DIR/plots/study.png.

    python3 examples/plot_study.py RUN_DIR [--k K] [--out DIR]

  study.png   kNN Top-1 accuracy of every channel set (RUN_DIR/study.h5): the trained features as
              bars, the baselines on the same channels (raw pixels, random initialisation) as
              markers, at one k (--k; default the k with the best trained Top-1 over all sets);
              a second panel has Top-1 against k for every set

Needs h5py, numpy and matplotlib (Debian: apt-get install python3-h5py python3-matplotlib; run it
with /usr/bin/python3 there).  The file is written under a temporary name and renamed, so it is
either complete or absent.  The numbers are the study's own: RUN_DIR/study.txt holds the same table.
"""
import argparse
import os
import sys

import h5py
import numpy as np
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


# The string and atomic-save helpers of plot_run.py, which sits beside this script.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot_run import log_k_axis, save, text  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--k", type=int, default=0, help="k of the bar chart (one of the study's k)")
    ap.add_argument("--out", default=None, help="folder of the picture (default RUN_DIR/plots)")
    a = ap.parse_args()
    path = os.path.join(a.run_dir, "study.h5")
    if not os.path.exists(path):
        sys.exit("plot_study.py: %s does not exist (run calculation = 'study' to the end first)" % path)
    with h5py.File(path, "r") as f:
        names = [text(s) for s in f["name"][:]]
        ks = [int(k) for k in f["k"][:]]
        sets = [g for g in ("trained", "raw_pixels", "random_init") if g in f]
        top1 = {g: np.asarray(f[g + "/top1"][:], dtype=float) for g in sets}
        label = {g: text(f[g].attrs.get("label", g)) for g in sets}
    if a.k:
        if a.k not in ks:
            sys.exit("plot_study.py: k = %d is not one of the study's k (%s)" % (a.k, ", ".join(map(str, ks))))
        ki = ks.index(a.k)
    else:
        ki = int(np.unravel_index(np.argmax(top1["trained"]), top1["trained"].shape)[1])
    x = np.arange(len(names))
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(max(7.0, 1.2 * len(names) + 5.0), 4.2),
                                  gridspec_kw={"width_ratios": [max(2, len(names)), 3]})
    bars = ax.bar(x, top1["trained"][:, ki], color="tab:blue", label="trained (%s)" % label["trained"])
    for b, v in zip(bars, top1["trained"][:, ki]):
        ax.text(b.get_x() + b.get_width() / 2, v + 1, "%.1f" % v, ha="center", va="bottom", fontsize=8)
    for g, m, c in (("raw_pixels", "s", "tab:orange"), ("random_init", "^", "tab:green")):
        if g in top1:
            ax.scatter(x, top1[g][:, ki], marker=m, color=c, zorder=3, label=label[g])
    ax.set_xticks(x)
    ax.set_xticklabels(names, rotation=30, ha="right")
    ax.set_ylim(0, 125)  # room for the legend above the bars
    ax.set_yticks(range(0, 101, 20))
    ax.set_ylabel("kNN Top-1 (%)")
    ax.set_title("channel sets at k = %d" % ks[ki])
    ax.legend(fontsize=8, loc="upper center", ncol=3)
    for i, n in enumerate(names):
        ax2.plot(ks, top1["trained"][i], marker="o", label=n)
    log_k_axis(ax2, ks)
    ax2.set_xlabel("k")
    ax2.set_ylabel("kNN Top-1 (%), trained")
    ax2.set_ylim(0, 105)
    ax2.legend(fontsize=8)
    ax2.set_title("Top-1 against k")
    fig.tight_layout()
    save(fig, a.out or os.path.join(a.run_dir, "plots"), "study.png")


if __name__ == "__main__":
    main()
