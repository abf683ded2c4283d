"""Reproduce the clustering tables of the QuicK-means papers (objective, AMI,
nnz/flops/compression, 1-NN through the cluster partition).

Journal version (Machine Learning 2021), Sect. 4.1–4.5, Tables 3–4; preprint
Sect. 4 (blobs: D = 2000, 1000 centers of std 12, 29,000 + 1,000 points,
K ∈ {128, 256, 512}, 10 Lloyd iterations, palm4MSA rather than its
hierarchical version).

    .venv/bin/python examples/reproduce_qkmeans.py --quick   # digits K=10, breast cancer K=8, wine K=3; 2 seeds
    .venv/bin/python examples/reproduce_qkmeans.py           # + digits K=30, breast cancer K=2,16, blobs K=128; 5 seeds
    .venv/bin/python examples/reproduce_qkmeans.py --cases blobs:256 blobs:512 --seeds 2
    .venv/bin/python examples/reproduce_qkmeans.py --quick --results quick.json  # stored, resumable

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

``--results FILE`` stores one record per finished (case, K, seed, method):
its settings, its values and where it was measured (dqkm version, git commit,
date, command line, cores and load average).  The file is rewritten whole
(temporary file, then rename) as each seed finishes, so an interrupted run
keeps what finished, and a rerun with the same settings reads those seeds back
instead of computing them.  ``docs/results/render.py`` renders the stored
records as these tables.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
import warnings
from collections import defaultdict

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _results_file import load_results, save_results  # noqa: E402,F401

import dqkm  # noqa: E402
from dqkm import datasets  # noqa: E402
from dqkm.cluster.qkmeans import factorize_centroids  # noqa: E402
from dqkm.metrics import ami  # noqa: E402

BUNDLED = {"digits": datasets.load_digits, "breast_cancer": datasets.load_breast_cancer,
           "wine": datasets.load_wine}
QUICK = ["digits:10", "breast_cancer:8", "wine:3"]
BRUTE = "brute-force 1-NN (no partition)"
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


def methods_of(K, D, a):
    """The rows a (case, K, seed) produces, in table order."""
    sps = sorted({min(s, K, D) for s in a.sparsities})
    out = ["K-means"]
    for s in sps:
        out += [f"QK-means s={s}", f"K-means + palm4MSA s={s}"]
    return out + [f"K-means ℓ1 (s={sps[0]} nnz)", BRUTE]


def case_settings(name, a):
    """What a stored result depends on besides (case, K, seed, method)."""
    blobs = name == "blobs"
    return {"sparsities": sorted(set(a.sparsities)),
            "max_iter": a.blob_max_iter if blobs else a.max_iter,
            "palm_iter": a.blob_palm_iter if blobs else a.palm_iter,
            "palm_iter_init": a.blob_palm_iter_init if blobs else a.palm_iter_init,
            "init_factorization": "palm4msa" if blobs else "hierarchical",
            "hierarchical_refits": a.hierarchical_refits, "variant": a.variant,
            "tol_l1": 0.01, "bisect_steps": a.bisect_steps}


def run_seed(name, K, seed, a, radius):
    """Fit every method on one seed's split; ``({method: {metric: value}}, {method: extra
    settings}, radius)`` (``radius`` is bisected here when None)."""
    from sklearn.cluster import kmeans_plusplus

    st = case_settings(name, a)
    max_iter, pi, pii = st["max_iter"], st["palm_iter"], st["palm_iter_init"]
    method = st["init_factorization"]
    Xtr, Xte, ytr, yte = load(name, seed)
    D = Xtr.shape[1]
    init, _ = kmeans_plusplus(Xtr, K, random_state=seed)
    ops = {}  # method -> (V dense, nnz, flops, fit seconds)
    extra = {}
    km, t = timed(lambda: dqkm.KMeans(K, init=init, max_iter=max_iter).fit(Xtr))
    ops["K-means"] = (np.asarray(km.cluster_centers_, np.float64), K * D, 2 * K * D, t)
    sps = sorted({min(s, K, D) for s in a.sparsities})
    for s in sps:
        qk, t = timed(lambda s=s: dqkm.QKMeans(
            K, sparsity=s, init=init, init_factorization=method, palm_iter=pi,
            palm_iter_init=pii, max_iter=max_iter, hierarchical_refits=a.hierarchical_refits,
            variant=a.variant, random_state=seed).fit(Xtr))
        f = qk.factors_
        ops[f"QK-means s={s}"] = (f.toarray().astype(np.float64), f.nnz, f.flops, t)
        extra[f"QK-means s={s}"] = {"sparsity": s}
        f, t2 = timed(lambda s=s: factorize_centroids(km, s, method=method, n_iter=pii))
        ops[f"K-means + palm4MSA s={s}"] = (f.toarray().astype(np.float64), f.nnz, f.flops,
                                            ops["K-means"][3] + t2)
        extra[f"K-means + palm4MSA s={s}"] = {"sparsity": s}
    target = ops[f"QK-means s={sps[0]}"][1]
    if radius is None:
        (radius, _), t = timed(lambda: tune_radius(Xtr, K, init, target, max_iter,
                                                   a.bisect_steps))
        print(f"  {name} K={K}: ℓ1 radius {radius:.4g} (bisected on seed {seed} towards nnz "
              f"{target} in {t:.0f} s)", flush=True)
    l1, t = timed(lambda: dqkm.KMeansL1(K, radius=radius, tol_l1=0.01, init=init,
                                        max_iter=max_iter).fit(Xtr))
    l1_name = f"K-means ℓ1 (s={sps[0]} nnz)"
    ops[l1_name] = (np.asarray(l1.cluster_centers_, np.float64), l1.nnz_, 2 * l1.nnz_, t)
    extra[l1_name] = {"radius": radius, "target_nnz": int(target)}
    values = {}
    base = None
    for m, (V, nnz, flops, t) in ops.items():
        ltr = nearest_rows(Xtr, V)
        obj = objective(Xtr, V, ltr)
        base = obj if base is None else base
        pred = partition_1nn(Xtr, ytr, ltr, Xte, nearest_rows(Xte, V))
        values[m] = {"objective": obj, "ratio": obj / base, "AMI": float(ami(ytr, ltr)),
                     "1-NN acc": float(np.mean(pred == yte)), "nnz": int(nnz),
                     "flops": int(flops), "compression": K * D / max(nnz, 1), "fit s": t}
    Ptr = (Xtr * Xtr).sum(1)
    nn = np.concatenate([(Ptr[None, :] - 2.0 * Xte[i:i + 1000] @ Xtr.T).argmin(1)
                         for i in range(0, len(Xte), 1000)])
    values[BRUTE] = {"1-NN acc": float(np.mean(ytr[nn] == yte))}
    return values, extra, radius


def git_commit():
    """The checkout's commit (``+modified`` when dqkm/ or this script differ from it), or None.

    Read once when the run starts: that is the code the run imported."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                                capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                                "dqkm", os.path.join("examples", "reproduce_qkmeans.py")],
                               cwd=root, capture_output=True, text=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+modified" if dirty else "") if commit else None


