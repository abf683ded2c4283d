"""Mini-batch K-means: dqkm.MiniBatchKMeans against scikit-learn's, side by side.

Same data, same initial centers, same batch size, same number of epochs (so
the same number of samples seen), no early stopping, ``compute_labels=False``
on both; the final inertia is computed on all of X for both, over several
seeds (the batches are random draws, so a single seed compares two random
trajectories). Prints seconds, the ratio dqkm ÷ scikit-learn, and the
inertia ratios.

    .venv/bin/python benchmarks/bench_minibatch.py [--rows 200000] [--seeds 3] [--markdown]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from _report import add_markdown_option, markdown_table, write_page  # noqa: E402

import dqkm  # noqa: E402


def _inertia(X, centers):
    from sklearn.metrics import pairwise_distances_argmin_min

    _, d = pairwise_distances_argmin_min(X, centers)
    return float((d.astype(np.float64) ** 2).sum())


def run(rows, dims, ks, batch, epochs, seeds):
    """Per (D, K): for every seed, both estimators start from the same k-means++
    centers (drawn with that seed) and draw their batches with it; returns
    (N, D, K, best dqkm s, best sklearn s, ratio, inertia ratio of the means over
    the seeds, lowest and highest per-seed ratio, sklearn's own spread)."""
    from sklearn.cluster import MiniBatchKMeans as SK
    from sklearn.cluster import kmeans_plusplus
    from sklearn.datasets import make_blobs

    out = []
    for d in dims:
        for k in ks:
            X, _ = make_blobs(rows, d, centers=k, cluster_std=2.0, random_state=0)
            X = X.astype(np.float32)
            # One untimed fit of each first: the timed fits then measure the
            # steps, not numba's first load of the kernels or OpenMP's start.
            warm, _ = kmeans_plusplus(X[:4096], k, random_state=0)
            for make in (dqkm.MiniBatchKMeans, SK):
                make(k, init=warm, batch_size=batch, max_iter=1, n_init=1,
                     compute_labels=False).fit(X[:4096])
            times = {"dqkm": [], "sklearn": []}
            inertia = {"dqkm": [], "sklearn": []}
            for seed in range(seeds):
                init, _ = kmeans_plusplus(X, k, random_state=seed)
                common = dict(init=init, batch_size=batch, max_iter=epochs,
                              max_no_improvement=None, compute_labels=False,
                              random_state=seed, n_init=1)
                for name, make in (("dqkm", lambda: dqkm.MiniBatchKMeans(k, **common)),
                                   ("sklearn", lambda: SK(k, **common))):
                    est = make()
                    t = time.perf_counter()
                    est.fit(X)
                    times[name].append(time.perf_counter() - t)
                    inertia[name].append(_inertia(X, est.cluster_centers_))
            t_d, t_s = min(times["dqkm"]), min(times["sklearn"])
            per_seed = np.array(inertia["dqkm"]) / np.array(inertia["sklearn"])
            mean_ratio = float(np.mean(inertia["dqkm"]) / np.mean(inertia["sklearn"]))
            spread = max(inertia["sklearn"]) / min(inertia["sklearn"])
            out.append((rows, d, k, t_d, t_s, t_d / t_s, mean_ratio, per_seed.min(),
                        per_seed.max(), spread))
            print(f"N={rows} D={d} K={k}: dqkm {t_d:.3f}s, sklearn {t_s:.3f}s, "
                  f"ratio {t_d / t_s:.2f}, inertia ratio {mean_ratio:.4f} "
                  f"(per seed {per_seed.min():.4f}-{per_seed.max():.4f}; sklearn's spread "
                  f"over seeds {spread:.4f})", flush=True)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--dims", type=int, nargs="+", default=[8, 64])
    p.add_argument("--ks", type=int, nargs="+", default=[16, 128])
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--seeds", type=int, default=3)
    add_markdown_option(p)
    args = p.parse_args(argv)
    rows = run(args.rows, args.dims, args.ks, args.batch, args.epochs, args.seeds)
    table = markdown_table(
        ["N", "D", "K", "dqkm (s)", "scikit-learn (s)", "dqkm ÷ sklearn", "inertia ratio",
         "per seed", "sklearn's spread"],
        [(f"{n:,}", d, k, f"{a:.3f}", f"{b:.3f}", f"{r:.2f}", f"{q:.4f}",
          f"{lo:.4f}–{hi:.4f}", f"{sp:.4f}")
         for n, d, k, a, b, r, q, lo, hi, sp in rows])
    print("\n" + table)
    if args.markdown:
        write_page("minibatch", "Mini-batch K-means", table, notes=(
            f"Whole `fit` in memory, float32 blobs, batch size {args.batch}, {args.epochs} "
            "epochs (the same samples seen), no early stopping. For each of "
            f"{args.seeds} seeds both start from the same k-means++ centers and draw their "
            "batches with that seed; seconds: the best over the seeds. Inertia ratio: the "
            "mean over the seeds of dqkm's final inertia on all of X over scikit-learn's "
            "(below 1: dqkm's is lower); per seed: the lowest and highest single-seed ratio; "
            "sklearn's spread: its own highest over lowest inertia across the seeds (how "
            "much the seed, init and batch draws, moves the result)."))


if __name__ == "__main__":
    main()
