"""Out-of-core scaling of every estimator: seconds per iteration and peak worker RSS.

For each of KMeans, QKMeans, SparseEmbeddedKMeans, KMultipleMeans and the
ClusterIndex build, fits float32 blobs read from Zarr (``persist=False``:
every pass re-reads the store) on a LocalCluster of 2 workers × 1 thread at
1×, 2× and 4× a base size, the top at least 3× the workers' total memory.
Reports the median seconds per iteration (the ClusterIndex: seconds of the
whole build, its clusterer's fit included), the peak worker RSS (the kernel's
high-water mark ``VmHWM``, reset before each fit, where Linux allows; else
sampled every 0.2 s), whether a worker was restarted or paused, and a
refusal's message (a fit whose tasks cannot fit
is refused with the memory it needs).  The machine's load average is
recorded with the table, which replaces docs/benchmarks/scale.md with
``--markdown`` after every size (a run stopped early leaves the sizes it
measured, and says so).  Numba's disk cache is filled on the driver first, so
that the workers load the kernels instead of compiling them; a worker holding
them all is about 450 MiB, hence the default memory limit.

    .venv/bin/python benchmarks/bench_scale.py [--quick] [--memory-limit 600MiB] [--markdown]
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import dqkm  # noqa: E402
from dqkm import datasets  # noqa: E402
from dqkm.neighbors import ClusterIndex  # noqa: E402
from _report import add_markdown_option, write_page  # noqa: E402

D = 32
K = 16

NOTES = ('Seconds per iteration and peak worker RSS (its high-water mark, reset before each '
         'fit) at 1×, 2× and 4× a base size read from Zarr (`persist=False`: every pass '
         're-reads the store) on a LocalCluster of 2 workers × 1 thread; a fit whose tasks '
         'cannot fit is refused with the memory it needs. The estimators run one after the '
         'other on the same workers: "RSS at start" is what a worker process held before the '
         'fit (libraries, loaded kernels and what earlier fits left), "results held" the Dask '
         'results it kept in memory then.')


def estimators(iters):
    return {
        "KMeans": lambda: dqkm.KMeans(K, max_iter=iters, tol=0, persist=False, random_state=0),
        "QKMeans": lambda: dqkm.QKMeans(K, sparsity=3, max_iter=iters, tol=0, persist=False,
                                        palm_iter=10, palm_iter_init=50, random_state=0),
        "SparseEmbeddedKMeans": lambda: dqkm.SparseEmbeddedKMeans(
            K, n_components=16, random_state=0,
            kmeans={"max_iter": iters, "tol": 0, "persist": False}),
        "KMultipleMeans": lambda: dqkm.KMultipleMeans(K, n_prototypes=200, max_iter=iters,
                                                      max_inner_iter=3, persist=False,
                                                      random_state=0),
        "ClusterIndex": lambda: ClusterIndex(
            dqkm.KMeans(K, max_iter=iters, tol=0, persist=False, random_state=0)),
    }


def _rss():
    import psutil

    return psutil.Process().memory_info().rss


def _reset_peak():
    """Reset this process's peak RSS (Linux ``VmHWM``); False where it cannot be."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _start_memory(client):
    """The largest worker RSS and the largest held (managed) result bytes, in MiB,
    before a fit: what the worker kept from the previous ones."""
    rss = max(client.run(_rss).values(), default=0)
    workers = client.scheduler_info(n_workers=-1)["workers"].values()
    held = max((w["metrics"].get("managed_bytes", 0) for w in workers), default=0)
    return rss / 2**20, held / 2**20


def _refusal(e):
    """A refusal as "refused (pass): N MiB needed, M MiB available"; another error by
    its type and the start of its message."""
    import re

    need = re.search(r"^(.*?): one task needs about ([\d.]+ \w+)", str(e))
    room = re.search(r"can give a task ([\d.]+ \w+)", str(e))
    if type(e).__name__ == "MemoryBudgetError" and need and room:
        return (f"refused ({need.group(1)}): {need.group(2)} needed, {room.group(1)} "
                "available per task")
    return f"{type(e).__name__}: {str(e)[:160]}"


