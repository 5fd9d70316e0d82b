#!/usr/bin/env python3
"""plot_run.py - pictures of a scdino run directory, written to RUN_DIR/plots/.

    python3 examples/plot_run.py RUN_DIR [--features FILE] [--embedding auto|umap|tsne]
                                 [--max-points N] [--attention-images N] [--out DIR]

  loss.png        training loss, learning rate and weight decay per epoch, and the collapse
                  diagnostics: the teacher's entropy per image and of the batch mean, the KL part
                  of the loss, against ln out_dim (RUN_DIR/log.txt, out_dim from input.echo.nml)
  embedding.png   2-D embedding of the CLS features coloured by class: UMAP when umap-learn is
                  installed (n_neighbors 15, min_dist 0.1, as upstream's plot_in_2D.py), otherwise
                  t-SNE from scikit-learn (the newest RUN_DIR/features_EEEE.h5, or --features)
  knn.png         kNN: confusion matrix of the trained features at the report's k (row-normalised,
                  counts written in the cells) and Top-1 accuracy against k for every feature set
                  (RUN_DIR/knn.h5)
  knn_epochs.png  kNN Top-1 against the epoch at every k, the baselines as horizontal lines
                  (RUN_DIR/knn_epochs.txt, written with &features epochs)
  attention.png   attention overlays: for each image (every class's first before any second), its
                  input channels as a grey mean, and over it the mean over heads and each head's
                  CLS-to-patch map (RUN_DIR/attention.h5, the larger image size)

Needs h5py, numpy and matplotlib (Debian: apt-get install python3-h5py python3-matplotlib
python3-sklearn; run it with /usr/bin/python3 there), and tool_errors.py beside it.  Plots whose
input file is missing are left out with a note (on stdout), and so is the embedding when neither
umap-learn nor scikit-learn is installed.  Files are written under a temporary name and renamed,
so a plot is either complete or absent; an input is never overwritten.

Exit status (one line on stderr, 'plot_run.py: FILE: reason'): 0 something was drawn; 1 nothing
could be drawn (no input file at all), a module is missing, or a picture cannot be written; 2 bad
arguments (an output that is an input); 3 a bad input (RUN_DIR not a directory, --features
missing, a file that is damaged, of another format or lacking a dataset).  The plots drawn before
a bad file was met are kept.
"""
import colorsys
import importlib.util
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tool_errors import EXIT_ARGS, EXIT_FAILURE, ArgumentParser, ToolError, bad_data, distinct_output  # noqa: E402
from tool_errors import atomic_output, need_file, reading, run, writing  # noqa: E402

TOOL = "plot_run.py"
try:
    import h5py
    import numpy as np
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError as e:  # pragma: no cover - depends on the installation
    sys.exit(f"{TOOL}: needs h5py, numpy and matplotlib ({e})")
PLOTS = ("loss.png", "embedding.png", "knn.png", "knn_epochs.png", "attention.png")


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def one_class_if_unlabelled(labels, names):
    """Rows of an unlabelled shard set (no class names, every label -1) as one class."""
    if not names and len(labels) and (labels == -1).all():
        return np.zeros_like(labels), ["unlabelled"]
    return labels, names


def dataset(f, path, name, ndim=None):
    """The dataset `name` of the open file f (read from path): it must exist and, given ndim, have
    that many dimensions."""
    d = f.get(name)
    if not isinstance(d, h5py.Dataset):
        raise bad_data(path, "no dataset /%s (not the file this plot reads, or damaged)" % name)
    if ndim is not None and d.ndim != ndim:
        raise bad_data(path, "dataset /%s has %d dimension(s), not %d" % (name, d.ndim, ndim))
    return d[()]


def save(fig, out_dir, name):
    """fig as out_dir/name.  Called inside reading(): a picture that the input's numbers make
    impossible (say, too large) fails naming the input, a failed write fails naming the picture."""
    path = os.path.join(out_dir, name)
    try:
        with writing(path):
            os.makedirs(out_dir, exist_ok=True)
            with atomic_output(path) as tmp:
                fig.savefig(tmp, format="png", dpi=130, bbox_inches="tight")
    finally:
        plt.close(fig)
    print("wrote", path)


