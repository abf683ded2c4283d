"""Reproduce the clustering tables of the QuicK-means papers (objective, AMI,
nnz/flops/compression, 1-NN through the cluster partition).

Journal version (Machine Learning 2021), Sect. 4.1–4.5, Tables 3–4; preprint
Sect. 4 (blobs: D = 2000, 1000 centers of std 12, 29,000 + 1,000 points,
K ∈ {128, 256, 512}, 10 Lloyd iterations, palm4MSA rather than its
hierarchical version).

    .venv/bin/python examples/reproduce_qkmeans.py --quick   # digits K=10, breast cancer K=8, wine K=3; 2 seeds
    .venv/bin/python examples/reproduce_qkmeans.py           # + digits K=30, breast cancer K=2,16, blobs K=128; 5 seeds
    .venv/bin/python examples/reproduce_qkmeans.py --cases blobs:256 blobs:512 --seeds 2

For every case and seed (the seed drives the split and the init):
* train/test split (bundled data: 80/20 stratified; blobs: 29,000 + 1,000);
* one k-means++ init (scikit-learn ``kmeans_plusplus`` on the training set)
  shared by every method below;
* K-means (``dqkm.KMeans``); QK-means (``dqkm.QKMeans``) at every sparsity of
  ``--sparsities`` (capped at min(K, D)); "K-means + palm4MSA"
  (``factorize_centroids`` of the K-means centroids, the same factor layout
  and factorisation as QK-means's init); K-means ℓ1 (``dqkm.KMeansL1``,
  ε = 0.01 as the paper) whose radius is bisected once per case (seed 0) so
  that its nnz matches QK-means's at the smallest sparsity — the paper's rule
  (one λ per data set, compression of QK-means at s = 3);
* objective (eq. 1) on the training set with each point assigned to its
  nearest row of the method's centroid matrix (V = λ·S1···SQ for the factored
  ones), its ratio to K-means's (same seed), AMI of those assignments
  against the labels, nnz/flops/compression of the centroid operator, fit
  seconds, and the 1-NN accuracy of the test set when a test point's
  neighbour is searched only among the training points of its cluster
  (plain brute-force 1-NN on the whole training set as reference).
Prints mean ± std over the seeds, one table per case.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections import defaultdict

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import dqkm  # noqa: E402
from dqkm import datasets  # noqa: E402
from dqkm.cluster.qkmeans import factorize_centroids  # noqa: E402
from dqkm.metrics import ami  # noqa: E402

BUNDLED = {"digits": datasets.load_digits, "breast_cancer": datasets.load_breast_cancer,
           "wine": datasets.load_wine}
QUICK = ["digits:10", "breast_cancer:8", "wine:3"]
FULL = ["digits:10", "digits:30", "breast_cancer:2", "breast_cancer:8", "breast_cancer:16",
        "wine:3", "blobs:128"]


def load(name, seed):
    from sklearn.model_selection import train_test_split

    if name == "blobs":
        X, y = datasets.make_blobs(30_000, 2000, centers=1000, cluster_std=12.0, chunks=10_000,
                                   random_state=seed)
        X, y = X.compute(), y.compute()
        return X[:29_000], X[29_000:], y[:29_000], y[29_000:]
    X, y = BUNDLED[name]()
    X, y = np.asarray(X.compute(), dtype=np.float64), np.asarray(y.compute())
    return train_test_split(X, y, test_size=0.2, stratify=y, random_state=seed)


def nearest_rows(X, V):
    """Index of the nearest row of V for every row of X (dense, exact)."""
    out = np.empty(len(X), dtype=np.int64)
    vn = (V * V).sum(1)
    for i in range(0, len(X), 4096):
        out[i:i + 4096] = (vn[None, :] - 2.0 * X[i:i + 4096] @ V.T).argmin(1)
    return out


def objective(X, V, labels):
    """Eq. (1): Σ ‖x − v_label(x)‖²."""
    total = 0.0
    for i in range(0, len(X), 4096):
        d = X[i:i + 4096] - V[labels[i:i + 4096]]
        total += float(np.einsum("ij,ij->", d, d))
    return total


def partition_1nn(Xtr, ytr, ltr, Xte, lte):
    """1-NN labels of Xte searched among the training points of the same cluster
    (a test point whose cluster holds no training point gets label -1)."""
    pred = np.full(len(Xte), -1, dtype=ytr.dtype if ytr.dtype.kind in "iu" else np.int64)
    for c in np.unique(lte):
        q = np.flatnonzero(lte == c)
        r = np.flatnonzero(ltr == c)
        if r.size == 0:
            continue
        P = Xtr[r]
        d = (P * P).sum(1)[None, :] - 2.0 * Xte[q] @ P.T
        pred[q] = ytr[r[d.argmin(1)]]
    return pred


def timed(f):
    t0 = time.perf_counter()
    out = f()
    return out, time.perf_counter() - t0


def tune_radius(Xtr, K, init, target_nnz, max_iter, steps):
    """Bisection (log scale) of the ℓ1 radius so that KMeansL1's nnz ≈ target."""
    lo = 1e-3
    hi = float(np.abs(init).sum(1).max()) * 4.0  # K-means ℓ1 radius above every centroid's
    best = None
    for _ in range(steps):
        mid = float(np.sqrt(lo * hi))
        m = dqkm.KMeansL1(K, radius=mid, tol_l1=0.01, init=init, max_iter=max_iter).fit(Xtr)
        if best is None or abs(m.nnz_ - target_nnz) < abs(best[1] - target_nnz):
            best = (mid, m.nnz_)
        if abs(m.nnz_ - target_nnz) <= 0.02 * target_nnz:
            break
        if m.nnz_ > target_nnz:
            hi = mid
        else:
            lo = mid
    return best


