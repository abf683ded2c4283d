"""``make demo`` / ``dqkm demo``: the main job on an embedded default.

Generates blobs into a Zarr store in a temporary folder, starts a
``distributed.LocalCluster``, fits every dqkm estimator that applies to dense
blobs, and prints one table row per algorithm.
"""

from __future__ import annotations

import logging
import tempfile
import time

import dask
import numpy as np
from distributed import Client, LocalCluster
from sklearn.metrics import adjusted_rand_score

import dqkm

from . import datasets
from .parallel.engine import compute

__all__ = ["run_demo"]


def _candidates(n_clusters, seed):
    out = [("KMeans (k-means++)", dqkm.KMeans(n_clusters, random_state=seed)),
           ("KMeans (k-means||)", dqkm.KMeans(n_clusters, init="k-means||", random_state=seed))]
    if hasattr(dqkm, "QKMeans"):
        out.append(("QKMeans (s=5)", dqkm.QKMeans(n_clusters, random_state=seed)))
    if hasattr(dqkm, "SparseEmbeddedKMeans"):
        out.append(("SparseEmbeddedKMeans", dqkm.SparseEmbeddedKMeans(
            n_clusters, n_components=32, random_state=seed)))
    return out


def run_demo(n_samples=500_000, n_features=64, n_clusters=16, n_workers=2, seed=0,
             print_fn=print):
    # the in-process scheduler logs at INFO; the demo prints its own lines
    logging.getLogger("distributed").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="dqkm-demo-") as tmp:
        path = f"{tmp}/blobs.zarr"
        t0 = time.perf_counter()
        X, y = datasets.make_blobs(n_samples, n_features, n_clusters, cluster_std=2.0,
                                   random_state=seed, path=path)
        print_fn(f"generated {n_samples:,} x {n_features} float32 blobs ({X.nbytes / 1e6:.0f} MB) "
                 f"into {path} in {time.perf_counter() - t0:.1f}s")
        with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
            cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1,
                                   dashboard_address=":0", silence_logs=logging.ERROR)
        with cluster, Client(cluster) as client:
            link = client.dashboard_link
            print_fn(f"LocalCluster: {n_workers} workers x 1 thread; dashboard: {link}")
            y_true = np.asarray(compute(y)[0])
            rows = []
            for name, model in _candidates(n_clusters, seed):
                t0 = time.perf_counter()
                model.fit(X)
                labels = np.asarray(compute(model.labels_)[0])
                seconds = time.perf_counter() - t0
                rows.append((name, model.inertia_, model.n_iter_, seconds,
                             adjusted_rand_score(y_true, labels)))
        header = f"{'algorithm':<24} {'inertia':>14} {'iterations':>10} {'seconds':>8} {'ARI':>6}"
        print_fn("")
        print_fn(header)
        print_fn("-" * len(header))
        for name, inertia, n_iter, seconds, ari in rows:
            print_fn(f"{name:<24} {inertia:>14.6g} {n_iter:>10} {seconds:>8.2f} {ari:>6.3f}")
        print_fn(f"(dashboard was at {link}; ARI against the generating labels)")
    return rows