def log_k_axis(ax, ks):
    """A log axis for the kNN's k, ticked at the evaluated k."""
    ax.set_xscale("log")
    ax.set_xticks(ks)
    ax.set_xticklabels([str(k) for k in ks])
    ax.minorticks_off()


def class_colours(n):
    """matplotlib's qualitative tab10 / tab20 up to 20 classes (neighbouring classes stay apart);
    beyond that seaborn's 'hls' palette that upstream's UMAP plot uses (hues evenly spaced,
    lightness 0.6, saturation 0.65)."""
    if n <= 10:
        return [plt.get_cmap("tab10")(i) for i in range(n)]
    if n <= 20:
        return [plt.get_cmap("tab20")(i) for i in range(n)]
    return [colorsys.hls_to_rgb((i / n + 0.01) % 1.0, 0.6, 0.65) for i in range(n)]


# ---- loss / lr ------------------------------------------------------------------------------------
def plot_loss(run_dir, out_dir):
    path = os.path.join(run_dir, "log.txt")
    if not os.path.exists(path):
        print("note: no", path, "- loss plot left out")
        return False
    need_file(path)
    rows = []
    with reading(path, "the training log"):
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if line:
                    try:
                        r = json.loads(line)
                    except ValueError as e:
                        raise bad_data(path, "line %d is not JSON (%s)" % (n, e)) from None
                    if not isinstance(r, dict):
                        raise bad_data(path, "line %d is not a JSON object" % n)
                    rows.append(r)
        rows = [r for r in rows if "epoch" in r]
        if not rows:
            print("note:", path, "holds no epochs - loss plot left out")
            return False
        ep = np.array([r["epoch"] for r in rows], dtype=float)
        val = lambda key: np.array([np.nan if r.get(key) is None else r[key] for r in rows], dtype=float)
        loss, lr, wd = val("train_loss"), val("train_lr"), val("train_wd")
        diag = None
        if any("teacher_entropy" in r for r in rows):  # logs since the collapse diagnostics
            diag = {key: val(key) for key in ("teacher_entropy", "teacher_batch_entropy", "kl")}
            diag["ln_k"] = ln_out_dim(run_dir)
        save(draw_loss(run_dir, ep, loss, lr, wd, diag), out_dir, "loss.png")
        print("loss.png: loss, schedules%s" % (", teacher entropy and KL" if diag else ""))
    return True


def ln_out_dim(run_dir):
    """ln out_dim from the run's echoed deck (None when it is not there or names none)."""
    path = os.path.join(run_dir, "input.echo.nml")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            m = re.search(r"^\s*out_dim\s*=\s*(\d+)", f.read(), re.M)
    except OSError:
        return None
    return math.log(int(m.group(1))) if m and int(m.group(1)) > 0 else None