def provenance(argv, commit):
    """Where and how a record was measured: dqkm version, git commit, date, command, machine."""
    return {"dqkm": dqkm.__version__, "commit": commit,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": shlex.join(["python", "examples/reproduce_qkmeans.py", *argv]),
            "machine": {"cores": os.cpu_count(),
                        "load average": [round(x, 2) for x in os.getloadavg()]},
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}


def table_values(records):
    """``{(metric, method): [value per seed]}`` of ``records`` (one case and settings)."""
    rec = defaultdict(list)
    for r in records:
        for k, v in r["values"].items():
            rec[(k, r["key"]["method"])].append(v)
    return rec


def run_case(name, K, a, results, argv, commit=None):
    """Every seed of one case: stored seeds are read back, the others computed (and stored
    as each finishes when ``a.results`` is set).  Returns this case's records."""
    st = case_settings(name, a)
    mine = [r for r in results if not r.get("summary") and r["key"]["case"] == name
            and r["key"]["K"] == K and r["key"]["settings"] == st]
    radius = next((r["method_settings"]["radius"] for r in mine
                   if "radius" in r.get("method_settings", {})), None)
    out = []
    methods = methods_of(K, load_dims(name), a)
    for seed in range(a.seeds):
        done = {r["key"]["method"]: r for r in mine if r["key"]["seed"] == seed}
        if set(methods) <= set(done):
            out += [done[m] for m in methods]
            continue
        t0 = time.perf_counter()
        values, extra, radius = run_seed(name, K, seed, a, radius)
        prov = provenance(argv, commit)
        new = [{"key": {"case": name, "K": K, "seed": seed, "method": m, "settings": st},
                "method_settings": extra.get(m, {}), "values": v, "provenance": prov}
               for m, v in values.items()]
        out += new
        if a.results:
            results += new
            save_results(a.results, new)
        print(f"  {name}, K = {K}, seed {seed}: {time.perf_counter() - t0:.0f} s", flush=True)
    return out


def load_dims(name):
    """D of a case's data."""
    if name == "blobs":
        return 2000
    X, _ = BUNDLED[name]()
    return X.shape[1]


