#!/usr/bin/env python3
"""tests/eval/eval_knn.py - DINO's eval_knn.knn_classifier (facebookresearch/dino) in NumPy, on two
scdino features files, checked against scdino's knn.h5 of the same reference/query run.

    eval_knn.py REFERENCE.h5 QUERY.h5 KNN.h5

The classifier, as upstream writes it: similarity = query @ reference^T (rows L2-normalised, float32
as torch.mm), the k most similar reference rows (torch.topk), weights exp(similarity / T), class
scores summed over the neighbours, classes sorted by score; Top-1: the first is the truth; Top-2 (as
scDINO's global_kNN.py, which reports Top-2 for DINO's Top-5): the truth is among the first min(2, k).
Labels are encoded once for both files, by class name.  Where upstream leaves an order to torch, this
takes scdino's documented rule (src/analysis/knn.h): equal similarities, the earlier reference row
first; equal scores, the lower class first; only classes with a vote are ranked.

Checks, for every k of KNN.h5: the Top-1 and Top-2 accuracies of its 'trained' set, every query row's
prediction and Top-2 outcome, its kept neighbours (rows, sample indices, similarities and the paths
of the reference table), and the per-group accuracies of every grouping column (knn.h5 groups/<column>:
'folder', the first folder of a row's path, or a metadata column of the query file): its values, each
query row's value, the rows per value and the Top-1 / Top-2 per value.
Prints "eval_knn ok" and the accuracies; exits 1 naming the first difference."""
import sys

import h5py
import numpy as np


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def load(path):
    with h5py.File(path, "r") as f:
        names = [text(c) for c in f["class_names"][:]]
        meta = {text(m): [text(v) for v in f["metadata/" + text(m)][:]]
                for m in (f["metadata_columns"][:] if "metadata_columns" in f else [])}
        return {"x": f["features"][:].astype(np.float32), "labels": [names[i] for i in f["labels"][:]],
                "index": f["index"][:], "paths": [text(p) for p in f["paths"][:]], "meta": meta}


def grouping(knn, query):
    """[(column, its h5 group, each query row's value, the sorted values)] of knn.h5's groups."""
    out = []
    for col in ([text(c) for c in knn["group_columns"][:]] if "group_columns" in knn else []):
        g = knn["groups/" + col]
        if text(g.attrs["source"]) == "folder":
            keys = [p.split("/")[0] if "/" in p else "" for p in query["paths"]]
        else:
            keys = query["meta"][col]
        values = sorted(set(keys))
        assert g.attrs["distinct_values"] == len(values), col
        if "values" not in g:
            assert len(values) > g.attrs["max_groups"], col
            continue
        assert [text(v) for v in g["values"][:]] == values, col
        assert [values[v] for v in g["value_of_row"][:]] == keys, col
        assert list(g["test_support"][:]) == [keys.count(v) for v in values], col
        out.append((col, g, keys, values))
    return out


def knn_classifier(train_features, train_labels, test_features, test_labels, k, T, num_classes):
    """Returns (top1 %, top2 %, predictions, top-2 outcomes, neighbour rows, their similarities)."""
    sim = test_features @ train_features.T  # float32, as torch.mm
    k = min(k, train_features.shape[0])
    top1 = top2 = 0
    preds, hits, nbs, sims = [], [], [], []
    for i in range(test_features.shape[0]):
        idx = np.argsort(-sim[i], kind="stable")[:k]  # torch.topk(k, largest=True, sorted=True)
        d = sim[i, idx].astype(np.float64)
        probs = np.zeros(num_classes)
        np.add.at(probs, train_labels[idx], np.exp(d / T))
        order = np.argsort(-probs, kind="stable")
        order = order[probs[order] > 0]
        truth = test_labels[i]
        top1 += order[0] == truth
        hit2 = truth in order[:min(2, k)]
        top2 += hit2
        preds.append(order[0])
        hits.append(hit2)
        nbs.append(idx)
        sims.append(sim[i, idx])
    n = test_features.shape[0]
    return top1 * 100.0 / n, top2 * 100.0 / n, preds, hits, nbs, sims


def main():
    ref, query, knn = load(sys.argv[1]), load(sys.argv[2]), h5py.File(sys.argv[3], "r")
    classes = [text(c) for c in knn["class_names"][:]]
    code = {c: i for i, c in enumerate(classes)}
    assert set(ref["labels"]) | set(query["labels"]) == set(classes), classes
    rl = np.array([code[c] for c in ref["labels"]])
    ql = np.array([code[c] for c in query["labels"]])
    T = float(knn.attrs["temperature"])
    q = knn["query"]
    assert (q["label"][:] == ql).all() and (q["row"][:] == np.arange(len(ql))).all()
    assert (q["index"][:] == query["index"]).all() and [text(p) for p in q["path"][:]] == query["paths"]
    keep = q["neighbours"].shape[1] if "neighbours" in q else 0
    cols = grouping(knn, query)
    for j, k in enumerate(knn["k"][:]):
        top1, top2, preds, hits, nbs, sims = knn_classifier(ref["x"], rl, query["x"], ql, int(k), T, len(classes))
        got1, got2 = knn["trained/top1"][j], knn["trained/top2"][j]
        if got1 != top1 or got2 != top2:
            sys.exit("k = %d: scdino Top-1 %r, Top-2 %r; eval_knn %r, %r" % (k, got1, got2, top1, top2))
        if list(q["prediction"][:, j]) != preds or list(q["top2"][:, j] == 1) != hits:
            sys.exit("k = %d: the per-row predictions differ" % k)
        if keep and int(k) >= keep:  # the kept neighbours are the first `keep` of every larger k's
            for i in range(len(ql)):
                if list(q["neighbours"][i]) != list(nbs[i][:keep]):
                    sys.exit("query row %d: neighbours %s, eval_knn %s" % (i, list(q["neighbours"][i]), nbs[i][:keep]))
                if not np.allclose(q["neighbour_similarity"][i], sims[i][:keep], rtol=0, atol=1e-6):
                    sys.exit("query row %d: neighbour similarities differ" % i)
        for col, grp, keys, values in cols:
            for v, name in enumerate(values):
                rows = [i for i in range(len(ql)) if keys[i] == name]
                want1 = 100.0 * sum(preds[i] == ql[i] for i in rows) / len(rows)
                want2 = 100.0 * sum(hits[i] for i in rows) / len(rows)
                got1, got2 = grp["top1_trained"][j, v], grp["top2_trained"][j, v]
                if abs(got1 - want1) > 1e-9 or abs(got2 - want2) > 1e-9:
                    sys.exit("k = %d, %s = %s: scdino %r / %r, numpy %r / %r" % (k, col, name, got1, got2, want1, want2))
        print("k = %d: Top-1 %.4f, Top-2 %.4f" % (k, top1, top2))
    if keep:
        rpaths = [text(p) for p in knn["reference/path"][:]]
        assert rpaths == ref["paths"] and (knn["reference/index"][:] == ref["index"]).all()
        assert (q["neighbour_index"][:] == ref["index"][q["neighbours"][:]]).all()
    print("eval_knn ok: %d query rows against %d reference rows, %d neighbours kept, %d grouping column(s)" %
          (len(ql), len(rl), keep, len(cols)))


if __name__ == "__main__":
    main()