def draw_loss(run_dir, ep, loss, lr, wd, diag):
    fig, axes = plt.subplots(1, 3 if diag else 2, figsize=(15 if diag else 10, 3.6))
    a, b = axes[0], axes[1]
    a.plot(ep, loss, "o-", color="C0", ms=4)
    a.set_xlabel("epoch")
    a.set_ylabel("DINO loss (epoch mean)")
    a.set_title("training loss")
    a.grid(alpha=0.3)
    b.plot(ep, lr, "o-", color="C1", ms=4, label="learning rate")
    b.set_xlabel("epoch")
    b.set_ylabel("learning rate (epoch mean)", color="C1")
    b.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    b.grid(alpha=0.3)
    c = b.twinx()
    c.plot(ep, wd, "s--", color="C2", ms=3, label="weight decay")
    c.set_ylabel("weight decay (epoch mean)", color="C2")
    b.set_title("schedules")
    if diag:
        d = axes[2]
        d.plot(ep, diag["teacher_entropy"], "o-", color="C3", ms=3, label="teacher entropy per image")
        d.plot(ep, diag["teacher_batch_entropy"], "s-", color="C4", ms=3, label="entropy of the batch mean")
        d.plot(ep, diag["kl"], "^-", color="C5", ms=3, label="KL part of the loss")
        if diag["ln_k"]:
            d.axhline(diag["ln_k"], color="grey", ls="--", lw=1, label="ln out_dim (uniform targets)")
        d.set_xlabel("epoch")
        d.set_ylabel("nats (epoch mean)")
        d.set_title("collapse diagnostics")
        d.legend(fontsize=7)
        d.grid(alpha=0.3)
        fig.subplots_adjust(wspace=0.5)  # room for the weight-decay axis between the panels
    if len(ep) < 12:
        for ax in axes:
            ax.set_xticks(ep)
    fig.suptitle(os.path.abspath(run_dir), fontsize=8, y=1.02)
    return fig


# ---- 2-D embedding ------------------------------------------------------------------------------
def newest_features(run_dir):
    best, best_e = None, -1
    try:
        names = os.listdir(run_dir)
    except OSError as e:
        raise bad_data(run_dir, "cannot list it: %s" % (e.strerror or e)) from None
    for name in names:
        m = re.fullmatch(r"features_(\d+)\.h5", name)
        if m and int(m.group(1)) > best_e:
            best, best_e = os.path.join(run_dir, name), int(m.group(1))
    return best


def embedder(method):
    """The module that draws the embedding ('umap' or 'tsne'), None when none is installed."""
    if method in ("auto", "umap"):
        if importlib.util.find_spec("umap"):  # umap-learn
            return "umap"
        if method == "umap":
            raise ToolError(EXIT_FAILURE, None,
                            "umap-learn is not installed (pip install umap-learn), or use --embedding tsne")
    return "tsne" if importlib.util.find_spec("sklearn") else None


def embed(x, how, seed=42):
    if how == "umap":
        import umap

        n_neighbors = min(15, len(x) - 1)
        return umap.UMAP(n_neighbors=n_neighbors, min_dist=0.1, random_state=seed).fit_transform(x), "UMAP"
    from sklearn.manifold import TSNE

    perplexity = max(2.0, min(30.0, (len(x) - 1) / 3.0))
    tsne = TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed)
    return tsne.fit_transform(x), "t-SNE (perplexity %g)" % perplexity


def plot_embedding(run_dir, out_dir, features, method, max_points):
    path = features or newest_features(run_dir)
    if not path:
        print("note: no features file in", run_dir, "- embedding left out")
        return False
    need_file(path)
    how = embedder(method)
    if how is None:
        print("note: neither umap-learn nor scikit-learn is installed - embedding left out")
        return False
    with reading(path, "the features"):
        with h5py.File(path, "r") as f:
            x = dataset(f, path, "features", 2).astype(np.float64)
            labels = dataset(f, path, "labels", 1).astype(np.int64)
            names = [text(c) for c in dataset(f, path, "class_names", 1)]
            key, epoch = text(f.attrs.get("checkpoint_key", "")), int(f.attrs.get("epoch", -1))
        labels, names = one_class_if_unlabelled(labels, names)
        if len(labels) != len(x) or (len(x) and (labels.min() < 0 or labels.max() >= len(names))):
            raise bad_data(path, "%d labels for %d rows, or a label outside the %d classes"
                           % (len(labels), len(x), len(names)))
        if not np.isfinite(x).all():
            raise bad_data(path, "the features hold a non-finite value")
        if len(x) < 5:
            print("note:", path, "has only", len(x), "rows - embedding left out")
            return False
        if max_points and len(x) > max_points:
            keep = np.sort(np.random.default_rng(0).choice(len(x), max_points, replace=False))
            x, labels = x[keep], labels[keep]
        save(draw_embedding(path, x, labels, names, key, epoch, *embed(x, how)), out_dir, "embedding.png")
    return True