def fmt_stats(mean, std, key):
    """A table cell: ``mean ± std`` in the format of column ``key``."""
    if key in ("nnz", "flops"):
        return f"{mean:,.0f}" + (f" ± {std:,.0f}" if std > 0 else "")
    if key == "objective":
        return f"{mean:.5g} ± {std:.2g}"
    if key == "ratio":
        return f"{mean:.4f} ± {std:.4f}"
    if key in ("compression", "fit s"):
        return f"{mean:.2f} ± {std:.2f}"
    return f"{mean:.3f} ± {std:.3f}"


def fmt(v, key):
    """Mean ± std of the per-seed values ``v`` in the format of column ``key``."""
    v = np.asarray(v, dtype=float)
    return fmt_stats(v.mean(), v.std(), key)


KEYS = ["objective", "ratio", "AMI", "1-NN acc", "nnz", "flops", "compression", "fit s"]
HEADS = ["objective (eq. 1)", "÷ K-means", "AMI", "1-NN acc (partition)", "nnz", "flops",
         "compression", "fit s"]


def markdown_table(cells):
    """A Markdown table from ``{(metric, method): cell text}`` (rows in first-seen order)."""
    methods = []
    for (_, m) in cells:
        if m not in methods:
            methods.append(m)
    lines = ["| method | " + " | ".join(HEADS) + " |", "|---" * (len(KEYS) + 1) + "|"]
    for m in methods:
        lines.append(f"| {m} | " + " | ".join(cells.get((k, m), "") for k in KEYS) + " |")
    return "\n".join(lines)


def print_table(title, rec, n_seeds):
    print(f"\n### {title} ({n_seeds} seed{'s' if n_seeds > 1 else ''})\n")
    print(markdown_table({k: fmt(v, k[0]) for k, v in rec.items()}))
    sys.stdout.flush()


def check_args(p, a):
    """Refuse bad arguments through ``p.error``; the cases to run (``a.seeds`` filled in)."""
    for flag in ("seeds", "max_iter", "palm_iter", "palm_iter_init", "blob_max_iter",
                 "blob_palm_iter", "blob_palm_iter_init", "bisect_steps"):
        v = getattr(a, flag)
        if v is not None and v < 1:
            p.error(f"--{flag.replace('_', '-')} must be a positive integer, got {v}; "
                    f"pass a value >= 1")
    if a.hierarchical_refits < 0:
        p.error(f"--hierarchical-refits must be >= 0, got {a.hierarchical_refits}")
    if not a.sparsities or min(a.sparsities) < 1:
        p.error(f"--sparsities must be positive integers, got {a.sparsities}")
    a.seeds = a.seeds or (2 if a.quick else 5)
    cases = a.cases or (QUICK if a.quick else FULL)
    for case in cases:
        name, _, K = case.partition(":")
        if name not in (*BUNDLED, "blobs") or not K.isdigit() or int(K) < 2:
            p.error(f"--cases items are NAME:K with NAME in {', '.join((*BUNDLED, 'blobs'))} "
                    f"and K >= 2, got {case!r}")
    return cases


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
    p.add_argument("--variant", default="dqkm", choices=["dqkm", "paper"],
                   help="QKMeans(variant=...): dqkm's safeguarded palm4MSA step or the "
                        "published Algorithm 1")
    p.add_argument("--results", help="JSON file of finished (case, K, seed, method) records: "
                                      "each seed is added as it finishes, a rerun reads "
                                      "finished seeds back instead of computing them")
    argv = sys.argv[1:] if argv is None else list(argv)
    a = p.parse_args(argv)
    cases = check_args(p, a)
    print(f"dqkm reproduction: seeds 0..{a.seeds - 1}, sparsities {a.sparsities}, bundled data: "
          f"max_iter {a.max_iter}, palm_iter {a.palm_iter}, palm_iter_init {a.palm_iter_init} "
          f"(hierarchical); blobs: max_iter {a.blob_max_iter}, palm_iter {a.blob_palm_iter}, "
          f"palm_iter_init {a.blob_palm_iter_init} (palm4MSA); QK-means hierarchical_refits "
          f"{a.hierarchical_refits}, variant {a.variant}", flush=True)
    results = load_results(a.results)
    commit = git_commit()
    t_all = time.perf_counter()
    for case in cases:
        name, K = case.split(":")
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=RuntimeWarning)
            records = run_case(name, int(K), a, results, argv, commit)
        print_table(f"{name}, K = {K}", table_values(records), a.seeds)
        print(f"({time.perf_counter() - t0:.0f} s)", flush=True)
    print(f"\ntotal {time.perf_counter() - t_all:.0f} s")


if __name__ == "__main__":
    main()