def measure(client, make, X, store):
    pids = client.run(os.getpid)
    start = _start_memory(client)
    peaks, paused, stop = {}, set(), threading.Event()
    hwm = all(client.run(_reset_peak).values())  # the exact peak, not a sampled one

    def poll():
        while not stop.is_set():
            try:
                for w, v in client.run(_rss).items():
                    peaks[w] = max(peaks.get(w, 0), v)
                workers = client.scheduler_info(n_workers=-1)["workers"]
                paused.update(a for a, w in workers.items() if w.get("status") == "paused")
            except Exception:
                pass
            time.sleep(0.2)

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    est = make()
    note = ""
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if isinstance(est, ClusterIndex):
                est.set_params(store=store, overwrite=True).fit(X)
            else:
                est.fit(X)
    except Exception as e:  # a refusal (or a failure) is a result of the benchmark
        note = _refusal(e)
    wall = time.perf_counter() - t0
    stop.set()
    th.join()
    hist = getattr(est, "history_", None)
    if note:
        per_iter = float("nan")
    elif hist:
        per_iter = float(np.median([h["seconds"] for h in hist]))
    else:
        per_iter = wall
    restarted = client.run(os.getpid) != pids
    if hwm and not restarted:
        peaks = client.run(_peak)
    if paused:
        note = (note + " " if note else "") + f"({len(paused)} worker(s) paused)"
    return per_iter, max(peaks.values(), default=0) / 2**20, restarted, note, start


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="top size 1x the workers' memory")
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--memory-limit", default="600MiB")
    add_markdown_option(p)
    args = p.parse_args()
    _run(args)


def _run(args):
    from dask.utils import parse_bytes
    from distributed import Client, LocalCluster

    total = 2 * parse_bytes(args.memory_limit)
    top = (1 if args.quick else 3) * total  # the 4x size holds at least this
    base = int(np.ceil(top / 4 / (D * 4)))
    sizes = [base, 2 * base, 4 * base]
    load = os.getloadavg()
    rows = []
    small = np.random.default_rng(0).random((4000, D)).astype(np.float32)
    for make in estimators(1).values():  # numba's disk cache, filled here on the driver:
        with warnings.catch_warnings():  # the workers load it instead of compiling
            warnings.simplefilter("ignore")
            make().fit(small)
    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None,
                               memory_limit=args.memory_limit, silence_logs=logging.ERROR)
        with cluster, Client(cluster) as client:
            for make in estimators(1).values():  # every kernel loaded in the workers
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    make().fit(small)
            for n in sizes:
                path = f"{tmp}/n{n}.zarr"
                X, _ = datasets.make_blobs(n, D, K, random_state=0, path=path)
                os.sync()
                for name, make in estimators(args.iters).items():
                    per_iter, peak, restarted, note, start = measure(
                        client, make, X, f"{tmp}/index.zarr")
                    rows.append((name, n, X.nbytes / 2**20, per_iter, start, peak, restarted,
                                 note))
                    print(f"{name:22s} N={n:>11,} {X.nbytes / 2**20:7.0f} MiB: "
                          f"{per_iter:8.3f} s/it, RSS at start {start[0]:5.0f} MiB (held "
                          f"{start[1]:.0f}), peak {peak:5.0f} MiB, restarted {restarted} {note}",
                          flush=True)
                shutil.rmtree(path)
                # the page after every size: a run stopped early keeps what it measured
                text = _table(args, total, load, rows, done=sizes.index(n) + 1)
                if args.markdown:
                    write_page("scale", "Out-of-core scaling of every estimator", text,
                               notes=NOTES)
    print("\n" + text)
    return text


def _table(args, total, load, rows, *, done):
    table = [f"2 workers × 1 thread × {args.memory_limit} (total {total / 2**20:.0f} MiB), "
             f"D = {D}, K = {K}, float32 blobs from Zarr, `persist=False`, {args.iters} "
             f"iterations; load average at the start {load[0]:.1f} / {load[1]:.1f} / "
             f"{load[2]:.1f} (1 / 5 / 15 min)."
             + ("" if done == 3 else f" Sizes measured so far: {done} of 3 (the run goes on "
                                     "or was stopped)."), "",
             "| estimator | N | data (MiB) | × workers' memory | s / iteration | "
             "worker RSS at start (MiB) | results held at start (MiB) | "
             "peak worker RSS (MiB) | worker restarted | refused / failed |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, n, mb, pi, (rs0, held), pk, rs, note in rows:
        table.append(f"| {name} | {n:,} | {mb:.0f} | {mb * 2**20 / total:.1f} | {pi:.3f} | "
                     f"{rs0:.0f} | {held:.0f} | {pk:.0f} | {rs} | {note.replace('|', '/')} |")
    return "\n".join(table)


if __name__ == "__main__":
    main()