def run_case(name, K, a):
    from sklearn.cluster import kmeans_plusplus

    rec = defaultdict(list)
    radius = None
    for seed in range(a.seeds):
        Xtr, Xte, ytr, yte = load(name, seed)
        D = Xtr.shape[1]
        blobs = name == "blobs"
        max_iter = a.blob_max_iter if blobs else a.max_iter
        pi = a.blob_palm_iter if blobs else a.palm_iter
        pii = a.blob_palm_iter_init if blobs else a.palm_iter_init
        method = "palm4msa" if blobs else "hierarchical"
        init, _ = kmeans_plusplus(Xtr, K, random_state=seed)
        ops = {}  # method -> (V dense, nnz, flops, fit seconds)
        km, t = timed(lambda: dqkm.KMeans(K, init=init, max_iter=max_iter).fit(Xtr))
        ops["K-means"] = (np.asarray(km.cluster_centers_, np.float64), K * D, 2 * K * D, t)
        sps = sorted({min(s, K, D) for s in a.sparsities})
        for s in sps:
            qk, t = timed(lambda s=s: dqkm.QKMeans(
                K, sparsity=s, init=init, init_factorization=method, palm_iter=pi,
                palm_iter_init=pii, max_iter=max_iter, hierarchical_refits=a.hierarchical_refits,
                random_state=seed).fit(Xtr))
            f = qk.factors_
            ops[f"QK-means s={s}"] = (f.toarray().astype(np.float64), f.nnz, f.flops, t)
            f, t2 = timed(lambda s=s: factorize_centroids(km, s, method=method, n_iter=pii))
            ops[f"K-means + palm4MSA s={s}"] = (f.toarray().astype(np.float64), f.nnz, f.flops,
                                                ops["K-means"][3] + t2)
        target = ops[f"QK-means s={sps[0]}"][1]
        if radius is None:
            (radius, _), t = timed(lambda: tune_radius(Xtr, K, init, target, max_iter,
                                                       a.bisect_steps))
            print(f"  {name} K={K}: ℓ1 radius {radius:.4g} (bisected on seed 0 towards nnz "
                  f"{target} in {t:.0f} s)", flush=True)
        l1, t = timed(lambda: dqkm.KMeansL1(K, radius=radius, tol_l1=0.01, init=init,
                                            max_iter=max_iter).fit(Xtr))
        ops[f"K-means ℓ1 (s={sps[0]} nnz)"] = (np.asarray(l1.cluster_centers_, np.float64),
                                               l1.nnz_, 2 * l1.nnz_, t)
        base = None
        for m, (V, nnz, flops, t) in ops.items():
            ltr = nearest_rows(Xtr, V)
            obj = objective(Xtr, V, ltr)
            base = obj if base is None else base
            rec[("objective", m)].append(obj)
            rec[("ratio", m)].append(obj / base)
            rec[("AMI", m)].append(ami(ytr, ltr))
            rec[("nnz", m)].append(nnz)
            rec[("flops", m)].append(flops)
            rec[("compression", m)].append(K * D / max(nnz, 1))
            rec[("fit s", m)].append(t)
            pred = partition_1nn(Xtr, ytr, ltr, Xte, nearest_rows(Xte, V))
            rec[("1-NN acc", m)].append(float(np.mean(pred == yte)))
        Ptr = (Xtr * Xtr).sum(1)
        nn = np.concatenate([(Ptr[None, :] - 2.0 * Xte[i:i + 1000] @ Xtr.T).argmin(1)
                             for i in range(0, len(Xte), 1000)])
        rec[("1-NN acc", "brute-force 1-NN (no partition)")].append(float(np.mean(ytr[nn] == yte)))
    return rec


