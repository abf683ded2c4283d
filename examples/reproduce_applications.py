"""Reproduce the applications of the QuicK-means papers: 1-NN through the cluster
partition, and Nyström with (Q)K-means, uniform and Fast-Nyström landmarks.

Journal version (Machine Learning 2021), Sects. 4.5–4.6 and Table 4; preprint
Sects. 4.3–4.4 (blobs: D = 2000, K ∈ {128, 256, 512}, 29,000 training points).

    .venv/bin/python examples/reproduce_applications.py --quick   # digits + blobs K=128, 2 seeds
    .venv/bin/python examples/reproduce_applications.py   # + breast cancer, blobs K=256, 512; 5 seeds

For every data set and seed:
* train/test split (digits, breast cancer: 80/20 stratified, by the seed;
  blobs: 29,000 + 1,000 points of ``--blob-centers`` Gaussian blobs, std 12 — 1000
  blobs, 100 with --quick);
* K-means (dqkm.KMeans, k-means++) and QK-means (dqkm.QKMeans, sparsity 5)
  with K clusters, the same seed;
* 1-NN accuracy and query time of the test set: ClusterIndex(K-means),
  ClusterIndex(QK-means) (n_probe = 1), scikit-learn KNeighborsClassifier
  (brute force, ball tree) — N/A, as in the preprint's Fig. 4, when a
  scikit-learn search would take more than ``--tree-budget`` (10) times
  ClusterIndex(K-means)'s time (projected from its first 1 % and 5 % of the
  queries; one that would take under 10 s always runs);
* Nyström (RBF, γ = 1 / median of the squared distances between 500 training
  points): relative error (eq. 15) on a sample of up to 5000 training points
  (2000 with --quick) and LinearSVC accuracy on the features, for landmarks
  uniform, K-means, QK-means, Fast-Nyström with uniform seeds ("Un. F-Nys")
  and with K-means seeds ("K. F-Nys"), all with K landmarks.
Prints mean ± std over the seeds.  If dqkm.QKMeans cannot be fitted in this
checkout its rows are reported missing.

``--results FILE`` keeps every finished (data set, K, seed) in a JSON file and
skips it when run again with the same settings, so that a grid too long for
one sitting (blobs at K = 512: minutes per QK-means fit, and LinearSVC trains
one model per class) can be filled in over several runs; ``--no-svm`` leaves
the LinearSVC column out, ``--svm-landmarks`` keeps it for some landmarks only
(the preprint's blobs table has K-means and QK-means), ``--seed-ids`` runs only
some seeds (so that two processes can share one case), and ``--svm-summary``
prints the LinearSVC accuracies of a results file over every landmark, K and
stored seed, whichever runs stored them.
"""

from __future__ import annotations

import argparse
import json
import os
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
from dqkm.kernel_approximation import FactorNystroem  # noqa: E402
from dqkm.metrics import ami, model_flops, model_nnz, nystroem_error  # noqa: E402
from dqkm.neighbors import ClusterIndex  # noqa: E402


LANDMARKS = ["uniform", "Un. F-Nys", "K. F-Nys", "K-means", "QK-means"]


def qkmeans_available():
    try:
        from dqkm.kernels import default_constraints  # noqa: F401
        dqkm.QKMeans  # noqa: B018
    except (ImportError, AttributeError) as e:
        return str(e)
    return None


def load(name, seed, blob_centers):
    from sklearn.model_selection import train_test_split

    if name == "digits":
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
    elif name == "breast cancer":
        from sklearn.datasets import load_breast_cancer

        X, y = load_breast_cancer(return_X_y=True)
    else:
        X, y = datasets.make_blobs(30_000, 2000, centers=blob_centers, cluster_std=12.0,
                                   chunks=10_000, random_state=seed)
        X, y = X.compute(), y.compute()
        return X[:29_000], X[29_000:], y[:29_000], y[29_000:]
    return train_test_split(X.astype(np.float64), y, test_size=0.2, stratify=y,
                            random_state=seed)


def timed(f):
    t0 = time.perf_counter()
    out = f()
    return out, time.perf_counter() - t0