def draw_embedding(path, x, labels, names, key, epoch, xy, how):
    colours = class_colours(len(names))
    fig, ax = plt.subplots(figsize=(7, 6))
    for c, name in enumerate(names):
        sel = labels == c
        if sel.any():
            ax.scatter(xy[sel, 0], xy[sel, 1], s=14, alpha=0.9, color=colours[c], label="%s (%d)" % (name, sel.sum()),
                       edgecolors="none")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title("%s of %d CLS features (%s, epoch %d)\n%s" % (how, len(x), key, epoch, os.path.basename(path)),
                 fontsize=10)
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False, markerscale=1.5)
    return fig


# ---- kNN ----------------------------------------------------------------------------------------
def plot_knn(run_dir, out_dir):
    path = os.path.join(run_dir, "knn.h5")
    if not os.path.exists(path):
        print("note: no", path, "- kNN plot left out")
        return False
    need_file(path)
    with reading(path, "the kNN report"):
        with h5py.File(path, "r") as f:
            ks = dataset(f, path, "k", 1)
            names = [text(c) for c in dataset(f, path, "class_names", 1)]
            if not len(ks) or not len(names):
                raise bad_data(path, "no k or no class")
            table_k = int(f.attrs.get("table_k", ks[0]))
            j = int(np.argmax(ks == table_k)) if (ks == table_k).any() else 0
            confusion = dataset(f, path, "trained/confusion", 3)
            if confusion.shape != (len(ks), len(names), len(names)):
                raise bad_data(path, "/trained/confusion has shape %s, not [%d, %d, %d]" % (
                    list(confusion.shape), len(ks), len(names), len(names)))
            cm = confusion[j].astype(float)
            sets = [(g, ("trained: " if g == "trained" else "") + text(f[g].attrs.get("label", g)),
                     dataset(f, path, g + "/top1", 1)) for g in ("trained", "raw_pixels", "random_init") if g in f]
            n_test = int(f.attrs.get("n_test", cm.sum()))
        save(draw_knn(ks, names, table_k, cm, sets, n_test), out_dir, "knn.png")
    return True


def draw_knn(ks, names, table_k, cm, sets, n_test):
    C = len(names)
    fig, (a, b) = plt.subplots(1, 2, figsize=(6 + 0.45 * C + 4.5, 1.6 + 0.45 * C), gridspec_kw={"width_ratios": [1.25, 1]})
    rows = cm.sum(axis=1, keepdims=True)
    frac = np.divide(cm, rows, out=np.zeros_like(cm), where=rows > 0)
    im = a.imshow(frac, cmap="Blues", vmin=0, vmax=1)
    for t in range(C):
        for p in range(C):
            if cm[t, p]:
                a.text(p, t, "%d" % cm[t, p], ha="center", va="center", fontsize=8,
                       color="white" if frac[t, p] > 0.6 else "black")
    a.set_xticks(range(C))
    a.set_yticks(range(C))
    a.set_xticklabels(names, rotation=45, ha="right")
    a.set_yticklabels(names)
    a.set_xlabel("predicted class")
    a.set_ylabel("true class")
    acc = 100.0 * np.trace(cm) / max(cm.sum(), 1)
    a.set_title("trained features, k = %d: Top-1 %.1f %% of %d test rows" % (table_k, acc, n_test), fontsize=10)
    fig.colorbar(im, ax=a, fraction=0.046, pad=0.04, label="fraction of the true class")
    for i, (g, label, top1) in enumerate(sets):
        b.plot(ks, top1, "o-", color="C%d" % i, label=label)
    log_k_axis(b, ks)
    b.set_xlabel("k (neighbours)")
    b.set_ylabel("Top-1 accuracy (%)")
    b.set_ylim(0, 100)
    b.axhline(100.0 / C, color="0.6", lw=0.8, ls=":", label="chance (1/%d)" % C)
    b.grid(alpha=0.3)
    b.legend(fontsize=8)
    b.set_title("weighted kNN, Top-1 per k", fontsize=10)
    fig.tight_layout()
    return fig


