#!/usr/bin/env python3
"""Compare two HDF5 files dataset by dataset and attribute by attribute.

    /usr/bin/python3 tests/data/compare_h5.py [--tol T] [-v] A.h5 B.h5

B is the reference.  Every group, dataset and attribute must be present in both, with the same
shapes and types.  Integer, boolean and string data and all attributes must be equal; floating-point
datasets may differ by a relative error up to T (default 1e-6), measured two ways:
    norm: ||A - B||_2 / ||B||_2 (the measure of the project's tests), and
    max:  max |A - B| / max |B|,
each taken as the absolute error where B is all zeros.  The largest errors are printed per group of
datasets (with -v, per dataset).  Exit status: 0 equal within T, 1 different, 2 usage or I/O error.
"""
import argparse
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:
    print("compare_h5: needs h5py and numpy: %s" % e, file=sys.stderr)
    sys.exit(2)


def walk(f):
    """path -> h5py object for every group and dataset below the root ('/' is the root)."""
    objs = {"/": f}
    f.visititems(lambda name, obj: objs.__setitem__("/" + name, obj))
    return objs


def same_value(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind in "OSU" or b.dtype.kind in "OSU":
        dec = np.vectorize(lambda x: x.decode() if isinstance(x, bytes) else x, otypes=[object])
        return bool(np.all(dec(a) == dec(b)))
    return bool(np.array_equal(a, b))


def rel_errors(a, b):
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    d = a - b
    nb = np.linalg.norm(b.ravel())
    mb = np.abs(b).max() if b.size else 0.0
    nd = np.linalg.norm(d.ravel())
    md = np.abs(d).max() if d.size else 0.0
    return (nd / nb if nb > 0 else nd), (md / mb if mb > 0 else md)


def main(argv):
    ap = argparse.ArgumentParser(prog="compare_h5.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("a", metavar="A.h5")
    ap.add_argument("b", metavar="B.h5", help="the reference")
    ap.add_argument("--tol", type=float, default=1e-6, help="largest relative error allowed (1e-6)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every dataset")
    args = ap.parse_args(argv)
    try:
        fa = h5py.File(args.a, "r")
        fb = h5py.File(args.b, "r")
    except OSError as e:
        print("compare_h5: %s" % e, file=sys.stderr)
        return 2

    problems = []
    oa, ob = walk(fa), walk(fb)
    for p in sorted(set(oa) - set(ob)):
        problems.append("%s: only in %s" % (p, args.a))
    for p in sorted(set(ob) - set(oa)):
        problems.append("%s: only in %s" % (p, args.b))

    groups = {}  # parent group -> [worst norm, worst max, dataset, count]
    nds = 0
    for p in sorted(set(oa) & set(ob)):
        a, b = oa[p], ob[p]
        if isinstance(a, h5py.Dataset) != isinstance(b, h5py.Dataset):
            problems.append("%s: a dataset in one file, a group in the other" % p)
            continue
        for k in sorted(set(a.attrs) - set(b.attrs)):
            problems.append("%s: attribute %s only in %s" % (p, k, args.a))
        for k in sorted(set(b.attrs) - set(a.attrs)):
            problems.append("%s: attribute %s only in %s" % (p, k, args.b))
        for k in sorted(set(a.attrs) & set(b.attrs)):
            if not same_value(a.attrs[k], b.attrs[k]):
                problems.append("%s: attribute %s differs: %r vs %r" % (p, k, a.attrs[k], b.attrs[k]))
        if not isinstance(a, h5py.Dataset):
            continue
        nds += 1
        if a.shape != b.shape or a.dtype != b.dtype:
            problems.append("%s: %s %s vs %s %s" % (p, a.shape, a.dtype, b.shape, b.dtype))
            continue
        va, vb = a[()], b[()]
        parent = p.rsplit("/", 1)[0] or "/"
        if a.dtype.kind == "f":
            en, em = rel_errors(np.asarray(va), np.asarray(vb))
            if args.verbose:
                print("  %-62s norm %.3e  max %.3e" % (p, en, em))
            if not (en <= args.tol and em <= args.tol):
                problems.append("%s: relative error norm %.3e, max %.3e (> %g)" % (p, en, em, args.tol))
            g = groups.setdefault(parent, [0.0, 0.0, "", 0])
            if max(en, em) > max(g[0], g[1]):
                g[2] = p.rsplit("/", 1)[1]
            g[0], g[1], g[3] = max(g[0], en), max(g[1], em), g[3] + 1
        else:
            eq = same_value(va, vb)
            if args.verbose:
                print("  %-62s %s" % (p, "equal" if eq else "DIFFERENT"))
            if not eq:
                problems.append("%s: values differ" % p)
            g = groups.setdefault(parent, [0.0, 0.0, "", 0])
            g[3] += 1
            if not eq:
                g[0] = g[1] = float("inf")
                g[2] = p.rsplit("/", 1)[1]

    print("%-26s %5s  %-10s %-10s %s" % ("group", "sets", "max norm", "max max", "worst dataset"))
    for parent in sorted(groups):
        en, em, worst, n = groups[parent]
        print("%-26s %5d  %-10.3e %-10.3e %s" % (parent, n, en, em, worst or "-"))
    print("%d datasets compared, %d groups and datasets only in one file, %d problems"
          % (nds, len(set(oa) ^ set(ob)), len(problems)))
    for pr in problems:
        print("DIFFERENT: " + pr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