def would_exceed(predict, X, limit):
    """Whether ``predict(X)`` would take more than ``limit`` seconds, judged from
    its first 1 % of the rows and, if that says yes, from 1 % and 5 %: the
    time per row between the two, which leaves out a fixed overhead that would
    dominate a projection from a few rows."""
    n = len(X)
    h1 = max(1, n // 100)
    _, t1 = timed(lambda: predict(X[:h1]))
    if t1 * n / h1 <= limit:
        return False
    h2 = max(h1 + 1, n // 20)
    if h2 >= n:
        return t1 > limit
    _, t2 = timed(lambda: predict(X[:h2]))
    per_row = max(t2 - t1, 0.0) / (h2 - h1)
    return t1 + per_row * (n - h1) > limit


def step(name, K, seed, t0, what):
    """One progress line on stderr per step of a case (a blobs seed takes minutes to an
    hour; the table is printed when all seeds of a case are done)."""
    print(f"    [{name}, K = {K}, seed {seed}, {time.perf_counter() - t0:6.0f} s] {what}",
          file=sys.stderr, flush=True)


def run_one(name, K, seed, a, rec):
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.svm import LinearSVC

    t0 = time.perf_counter()
    Xtr, Xte, ytr, yte = load(name, seed, a.blob_centers)
    rng = np.random.default_rng(seed)
    sub = Xtr[rng.choice(len(Xtr), min(500, len(Xtr)), replace=False)]
    gamma = 1.0 / float(np.median(((sub[:250, None] - sub[None, 250:]) ** 2).sum(-1)))
    sample = Xtr[rng.choice(len(Xtr), min(a.sample, len(Xtr)), replace=False)]
    max_iter = 10 if name == "blobs" else 50
    models = {}
    models["K-means"], t = timed(lambda: dqkm.KMeans(K, max_iter=max_iter,
                                                     random_state=seed).fit(Xtr))
    rec[("fit s", "K-means")].append(t)
    step(name, K, seed, t0, f"K-means fitted ({t:.0f} s)")
    if a.qk_missing is None and not (name == "blobs" and a.no_qk_blobs):
        models["QK-means"], t = timed(lambda: dqkm.QKMeans(
            K, sparsity=5, max_iter=max_iter, palm_iter=a.palm_iter,
            palm_iter_init=a.palm_iter_init, random_state=seed).fit(Xtr))
        rec[("fit s", "QK-means")].append(t)
        step(name, K, seed, t0, f"QK-means fitted ({t:.0f} s)")
    for m, model in models.items():
        rec[("AMI", m)].append(ami(ytr, model.predict(Xtr)))
        rec[("nnz", m)].append(model_nnz(model))
        rec[("flops", m)].append(model_flops(model))
        idx = ClusterIndex(model).fit(Xtr, ytr)
        pred, t = timed(lambda i=idx: i.predict(Xte))
        rec[("1-NN acc", f"ClusterIndex({m})")].append(float(np.mean(pred == yte)))
        rec[("1-NN query s", f"ClusterIndex({m})")].append(t)
    budget = a.tree_budget * rec[("1-NN query s", "ClusterIndex(K-means)")][-1]
    for algo in ("brute", "ball_tree"):
        clf = KNeighborsClassifier(1, algorithm=algo).fit(Xtr, ytr)
        # the preprint's N/A: > 10× the K-means search (one of under 10 s always runs)
        if would_exceed(clf.predict, Xte, max(budget, 10.0)):
            acc, t = float("nan"), float("nan")
        else:
            pred, t = timed(lambda c=clf: c.predict(Xte))
            acc = float(np.mean(pred == yte))
        rec[("1-NN acc", f"sklearn {algo}")].append(acc)
        rec[("1-NN query s", f"sklearn {algo}")].append(t)
    step(name, K, seed, t0, "1-NN searches done")
    landmarks = {"uniform": FactorNystroem("uniform", n_components=K, gamma=gamma,
                                           random_state=seed),
                 "Un. F-Nys": FactorNystroem("hadamard", n_components=K, gamma=gamma,
                                             seeds="uniform", random_state=seed),
                 "K. F-Nys": FactorNystroem("hadamard", n_components=K, gamma=gamma,
                                            seeds="k-means", random_state=seed)}
    for m, model in models.items():
        landmarks[m] = FactorNystroem(model, gamma=gamma)
    for m, fn in landmarks.items():
        fn.fit(Xtr)
        rec[("Nyström error", m)].append(nystroem_error(sample, fn))
        Ftr, t = timed(lambda f=fn: f.transform(Xtr))
        rec[("transform s", m)].append(t)
        if a.no_svm or (a.svm_landmarks and m not in a.svm_landmarks):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # liblinear's ConvergenceWarning at max_iter
            svm = LinearSVC(max_iter=a.svm_iter, random_state=seed).fit(Ftr, ytr)
        rec[("SVM acc", m)].append(float(svm.score(fn.transform(Xte), yte)))
        step(name, K, seed, t0, f"LinearSVC on the {m} features: {rec[('SVM acc', m)][-1]:.3f}")
    step(name, K, seed, t0, "Nyström done")


def fmt(v):
    v = np.asarray(v, dtype=float)
    if np.isnan(v).all():
        return "N/A"
    if np.isnan(v).any():  # some seeds N/A: the mean of the others, with how many
        return f"{fmt(v[~np.isnan(v)])} ({int((~np.isnan(v)).sum())} of {v.size} seeds)"
    if np.all(v == v.astype(np.int64)) and v.mean() >= 100:
        return f"{v.mean():,.0f}"
    if v.mean() < 0.01:
        return f"{v.mean():.2e} ± {v.std():.1e}"
    return f"{v.mean():.3f} ± {v.std():.3f}"


def settings(name, a):
    """What a stored result depends on besides (data set, K, seed)."""
    out = {"sample": a.sample, "palm_iter": a.palm_iter, "palm_iter_init": a.palm_iter_init,
           "svm_iter": None if a.no_svm else a.svm_iter, "tree_budget": a.tree_budget,
           "qk": a.qk_missing is None and not (name == "blobs" and a.no_qk_blobs)}
    if a.svm_landmarks and not a.no_svm:
        out["svm_landmarks"] = sorted(a.svm_landmarks)
    if name == "blobs":
        out["blob_centers"] = a.blob_centers
    return out


def svm_summary(results):
    """The LinearSVC accuracies stored in ``results``, one table per data set and settings:
    a landmark × K grid of mean ± std over the seeds found, whatever ``--svm-landmarks`` /
    ``--no-qk-blobs`` run produced each (they select what is computed, not its value).
    A seed stored twice with different accuracies is reported, not averaged."""
    groups = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for r in results:
        key = r["key"]
        common = {k: v for k, v in key["settings"].items() if k not in ("svm_landmarks", "qk")}
        group = groups[(key["dataset"], json.dumps(common, sort_keys=True))]
        for (metric, m), v in r["values"]:
            if metric == "SVM acc" and v is not None:
                group[(m, key["K"])][key["seed"]].append(v)
    lines = []
    for (dataset, common), group in groups.items():
        if not group:
            continue
        Ks = sorted({K for _, K in group})
        lines += [f"\n### LinearSVC accuracy, {dataset} ({common})\n",
                  "| landmarks | " + " | ".join(f"K = {K}" for K in Ks) + " |",
                  "|---" * (len(Ks) + 1) + "|"]
        conflicts = []
        for m in [m for m in LANDMARKS if any((m, K) in group for K in Ks)]:
            cells = []
            for K in Ks:
                by_seed = group.get((m, K), {})
                for seed, vs in sorted(by_seed.items()):
                    if max(vs) - min(vs) > 1e-12:
                        conflicts.append(f"{m}, K = {K}, seed {seed}: {sorted(set(vs))}")
                vals = [vs[0] for _, vs in sorted(by_seed.items())]
                cells.append(f"{fmt(vals)} ({len(vals)} seed{'s' if len(vals) > 1 else ''})"
                             if vals else "")
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        lines += [f"differing values stored for {c}" for c in conflicts]
    print("\n".join(lines) if lines else "no LinearSVC accuracy stored", flush=True)


def print_table(title, rec, n_seeds):
    print(f"\n### {title} ({n_seeds} seed{'s' if n_seeds > 1 else ''})\n", flush=True)
    metrics = ["1-NN acc", "1-NN query s", "Nyström error", "SVM acc", "transform s", "AMI",
               "nnz", "flops", "fit s"]
    methods = []
    for (_, m) in rec:
        if m not in methods:
            methods.append(m)
    print("| method | " + " | ".join(metrics) + " |")
    print("|---" * (len(metrics) + 1) + "|")
    for m in methods:
        cells = [fmt(rec[(k, m)]) if (k, m) in rec else "" for k in metrics]
        print(f"| {m} | " + " | ".join(cells) + " |")
    sys.stdout.flush()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="digits and blobs K=128 only, 2 seeds, smaller palm4MSA budgets")
    p.add_argument("--seeds", type=int)
    p.add_argument("--seed-ids", type=int, nargs="+",
                   help="run only these of the seeds 0 … --seeds − 1 (e.g. to split one "
                        "case's seeds between processes sharing a --results file); the "
                        "table is over these")
    p.add_argument("--blob-centers", type=int,
                   help="Gaussian blobs (classes) of the blobs data set (default 1000 as the "
                        "preprint's Table 2; 100 with --quick: LinearSVC trains one model "
                        "per class)")
    p.add_argument("--palm-iter", type=int)
    p.add_argument("--palm-iter-init", type=int)
    p.add_argument("--svm-iter", type=int, default=1000)
    p.add_argument("--datasets", nargs="*")
    p.add_argument("--no-qk-blobs", action="store_true",
                   help="no QK-means on blobs (hierarchical palm4MSA of a K×2000 operator takes "
                        "minutes per fit on a small machine)")
    p.add_argument("--blob-ks", type=int, nargs="*",
                   help="K values of the blobs cases (default 128 256 512; 128 with --quick)")
    p.add_argument("--no-svm", action="store_true",
                   help="leave LinearSVC out (on the 1000-class blobs one fit takes minutes)")
    p.add_argument("--svm-landmarks", nargs="+", choices=LANDMARKS,
                   help="LinearSVC only on these landmarks' features (default all)")
    p.add_argument("--tree-budget", type=float, default=10.0,
                   help="report a scikit-learn 1-NN search N/A when it would take more than "
                        "this many times ClusterIndex(K-means)'s time (default 10, as the "
                        "preprint)")
    p.add_argument("--results", help="JSON file of finished (data set, K, seed) results: "
                                     "read to skip them, written after each one (merged "
                                     "with what other runs wrote there meanwhile)")
    p.add_argument("--svm-summary", action="store_true",
                   help="print the LinearSVC accuracies stored in --results (every landmark "
                        "and K, over the seeds stored, whichever runs stored them) and exit")
    a = p.parse_args(argv)
    if a.svm_summary:
        if not a.results or not os.path.exists(a.results):
            p.error(f"--svm-summary reads the file given by --results; got {a.results!r}, "
                    "which does not exist")
        svm_summary(load_results(a.results))
        return
    for flag, v in (("--seeds", a.seeds), ("--blob-centers", a.blob_centers),
                    ("--palm-iter", a.palm_iter), ("--palm-iter-init", a.palm_iter_init),
                    ("--svm-iter", a.svm_iter)):
        if v is not None and v < 1:
            p.error(f"{flag} must be a positive integer, got {v}")
    if a.tree_budget <= 0:
        p.error(f"--tree-budget must be positive, got {a.tree_budget}")
    n_seeds = a.seeds or (2 if a.quick else 5)
    seed_ids = list(range(n_seeds))
    if a.seed_ids:
        bad = sorted({i for i in a.seed_ids if not 0 <= i < n_seeds})
        if bad:
            p.error(f"--seed-ids must lie in 0 … {n_seeds - 1} (--seeds {n_seeds}), got {bad}")
        seed_ids = sorted(set(a.seed_ids))
    a.sample = 2000 if a.quick else 5000
    a.blob_centers = a.blob_centers or (100 if a.quick else 1000)
    a.palm_iter = a.palm_iter or (20 if a.quick else 50)
    a.palm_iter_init = a.palm_iter_init or (50 if a.quick else 300)
    a.qk_missing = qkmeans_available()
    if a.qk_missing:
        print(f"QK-means rows missing: dqkm.QKMeans cannot be fitted in this checkout "
              f"({a.qk_missing}).")
    every = [("digits", 64), ("breast cancer", 64), ("blobs", 128), ("blobs", 256),
             ("blobs", 512)]
    cases = every[:1] + every[2:3] if a.quick else every
    if a.datasets:  # chosen among all cases (with --quick: blobs K=128 only)
        cases = [c for c in every if c[0] in a.datasets
                 and not (a.quick and c[0] == "blobs" and c[1] != 128)]
    if a.blob_ks:
        bad = [K for K in a.blob_ks if K < 2]
        if bad:
            p.error(f"--blob-ks must be integers >= 2, got {bad}")
        cases = [c for c in cases if c[0] != "blobs"] + [
            ("blobs", K) for K in a.blob_ks if a.datasets is None or "blobs" in a.datasets]
    results = load_results(a.results)
    for name, K in cases:
        rec = defaultdict(list)
        t0 = time.perf_counter()
        for seed in seed_ids:
            key = {"dataset": name, "K": K, "seed": seed, "settings": settings(name, a)}
            done = [r["values"] for r in results if r["key"] == key]
            if done:
                for k, v in done[0]:
                    rec[tuple(k)].append(float("nan") if v is None else v)
                continue
            one = defaultdict(list)
            run_one(name, K, seed, a, one)
            for k, v in one.items():
                rec[k].extend(v)
            if a.results:
                values = [[list(k), None if np.isnan(v[0]) else v[0]] for k, v in one.items()]
                results.append({"key": key, "values": values})
                save_results(a.results, results)
            print(f"  {name}, K = {K}, seed {seed}: {time.perf_counter() - t0:.0f} s",
                  flush=True)
        print_table(f"{name}, K = {K}", rec, len(seed_ids))
        print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