# ---- kNN per epoch --------------------------------------------------------------------------------
def read_knn_epochs(path):
    """knn_epochs.txt (doc/formats.md §6): the k, the epochs with their Top-1 per k, and the
    baselines (label, Top-1 per k)."""
    ks, epochs, top1, base = None, [], [], []
    in_base = False
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    if not lines or not lines[0].startswith("==== scdino kNN per epoch"):
        raise bad_data(path, "not a kNN-vs-epoch table (first line)")
    for n, line in enumerate(lines[1:], 2):
        w = line.split()
        if not w:
            continue
        if w[0] == "epoch" and ks is None:
            ks = [int(x[2:]) for x in w if x.startswith("k=")]
        elif w[0] == "baselines":
            in_base = True
        elif ks is not None and not in_base and re.fullmatch(r"\d+", w[0]) and len(w) == 2 + len(ks):
            epochs.append(int(w[0]))
            top1.append([float(x) for x in w[2:]])
        elif ks is not None and in_base and len(w) > len(ks):
            base.append((" ".join(w[:-len(ks)]), [float(x) for x in w[-len(ks):]]))
        elif ks is not None and w[0] != "kNN":
            raise bad_data(path, "line %d is not a row of the table" % n)
    if not ks or not epochs:
        raise bad_data(path, "no k columns or no epoch rows")
    return ks, epochs, np.array(top1), base


def plot_knn_epochs(run_dir, out_dir):
    path = os.path.join(run_dir, "knn_epochs.txt")
    if not os.path.exists(path):
        return False  # a run of one epoch's kNN has none: nothing to say
    need_file(path)
    with reading(path, "the kNN-vs-epoch table"):
        ks, epochs, top1, base = read_knn_epochs(path)
        save(draw_knn_epochs(ks, epochs, top1, base), out_dir, "knn_epochs.png")
    return True


