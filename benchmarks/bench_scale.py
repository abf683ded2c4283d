"""Out-of-core scaling: seconds per K-means iteration from Zarr as N grows.

N ∈ {1M, 2M, 4M, 8M}, D = 64, K = 64, float32, on a LocalCluster of 2 workers
× 1 thread with ``persist=False`` (every pass re-reads the store).  Prints
seconds per iteration, the fitted scaling exponent b in t ∝ N^b (target:
linear within 10 %, i.e. 0.9 ≤ b ≤ 1.1) and each run's peak worker RSS
(target: flat in N).

    .venv/bin/python benchmarks/bench_scale.py [--quick] [--memory-limit 1GB]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import dqkm  # noqa: E402
from dqkm import datasets  # noqa: E402


def _rss():
    import psutil

    return psutil.Process().memory_info().rss


def measure(client, X, n_iter):
    peaks, stop = {}, threading.Event()

    def poll():
        while not stop.is_set():
            try:
                for w, v in client.run(_rss).items():
                    peaks[w] = max(peaks.get(w, 0), v)
            except Exception:
                pass
            time.sleep(0.2)

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    init = np.asarray(X[:64].compute())
    km = dqkm.KMeans(64, init=init, max_iter=n_iter, tol=0, persist=False).fit(X)
    stop.set()
    th.join()
    per_iter = float(np.median([h["seconds"] for h in km.history_]))
    return per_iter, max(peaks.values()) / 2**20


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--memory-limit", default="1GB")
    args = p.parse_args()
    from distributed import Client, LocalCluster

    sizes = [250_000, 500_000, 1_000_000] if args.quick else \
        [1_000_000, 2_000_000, 4_000_000, 8_000_000]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None,
                               memory_limit=args.memory_limit, silence_logs=logging.ERROR)
        with cluster, Client(cluster) as client:
            pids = client.run(os.getpid)
            dqkm.KMeans(4, max_iter=1).fit(np.random.default_rng(0).random((1000, 64)))
            for n in sizes:
                path = f"{tmp}/n{n}.zarr"
                t0 = time.perf_counter()
                X, _ = datasets.make_blobs(n, 64, 64, chunks=125_000, random_state=0,
                                           path=path)
                gen = time.perf_counter() - t0
                os.sync()  # measure reads, not the write-back of the store just written
                per_iter, peak = measure(client, X, args.iters)
                rows.append((n, X.nbytes / 2**20, gen, per_iter, peak))
                print(f"N={n:>9,}: {X.nbytes / 2**20:7.0f} MiB, generated in {gen:5.1f}s, "
                      f"{per_iter:.3f} s/iteration, peak worker RSS {peak:.0f} MiB", flush=True)
                import shutil

                shutil.rmtree(path)
            restarted = client.run(os.getpid) != pids
    n = np.array([r[0] for r in rows], dtype=float)
    t = np.array([r[3] for r in rows])
    b = np.polyfit(np.log(n), np.log(t), 1)[0]
    peaks = [r[4] for r in rows]
    print("\n| N | data (MiB) | s / iteration | s / iteration per 1M rows | peak worker RSS (MiB) |")
    print("|---|---|---|---|---|")
    for nn, mb, _, pi, pk in rows:
        print(f"| {nn:,} | {mb:.0f} | {pi:.3f} | {pi / (nn / 1e6):.3f} | {pk:.0f} |")
    print(f"\nscaling exponent b (t ∝ N^b): {b:.3f} (target 0.9–1.1); peak RSS range "
          f"{min(peaks):.0f}–{max(peaks):.0f} MiB (memory_limit {args.memory_limit} per worker); "
          f"workers restarted: {restarted}")


if __name__ == "__main__":
    main()
