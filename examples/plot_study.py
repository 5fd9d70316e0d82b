#!/usr/bin/env python3
"""plot_study.py - the picture of a scdino study (calculation = 'study': channel sets,
hyperparameter settings, or both), written to RUN_DIR/plots/study.png.

    python3 examples/plot_study.py RUN_DIR [--k K] [--out DIR]

  study.png   kNN Top-1 accuracy of every run (channel set, setting; RUN_DIR/study.h5): the
              trained features as bars, the baselines on the same channels (raw pixels, random
              initialisation) as markers, at one k (--k; default the k with the best trained Top-1
              over all runs); a second panel has Top-1 against k for every run; when the settings
              vary one numeric key (teacher_temp, say), a third has Top-1 at that k against the
              key's value, a line per channel set

Reads study.h5 of version 2 (channel sets only) and 3 (with /setting and /settings).

Needs h5py, numpy and matplotlib (Debian: apt-get install python3-h5py python3-matplotlib; run it
with /usr/bin/python3 there), and plot_run.py and tool_errors.py beside it.  The file is written
under a temporary name and renamed, so it is either complete or absent.  The numbers are the
study's own: RUN_DIR/study.txt holds the same table.

Exit status (one line on stderr, 'plot_study.py: FILE: reason'): 0 success; 1 runtime failure (a
missing module, the picture cannot be written); 2 bad arguments (--k not one of the study's k,
an output that is the input); 3 a bad study.h5 (missing, not a regular file, damaged, of another
format or lacking a dataset).
"""
import os
import sys

# The errors, dataset, string and atomic-save helpers of tool_errors.py and plot_run.py, beside this script.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tool_errors import EXIT_ARGS, ArgumentParser, ToolError, bad_data, distinct_output, need_file  # noqa: E402
from tool_errors import reading, run  # noqa: E402

TOOL = "plot_study.py"
try:
    import h5py
    import numpy as np
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError as e:  # pragma: no cover - depends on the installation
    sys.exit(f"{TOOL}: needs h5py, numpy and matplotlib ({e})")
from plot_run import dataset, log_k_axis, save, text  # noqa: E402


def main():
    ap = ArgumentParser(prog=TOOL, description=__doc__.split("\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--k", type=int, default=0, help="k of the bar chart (one of the study's k)")
    ap.add_argument("--out", default=None, help="folder of the picture (default RUN_DIR/plots)")
    a = ap.parse_args()
    path = os.path.join(a.run_dir, "study.h5")
    if not os.path.lexists(path):
        raise bad_data(path, "no such file (run calculation = 'study' to the end first)")
    need_file(path)
    out = a.out or os.path.join(a.run_dir, "plots")
    distinct_output(os.path.join(out, "study.png"), [path])
    with reading(path, "the study report"):
        with h5py.File(path, "r") as f:
            names = [text(s) for s in dataset(f, path, "name", 1)]
            ks = [int(k) for k in dataset(f, path, "k", 1)]
            sets = [g for g in ("trained", "raw_pixels", "random_init") if g in f]
            if "trained" not in sets:
                raise bad_data(path, "no /trained group (not a study report, or damaged)")
            top1 = {g: np.asarray(dataset(f, path, g + "/top1", 2), dtype=float) for g in sets}
            label = {g: text(f[g].attrs.get("label", g)) for g in sets}
            vary = varied_key(f, path, len(names))
            chsets = [text(c) for c in dataset(f, path, "channel_set", 1)]
        for g in sets:
            if top1[g].shape != (len(names), len(ks)) or not len(ks):
                raise bad_data(path, "/%s/top1 has shape %s, not [%d sets, %d k]" % (g, list(top1[g].shape),
                                                                                  len(names), len(ks)))
        if a.k:
            if a.k not in ks:
                raise ToolError(EXIT_ARGS, None, "k = %d is not one of the study's k (%s)" % (
                    a.k, ", ".join(map(str, ks))))
            ki = ks.index(a.k)
        else:
            ki = int(np.unravel_index(np.argmax(top1["trained"]), top1["trained"].shape)[1])
        save(draw(names, ks, top1, label, ki, vary, chsets), out, "study.png")


def varied_key(f, path, n):
    """(key, values) when the settings (version 3) vary exactly one key of one number per run, else
    None."""
    g = f.get("settings")
    if not isinstance(g, h5py.Group) or len(g) != 1:
        return None
    key = list(g)[0]
    values = dataset(f, path, "settings/" + key, 1)
    if values.shape != (n,):
        raise bad_data(path, "/settings/%s has %d values, not one per run (%d)" % (key, len(values), n))
    if values.dtype.kind not in "if":
        return None
    return key.split(".")[-1], np.asarray(values, dtype=float)


def draw(names, ks, top1, label, ki, vary, chsets):
    x = np.arange(len(names))
    ratios = [max(2, len(names)), 3] + ([3] if vary else [])
    fig, axes = plt.subplots(1, len(ratios), figsize=(max(7.0, 1.2 * len(names) + 5.0) + (4.0 if vary else 0.0), 4.2),
                             gridspec_kw={"width_ratios": ratios})
    ax, ax2 = axes[0], axes[1]
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
    ax.set_title("%s at k = %d" % ("runs" if vary or any(c == "" for c in chsets) else "channel sets", ks[ki]))
    ax.legend(fontsize=8, loc="upper center", ncol=3)
    for i, n in enumerate(names):
        ax2.plot(ks, top1["trained"][i], marker="o", label=n)
    log_k_axis(ax2, ks)
    ax2.set_xlabel("k")
    ax2.set_ylabel("kNN Top-1 (%), trained")
    ax2.set_ylim(0, 105)
    ax2.legend(fontsize=8)
    ax2.set_title("Top-1 against k")
    if vary:
        key, values = vary
        ax3 = axes[2]
        for c in dict.fromkeys(chsets):  # a line per channel set, in the study's order
            rows = [i for i in range(len(names)) if chsets[i] == c]
            rows.sort(key=lambda i: values[i])
            ax3.plot(values[rows], top1["trained"][rows, ki], marker="o", label=c or "trained")
        ax3.set_xlabel(key)
        ax3.set_ylabel("kNN Top-1 (%%), trained, k = %d" % ks[ki])
        ax3.set_ylim(0, 105)
        ax3.legend(fontsize=8)
        ax3.set_title("Top-1 against %s" % key)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    run(TOOL, main)