def fmt(v, key):
    v = np.asarray(v, dtype=float)
    if key in ("nnz", "flops"):
        return f"{v.mean():,.0f}" + (f" ± {v.std():,.0f}" if v.std() > 0 else "")
    if key == "objective":
        return f"{v.mean():.5g} ± {v.std():.2g}"
    if key == "ratio":
        return f"{v.mean():.4f} ± {v.std():.4f}"
    if key in ("compression", "fit s"):
        return f"{v.mean():.2f} ± {v.std():.2f}"
    return f"{v.mean():.3f} ± {v.std():.3f}"


def print_table(title, rec, n_seeds):
    print(f"\n### {title} ({n_seeds} seed{'s' if n_seeds > 1 else ''})\n")
    keys = ["objective", "ratio", "AMI", "1-NN acc", "nnz", "flops", "compression", "fit s"]
    heads = ["objective (eq. 1)", "÷ K-means", "AMI", "1-NN acc (partition)", "nnz", "flops",
             "compression", "fit s"]
    methods = []
    for (_, m) in rec:
        if m not in methods:
            methods.append(m)
    print("| method | " + " | ".join(heads) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for m in methods:
        cells = [fmt(rec[(k, m)], k) if (k, m) in rec else "" for k in keys]
        print(f"| {m} | " + " | ".join(cells) + " |")
    sys.stdout.flush()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help=f"cases {QUICK}, 2 seeds, sparsities 3 and 5")
    p.add_argument("--cases", nargs="*", help="NAME:K items, NAME in digits, breast_cancer, "
                                              "wine, blobs")
    p.add_argument("--seeds", type=int)
    p.add_argument("--sparsities", type=int, nargs="*", default=[3, 5])
    p.add_argument("--max-iter", type=int, default=50, help="Lloyd iterations (journal: 50)")
    p.add_argument("--palm-iter", type=int, default=50, help="palm4MSA iterations per Lloyd "
                                                             "iteration")
    p.add_argument("--palm-iter-init", type=int, default=300,
                   help="palm4MSA iterations of the (hierarchical) init factorisation and of "
                        "K-means + palm4MSA")
    p.add_argument("--hierarchical-refits", type=int, default=1,
                   help="QKMeans(hierarchical_refits=...): Lloyd iterations that also refit "
                        "the factors from scratch (default 1, dqkm's default; >= max-iter: every "
                        "iteration)")
    p.add_argument("--blob-max-iter", type=int, default=10, help="preprint: 10")
    p.add_argument("--blob-palm-iter", type=int, default=10)
    p.add_argument("--blob-palm-iter-init", type=int, default=50)
    p.add_argument("--bisect-steps", type=int, default=14)
    a = p.parse_args(argv)
    a.seeds = a.seeds or (2 if a.quick else 5)
    cases = a.cases or (QUICK if a.quick else FULL)
    print(f"dqkm reproduction: seeds 0..{a.seeds - 1}, sparsities {a.sparsities}, bundled data: "
          f"max_iter {a.max_iter}, palm_iter {a.palm_iter}, palm_iter_init {a.palm_iter_init} "
          f"(hierarchical); blobs: max_iter {a.blob_max_iter}, palm_iter {a.blob_palm_iter}, "
          f"palm_iter_init {a.blob_palm_iter_init} (palm4MSA); QK-means hierarchical_refits "
          f"{a.hierarchical_refits}", flush=True)
    t_all = time.perf_counter()
    for case in cases:
        name, K = case.split(":")
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=RuntimeWarning)
            rec = run_case(name, int(K), a)
        print_table(f"{name}, K = {K}", rec, a.seeds)
        print(f"({time.perf_counter() - t0:.0f} s)", flush=True)
    print(f"\ntotal {time.perf_counter() - t_all:.0f} s")


if __name__ == "__main__":
    main()