def draw_knn_epochs(ks, epochs, top1, base):
    fig, ax = plt.subplots(figsize=(7, 4))
    for j, k in enumerate(ks):
        ax.plot(epochs, top1[:, j], "o-", color="C%d" % j, label="trained, k = %d" % k)
    for i, (label, v) in enumerate(base):
        ax.axhline(max(v), color="0.%d" % (3 + 2 * (i % 3)), lw=1, ls="--", label="%s (best k)" % label)
    ax.set_xlabel("epoch")
    ax.set_ylabel("Top-1 accuracy (%)")
    ax.set_ylim(0, 100)
    ax.set_xticks(epochs if len(epochs) <= 20 else epochs[::max(1, len(epochs) // 20)])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("weighted kNN per saved epoch", fontsize=10)
    fig.tight_layout()
    return fig


# ---- attention ----------------------------------------------------------------------------------
def plot_attention(run_dir, out_dir, max_images):
    path = os.path.join(run_dir, "attention.h5")
    if not os.path.exists(path):
        print("note: no", path, "- attention plot left out")
        return False
    need_file(path)
    with reading(path, "the attention maps"):
        with h5py.File(path, "r") as f:
            sizes = [int(s) for s in np.atleast_1d(f.attrs["sizes"])]
            g = "size_%d/" % max(sizes)
            maps, imgs = dataset(f, path, g + "maps", 4), dataset(f, path, g + "images", 4)
            p = int(f.attrs["patch_size"])
            labels = dataset(f, path, "labels", 1).astype(np.int64)
            names = [text(c) for c in dataset(f, path, "class_names", 1)]
            paths = [text(s) for s in dataset(f, path, "paths", 1)]
        labels, names = one_class_if_unlabelled(labels, names)
        n = len(labels)
        if len(maps) != n or len(imgs) != n or len(paths) != n or \
                (n and (labels.min() < 0 or labels.max() >= len(names))):
            raise bad_data(path, "the maps, images, labels and paths disagree in number, or a label is outside "
                                 "the %d classes" % len(names))
        save(draw_attention(maps, imgs, p, labels, names, paths, sizes, max_images), out_dir, "attention.png")
    return True


def draw_attention(maps, imgs, p, labels, names, paths, sizes, max_images):
    heads = maps.shape[1]
    # Every class before any class's second image: the first image of each class, then the second...
    rank = np.zeros(len(labels), dtype=int)
    for c in set(labels.tolist()):
        rank[labels == c] = np.arange((labels == c).sum())
    order = sorted(range(len(labels)), key=lambda i: (rank[i], labels[i]))[:max_images]
    order.sort(key=lambda i: (labels[i], rank[i]))
    n = len(order)
    cols = heads + 2
    fig, axes = plt.subplots(n, cols, figsize=(1.7 * cols, 1.75 * n), squeeze=False)
    for r, i in enumerate(order):
        # Grey image: each channel min-max scaled, then averaged (the network input's structure).
        ch = imgs[i].astype(float)
        lo = ch.min(axis=(1, 2), keepdims=True)
        hi = ch.max(axis=(1, 2), keepdims=True)
        grey = np.mean((ch - lo) / np.where(hi > lo, hi - lo, 1), axis=0)
        up = lambda m: np.kron(m, np.ones((p, p)))
        panels = [("input", None), ("mean of heads", maps[i].mean(axis=0))] + [("head %d" % h, maps[i, h]) for h in range(heads)]
        for c, (title, m) in enumerate(panels):
            ax = axes[r, c]
            ax.imshow(grey, cmap="gray", interpolation="nearest")
            if m is not None:
                ax.imshow(up(m), cmap="inferno", alpha=0.55, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(title, fontsize=9)
        axes[r, 0].set_ylabel("%s\n%s" % (names[labels[i]], os.path.basename(paths[i])), fontsize=7)
    fig.suptitle("last-block CLS attention over the patches (image side %d, patch %d)" % (max(sizes), p), fontsize=10)
    fig.tight_layout()
    return fig


def main():
    ap = ArgumentParser(prog=TOOL, description=__doc__.split("\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--features", help="features file (default: the newest RUN_DIR/features_EEEE.h5)")
    ap.add_argument("--embedding", choices=("auto", "umap", "tsne"), default="auto")
    ap.add_argument("--max-points", type=int, default=5000, help="rows drawn at random for the embedding (0: all)")
    ap.add_argument("--attention-images", type=int, default=8,
                    help="images in attention.png, every class's first image before any class's second")
    ap.add_argument("--out", help="output folder (default RUN_DIR/plots)")
    a = ap.parse_args()
    if a.max_points < 0 or a.attention_images < 1:
        raise ToolError(EXIT_ARGS, None, "--max-points must be 0 or more and --attention-images 1 or more")
    if not os.path.isdir(a.run_dir):
        raise bad_data(a.run_dir, "not a run directory" if os.path.exists(a.run_dir) else "no such directory")
    if a.features:
        need_file(a.features)
    out = a.out or os.path.join(a.run_dir, "plots")
    inputs = [os.path.join(a.run_dir, n) for n in ("log.txt", "knn.h5", "knn_epochs.txt", "attention.h5")] + \
        [a.features or newest_features(a.run_dir)]
    for name in PLOTS:
        distinct_output(os.path.join(out, name), inputs)
    done = [plot_loss(a.run_dir, out), plot_embedding(a.run_dir, out, a.features, a.embedding, a.max_points),
            plot_knn(a.run_dir, out), plot_knn_epochs(a.run_dir, out), plot_attention(a.run_dir, out, a.attention_images)]
    if not any(done):
        raise ToolError(EXIT_FAILURE, a.run_dir,
                        "nothing to draw (no log.txt epochs, features, knn.h5 or attention.h5)")
    return 0


if __name__ == "__main__":
    run(TOOL, main)
