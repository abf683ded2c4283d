"""Lloyd K-means per iteration: dqkm vs scikit-learn vs dask-ml vs the GEMM bound.

Same data (float32, generated once and written to Zarr), same initial centers,
``tol=0`` and a fixed number of iterations for every method.  Prints seconds per
iteration and ratios.  Run:

    .venv/bin/python benchmarks/bench_kmeans.py [--markdown]   # cases (a) and (b)
    .venv/bin/python benchmarks/bench_kmeans.py --quick    # smaller, for a smoke run
    .venv/bin/python benchmarks/bench_kmeans.py --memory   # out-of-core: store 2x the cluster memory

Case (a): 200k × 256, K = 64.  Case (b): 100k × 1024, K = 512.

Low-dimension part (``--lowd``): D ∈ {2, 3, 8, 16, 32, 64} (K = 16, 64, 64, 64,
256, 64), 500k rows of float32 blobs in 8 persisted chunks, threaded scheduler;
dqkm against scikit-learn's lloyd and elkan and faiss (``faiss.Kmeans``, the
same initial centroids, every row used, 2 threads).  The "GEMM kernel" column
is dqkm with only its float32 GEMM kernel (uncertified labels), measured in the
same run.
Each method is timed ``--repeat`` times, interleaved, and the best is kept::

    .venv/bin/python benchmarks/bench_kmeans.py --lowd [--rows 200000] [--markdown]

``--bounds``: kernel level, one thread, the Hamerly and Elkan steps of
:mod:`dqkm.kernels.bounds` against Lloyd steps from the same init: seconds per
step and the share of row-center distances skipped at each iteration.

``--converge``: whole fits to convergence, ``KMeans(algorithm='lloyd' | 'hamerly'
| 'elkan')`` against scikit-learn's lloyd and elkan (same initial centers, the
same ``tol=1e-4``), float32 blobs with D ≤ 64 and K ∈ {16, 64, 256}, persisted,
threads; with the share of distances the bounds skipped per iteration.
``--ooc``: out of core (Zarr on disk, a LocalCluster of 2 single-thread
workers, ``persist=False``), D = 16: seconds per iteration of the Lloyd pass
and of 'hamerly' with its bounds in worker memory and in files beside the data;
the difference of the last two is the files' extra I/O.  Both default to
200,000 rows (``--rows``) so that they run on a loaded 2-core machine::

    .venv/bin/python benchmarks/bench_kmeans.py --converge --ooc --rows 200000 [--markdown]

``--cluster``: X persisted on a LocalCluster of 2 single-thread workers, D = 16,
K = 64, ``--iters`` iterations (12 below): 'hamerly' against 'lloyd', whole fits
and late passes, with distributed's default malloc trimming and without it, at
``--cluster-rows`` rows (default 1M and 4M)::

    .venv/bin/python benchmarks/bench_kmeans.py --cluster --iters 12 --repeat 3 [--markdown]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
import warnings

import dask
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import dqkm  # noqa: E402
from _report import add_markdown_option, markdown_table, write_page  # noqa: E402
from dqkm import datasets  # noqa: E402
from dqkm.kernels import lloyd as lloyd_kernels  # noqa: E402
from dqkm.parallel.bounds import choose_algorithm  # noqa: E402

NO_TRIM = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}


def per_iter(fit, n_iter, repeat=1):
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        model = fit()
        dt = time.perf_counter() - t0
        it = getattr(model, "n_iter_", n_iter)
        best = min(best, dt / max(int(np.max(it)), 1))
    return best


def gemm_time(X, C, repeat=3):
    from threadpoolctl import threadpool_limits

    with threadpool_limits(2):
        best = np.inf
        for _ in range(repeat):
            t0 = time.perf_counter()
            X @ C.T
            best = min(best, time.perf_counter() - t0)
    return best


def run_case(name, n, d, k, n_iter, tmp, with_daskml=True, repeat=1):
    from distributed import Client, LocalCluster
    from sklearn.cluster import KMeans as SkKMeans

    path = f"{tmp}/{name}.zarr"
    # default chunking (~64 MB chunks, at least 2 per core); Zarr's default codec (zstd
    # level 0), as a user's store usually is, and an uncompressed copy (make_blobs' default)
    X, _ = datasets.make_blobs(n, d, k, cluster_std=4.0, random_state=0, path=path,
                               compressors="auto")
    Xz = dqkm.io.as_dask_array(path)
    dqkm.io.save_array(Xz, f"{tmp}/{name}-raw.zarr", compressors=None)
    Xr = dqkm.io.as_dask_array(f"{tmp}/{name}-raw.zarr")
    Xn = Xz.compute()
    init = Xn[np.random.default_rng(1).choice(n, k, replace=False)]
    rows = {}
    kw = dict(n_clusters=k, init=init, max_iter=n_iter, tol=0.0)

    rows["sklearn KMeans (lloyd, in memory)"] = per_iter(
        lambda: SkKMeans(algorithm="lloyd", n_init=1, **kw).fit(Xn), n_iter, repeat)
    rows["one X·Cᵀ GEMM (2 BLAS threads)"] = gemm_time(Xn, init)

    with dask.config.set(scheduler="threads"):
        Xp = Xz.persist()
        dqkm.KMeans(**{**kw, "max_iter": 1}).fit(Xp)  # numba compile/warm-up
        rows["dqkm KMeans, threads, persisted"] = per_iter(
            lambda: dqkm.KMeans(persist=True, **kw).fit(Xp), n_iter, repeat)
        rows["dqkm KMeans, threads, from Zarr"] = per_iter(
            lambda: dqkm.KMeans(persist=False, **kw).fit(Xz), n_iter)
        rows["dqkm KMeans, threads, from Zarr (uncompressed)"] = per_iter(
            lambda: dqkm.KMeans(persist=False, **kw).fit(Xr), n_iter)
    with dask.config.set(NO_TRIM):
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None,
                               silence_logs=logging.ERROR)
    with cluster, Client(cluster) as client:
        client.run(lambda: None)
        dqkm.KMeans(**{**kw, "max_iter": 1}).fit(Xz)  # compile (or load the numba cache) on workers
        Xc = client.persist(Xz)
        rows["dqkm KMeans, LocalCluster 2×1, persisted"] = per_iter(
            lambda: dqkm.KMeans(persist=True, **kw).fit(Xc), n_iter)
        client.cancel(Xc)
        rows["dqkm KMeans, LocalCluster 2×1, from Zarr"] = per_iter(
            lambda: dqkm.KMeans(persist=False, **kw).fit(Xz), n_iter)
        rows["dqkm KMeans, LocalCluster 2×1, from Zarr (uncompressed)"] = per_iter(
            lambda: dqkm.KMeans(persist=False, **kw).fit(Xr), n_iter)
        if with_daskml:
            rows["dask-ml KMeans, LocalCluster 2×1, from Zarr"] = daskml_per_iter(
                Xz, init, n_iter)
    if with_daskml:
        with dask.config.set(scheduler="threads"):
            rows["dask-ml KMeans, threads, from Zarr"] = daskml_per_iter(Xz, init, n_iter)
    return rows


def daskml_per_iter(Xz, init, n_iter):
    try:
        from dask_ml.cluster import KMeans as DmKMeans
    except ImportError:
        return "not installed (pip install 'dqkm[bench]')"
    return per_iter(lambda: DmKMeans(init=init, n_clusters=init.shape[0], max_iter=n_iter,
                                     tol=0.0, random_state=0).fit(Xz), n_iter)


def print_table(name, rows):
    """Print (and return as Markdown) one case's table: seconds per iteration and
    the ratios to scikit-learn, the GEMM bound and dask-ml."""
    sk = rows["sklearn KMeans (lloyd, in memory)"]
    gemm = rows["one X·Cᵀ GEMM (2 BLAS threads)"]
    dm = rows.get("dask-ml KMeans, threads, from Zarr")
    body = []
    for label, t in rows.items():
        if isinstance(t, str):
            body.append([label, t, "", "", ""])
            continue
        r_dm = f"{t / dm:.2f}" if isinstance(dm, float) else "–"
        body.append([label, f"{t:.3f}", f"{t / sk:.2f}", f"{t / gemm:.2f}", r_dm])
    table = markdown_table(["method", "s / iteration", "× sklearn", "× GEMM",
                            "× dask-ml (threads)"], body)
    print(f"\n### {name}\n\n{table}")
    return f"## {name}\n\n{table}"


def memory_case(tmp, quick=False):
    """A store twice the cluster's memory_limit, persist=False: peak worker memory."""
    from distributed import Client, LocalCluster

    limit = 400e6 if quick else 600e6
    n_workers = 2
    d = 64
    n = int(2 * n_workers * limit / (4 * d))
    path = f"{tmp}/big.zarr"
    t0 = time.perf_counter()
    datasets.make_blobs(n, d, 64, random_state=0, path=path, chunks=200_000)
    print(f"\nwrote {n:,} × {d} float32 ({n * d * 4 / 1e9:.2f} GB) in {time.perf_counter() - t0:.0f}s; "
          f"cluster memory_limit {n_workers} × {limit / 1e6:.0f} MB")
    # the nanny's default malloc trimming: tight memory limits need it
    cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1,
                           memory_limit=int(limit), dashboard_address=None,
                           silence_logs=logging.ERROR)
    with cluster, Client(cluster) as client:
        def rss():
            import psutil

            return psutil.Process().memory_info().rss

        peaks = {}

        def sample():
            for w, v in client.run(rss).items():
                peaks[w] = max(peaks.get(w, 0), v)

        pids0 = client.run(os.getpid)
        X = dqkm.io.as_dask_array(path)
        import threading

        stop = threading.Event()

        def poll():
            while not stop.is_set():
                try:
                    sample()
                except Exception:
                    pass
                time.sleep(0.2)

        th = threading.Thread(target=poll, daemon=True)
        th.start()
        t0 = time.perf_counter()
        km = dqkm.KMeans(64, init="k-means++", max_iter=5, tol=0, persist=False,
                         random_state=0).fit(X)
        seconds = time.perf_counter() - t0
        stop.set()
        th.join()
        restarted = pids0 != client.run(os.getpid)
    print(f"KMeans on {X.nbytes / 1e9:.2f} GB with persist=False: {km.n_iter_} iterations in "
          f"{seconds:.1f}s; workers restarted: {restarted}; peak worker RSS "
          + ", ".join(f"{v / 1e6:.0f} MB" for v in peaks.values()))


LOWD_CASES = [(2, 16), (3, 64), (8, 64), (16, 64), (32, 256), (64, 64)]


def _faiss_fit(X, init, n_iter):
    import faiss

    k, d = init.shape
    km = faiss.Kmeans(d, k, niter=n_iter, max_points_per_centroid=X.shape[0] // k + 1,
                      min_points_per_centroid=1, verbose=False, seed=0)
    km.train(X, init_centroids=init)
    return km


def lowd_case(n, d, k, n_iter, repeat):
    """Seconds per iteration of each method on one (n, d, k) case, best of ``repeat``."""
    import dask.array as da
    from sklearn.cluster import KMeans as SkKMeans
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(n, d, centers=k, cluster_std=4.0, center_box=(-50, 50),
                      random_state=0)
    X = X.astype(np.float32)
    init = X[np.random.default_rng(1).choice(n, k, replace=False)]
    kw = dict(n_clusters=k, init=init, max_iter=n_iter, tol=0.0)
    fits = {
        "dqkm": lambda: dqkm.KMeans(persist=True, **kw).fit(Xp),
        "dqkm, GEMM kernel": lambda: _gemm_only(lambda: dqkm.KMeans(persist=True, **kw).fit(Xp)),
        "sklearn lloyd": lambda: SkKMeans(algorithm="lloyd", n_init=1, **kw).fit(X),
        "sklearn elkan": lambda: SkKMeans(algorithm="elkan", n_init=1, **kw).fit(X),
    }
    try:
        import faiss

        faiss.omp_set_num_threads(2)
        fits["faiss"] = lambda: _faiss_fit(X, init, n_iter)
    except ImportError:
        pass
    best = dict.fromkeys(fits, np.inf)
    with dask.config.set(scheduler="threads"):
        Xp = da.from_array(X, chunks=(-(-n // 8), d)).persist()
        dqkm.KMeans(**{**kw, "max_iter": 1}).fit(Xp)  # numba compile / cache load
        _gemm_only(lambda: dqkm.KMeans(**{**kw, "max_iter": 1}).fit(Xp))
        for _ in range(repeat):
            for name, fit in fits.items():
                best[name] = min(best[name], per_iter(fit, n_iter))
    return best


def _gemm_only(fit):
    """``fit()`` with the float32 GEMM kernel at every dimension (no direct kernel, no
    certification of its labels)."""
    names = ("_DIRECT_MAX_D", "_GEMM_MIN_D", "_GEMM_MIN_D_F32", "_GEMM_MIN_D_MANY")
    saved = [getattr(lloyd_kernels, name) for name in names]
    for name in names:
        setattr(lloyd_kernels, name, 0)
    try:
        return fit()
    finally:
        for name, value in zip(names, saved):
            setattr(lloyd_kernels, name, value)


def run_lowd(args):
    headers = ["D", "K", "dqkm", "dqkm, GEMM kernel", "sklearn lloyd", "sklearn elkan", "faiss",
               "dqkm ÷ faster of lloyd, faiss"]
    rows = []
    print(f"\n### low dimension: {args.rows:,} rows float32 blobs, 8 chunks, threads, "
          f"persisted; s / iteration\n")
    for d, k in LOWD_CASES:
        t = lowd_case(args.rows, d, k, args.iters, args.repeat)
        peer = min(t["sklearn lloyd"], t.get("faiss", np.inf))
        rows.append([d, k] + [f"{t[c]:.4f}" if c in t else "–" for c in headers[2:7]]
                    + [f"{t['dqkm'] / peer:.2f}"])
        print("| " + " | ".join(str(c) for c in rows[-1]) + " |", flush=True)
    table = markdown_table(headers, rows)
    print("\n" + table)
    if args.markdown:
        write_page("kmeans_lowd", "K-means per iteration, low dimension", table, notes=(
            f"Seconds per Lloyd iteration, {args.rows:,} rows of float32 blobs in 8 persisted "
            "chunks, Dask's threaded scheduler, the same initial centers for every method, "
            f"`tol=0`, up to {args.iters} iterations, best of {args.repeat} interleaved runs. "
            "scikit-learn and faiss run in memory with 2 threads; faiss uses every row "
            "(`max_points_per_centroid` raised). \"dqkm, GEMM kernel\" is dqkm with only its "
            "float32 GEMM kernel, uncertified labels (no direct kernel, no exact settling of "
            "near-ties), in the same run. The last "
            "column is dqkm's time over the faster of scikit-learn's lloyd and faiss. "
            f"Load average at the end of the run: {os.getloadavg()[0]:.1f} on "
            f"{os.cpu_count()} cores (other jobs slow OpenMP peers, which spin, more than "
            "dqkm's threads)."))


def run_bounds(args):
    """Kernel level, one thread: Lloyd steps vs Hamerly and Elkan steps from the same
    init on blobs; seconds per step and the share of row-center distances skipped."""
    from sklearn.datasets import make_blobs

    from dqkm.kernels.bounds import (center_geometry, center_separations, elkan_partials,
                                     hamerly_partials)

    n = args.rows
    for d, k in [(2, 16), (16, 64), (16, 256)]:
        X, _ = make_blobs(n, d, centers=k, cluster_std=4.0, center_box=(-50, 50),
                          random_state=0)
        X = X.astype(np.float32)
        chunks = np.array_split(X, 8)
        C0 = X[np.random.default_rng(1).choice(n, k, replace=False)]
        times = {"lloyd": [], "hamerly": [], "elkan": []}
        skipped = {"hamerly": [], "elkan": []}
        for kind in times:
            C, prev = C0.copy(), None
            state = [(np.full(len(c), -1), np.zeros(len(c)),
                      np.zeros(len(c) if kind == "hamerly" else (len(c), k))) for c in chunks]
            for _ in range(args.iters):
                t0 = time.perf_counter()
                half_sep, shift = center_geometry(C, prev)
                sep = center_separations(C) if kind == "elkan" else None
                sums, counts, n_skip = 0.0, 0, 0
                for q, ch in enumerate(chunks):
                    if kind == "lloyd":
                        out = lloyd_kernels.lloyd_partials(ch, C)
                    elif kind == "hamerly":
                        out = hamerly_partials(ch, C, *state[q], shift, half_sep)
                    else:
                        out = elkan_partials(ch, C, *state[q], shift, half_sep, sep)
                    if kind != "lloyd":
                        state[q] = (out[3], out[5], out[6])
                        n_skip += out[7]
                    sums, counts = sums + out[0], counts + out[1]
                new = C.astype(np.float64)
                new[counts > 0] = sums[counts > 0] / counts[counts > 0, None]
                prev, C = C, new.astype(np.float32)
                times[kind].append(time.perf_counter() - t0)
                if kind != "lloyd":
                    skipped[kind].append(n_skip / (n * k))
        print(f"\n{n:,} × {d}, K = {k}: seconds per step (1 thread) and share of distances "
              "skipped, by iteration")
        print("| iteration | lloyd | hamerly | skipped | elkan | skipped |")
        print("|---|---|---|---|---|---|")
        for i in range(args.iters):
            print(f"| {i + 1} | {times['lloyd'][i]:.3f} | {times['hamerly'][i]:.3f} | "
                  f"{skipped['hamerly'][i]:.1%} | {times['elkan'][i]:.3f} | "
                  f"{skipped['elkan'][i]:.1%} |", flush=True)


CONVERGE_CASES = [(2, 16), (16, 64), (32, 256), (64, 64)]


def _cases(spec):
    """``--cases``: 'DxK,DxK,…' (default CONVERGE_CASES; 'grid': D ∈ {2, 3, 8, 16, 32, 64} ×
    K ∈ {16, 64, 256})."""
    if not spec:
        return CONVERGE_CASES
    if spec == "grid":
        return [(d, k) for d in (2, 3, 8, 16, 32, 64) for k in (16, 64, 256)]
    return [tuple(int(v) for v in c.split("x")) for c in spec.split(",")]


def _blobs_init(n, d, k):
    """float32 blobs, float64 above the Lloyd kernel's direct dimension (float32 X runs
    'lloyd' there: see dqkm.parallel.bounds.choose_algorithm)."""
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(n, d, centers=k, cluster_std=4.0, center_box=(-50, 50), random_state=0)
    X = X.astype(np.float32 if d <= lloyd_kernels._DIRECT_MAX_D else np.float64)
    return X, X[np.random.default_rng(1).choice(n, k, replace=False)]


def converge_case(n, d, k, repeat, max_iter):
    """Seconds of whole fits to convergence (best of ``repeat``), their n_iter, and the
    share of distances skipped at each iteration by 'hamerly' and 'elkan'."""
    import dask.array as da
    from sklearn.cluster import KMeans as SkKMeans

    X, init = _blobs_init(n, d, k)
    kw = dict(n_clusters=k, init=init, max_iter=max_iter, tol=1e-4)
    with dask.config.set(scheduler="threads"):
        Xp = da.from_array(X, chunks=(-(-n // 8), d)).persist()
        fits = {a: (lambda a=a: dqkm.KMeans(algorithm=a, persist=True, **kw).fit(Xp))
                for a in ("lloyd", "hamerly", "elkan")}
        fits["sklearn lloyd"] = lambda: SkKMeans(algorithm="lloyd", n_init=1, **kw).fit(X)
        fits["sklearn elkan"] = lambda: SkKMeans(algorithm="elkan", n_init=1, **kw).fit(X)
        # numba compile / cache load; 8 iterations, so that Hamerly's rescans of single
        # rows are compiled too (its first passes, most rows failing, run the Lloyd kernel)
        for a in ("lloyd", "hamerly", "elkan"):
            dqkm.KMeans(algorithm=a, **{**kw, "max_iter": 8}).fit(Xp)
        best, models = dict.fromkeys(fits, np.inf), {}
        for _ in range(repeat):
            for name, fit in fits.items():
                t0 = time.perf_counter()
                models[name] = fit()
                best[name] = min(best[name], time.perf_counter() - t0)
    ref = models["lloyd"]
    same = {}
    for a in ("hamerly", "elkan"):
        m = models[a]
        # promised identical (the Lloyd kernels decide near-ties by the exact distances
        # the bounds use); reported here on the benchmark's own data
        same[a] = bool(np.array_equal(m.cluster_centers_, ref.cluster_centers_)
                       and m.n_iter_ == ref.n_iter_ and m.inertia_ == ref.inertia_)
    skipped = {a: [h["skipped"] for h in models[a].history_] for a in ("hamerly", "elkan")}
    n_iter = {name: int(m.n_iter_) for name, m in models.items()}
    return best, n_iter, skipped, same, choose_algorithm("auto", Xp, k)  # KMeans(algorithm='auto')


def run_converge(args):
    headers = ["D", "K", "iterations (dqkm / sklearn)", "dqkm lloyd", "dqkm hamerly",
               "dqkm elkan", "sklearn lloyd", "sklearn elkan",
               "best dqkm bounds ÷ faster sklearn", "dqkm 'auto' ÷ faster sklearn",
               "hamerly / elkan fit = lloyd fit"]
    rows, skip_rows = [], []
    print(f"\n### whole fit to convergence: {args.rows:,} rows of blobs (float64 at D > 32), "
          "8 chunks, threads, persisted, tol=1e-4; seconds\n")
    for d, k in _cases(args.cases):
        t, it, skipped, same, auto = converge_case(args.rows, d, k, args.repeat, args.max_iter)
        peer = min(t["sklearn lloyd"], t["sklearn elkan"])
        rows.append([d, k, f"{it['lloyd']} / {it['sklearn lloyd']}"]
                    + [f"{t[c]:.2f}" for c in ("lloyd", "hamerly", "elkan", "sklearn lloyd",
                                                "sklearn elkan")]
                    + [f"{min(t['hamerly'], t['elkan']) / peer:.2f}",
                       f"{t[auto] / peer:.2f} ({auto})",
                       " / ".join("yes" if same[a] else "no" for a in ("hamerly", "elkan"))])
        print("| " + " | ".join(str(c) for c in rows[-1]) + " |", flush=True)
        for a in ("hamerly", "elkan"):
            s = skipped[a]
            at = [2, 3, 5, 10, 20]
            skip_rows.append([d, k, a] + [f"{s[i - 1]:.1%}" if i <= len(s) else "–" for i in at]
                             + [f"{s[-1]:.1%}", f"{np.mean(s):.1%}"])
    table = markdown_table(headers, rows)
    skip_table = markdown_table(["D", "K", "algorithm", "it. 2", "it. 3", "it. 5", "it. 10",
                                 "it. 20", "last", "mean over the fit"], skip_rows)
    print("\n" + table + "\n\nshare of row-center distances skipped, by iteration\n\n"
          + skip_table)
    return table, skip_table


def _ooc_seconds(X, kind, n_iter, in_memory=None):
    """Mean seconds of iterations 2 … n_iter of ``KMeans(algorithm=kind, persist=False)``."""
    from dqkm.parallel import bounds

    init = np.asarray(X[:64].compute())
    saved = bounds.held_in_memory
    if in_memory is not None:
        bounds.held_in_memory = lambda X: in_memory
    try:
        km = dqkm.KMeans(64, algorithm=kind, init=init, tol=0.0, max_iter=n_iter,
                         persist=False).fit(X)
    finally:
        bounds.held_in_memory = saved
    return float(np.mean([h["seconds"] for h in km.history_[1:]])), km


def run_ooc(args, tmp):
    from distributed import Client, LocalCluster

    n, d = args.rows, 16
    X, _ = datasets.make_blobs(n, d, 64, cluster_std=4.0, random_state=0, chunks=n // 8,
                               path=f"{tmp}/ooc.zarr")
    with dask.config.set(NO_TRIM), LocalCluster(n_workers=2, threads_per_worker=1,
                                                dashboard_address=None,
                                                silence_logs=logging.ERROR) as cluster, \
            Client(cluster), dask.config.set({"temporary-directory": tmp}):
        _ooc_seconds(X, "hamerly", 8)  # numba compile / cache load on the workers (all paths)
        best = {"lloyd": np.inf, "memory": np.inf, "files": np.inf}
        for _ in range(args.repeat):
            best["lloyd"] = min(best["lloyd"], _ooc_seconds(X, "lloyd", args.iters)[0])
            best["memory"] = min(best["memory"], _ooc_seconds(X, "hamerly", args.iters, True)[0])
            sec, km = _ooc_seconds(X, "hamerly", args.iters, False)
            best["files"] = min(best["files"], sec)
    x_bytes, state_bytes = X.nbytes, n * 3 * 4  # label, upper, lower: float32 in files
    row = [f"{n:,} × {d}", 64, f"{best['lloyd']:.3f}", f"{best['memory']:.3f}",
           f"{best['files']:.3f}", f"{(best['files'] - best['memory']) / best['lloyd']:+.1%}",
           f"{2 * state_bytes / x_bytes:.2f}", f"{km.history_[-1]['skipped']:.1%}"]
    table = markdown_table(["X", "K", "lloyd", "hamerly, bounds in memory",
                            "hamerly, bounds in files", "files − memory, ÷ lloyd",
                            "bounds bytes moved ÷ X bytes read", "skipped, last iteration"],
                           [row])
    print(f"\n### out of core (Zarr, LocalCluster 2 × 1 thread, persist=False): seconds per "
          f"iteration, mean of iterations 2 … {args.iters}, best of {args.repeat}\n\n" + table)
    return table


def _cluster_fit(X, kind, init, n_iter):
    """Seconds of a ``persist=True`` fit of ``n_iter`` iterations, the mean seconds of
    its second half's iterations, and the model."""
    km = dqkm.KMeans(len(init), algorithm=kind, init=init, tol=0.0, max_iter=n_iter,
                     persist=True)
    t0 = time.perf_counter()
    km.fit(X)
    total = time.perf_counter() - t0
    return total, float(np.mean([h["seconds"] for h in km.history_[n_iter // 2:]])), km


def _cluster_case(X, init, n_iter, repeat):
    """Best (total, late) of each algorithm over ``repeat`` interleaved runs, and
    whether 'hamerly' gave 'lloyd''s fit exactly."""
    for kind in ("lloyd", "hamerly"):
        _cluster_fit(X, kind, init, 2)  # numba compile / cache load on the workers
    best = {kind: (np.inf, np.inf) for kind in ("lloyd", "hamerly")}
    models = {}
    for _ in range(repeat):
        for kind in best:
            total, late, models[kind] = _cluster_fit(X, kind, init, n_iter)
            best[kind] = (min(best[kind][0], total), min(best[kind][1], late))
    lloyd, hamerly = models["lloyd"], models["hamerly"]
    same = bool(np.array_equal(lloyd.cluster_centers_, hamerly.cluster_centers_)
                and lloyd.inertia_ == hamerly.inertia_)
    return best, same, hamerly.history_[-1]["skipped"]


def _reduction_seconds(X, repeat=10):
    """Median seconds of ``X.sum(axis=0).compute()``: what any one-pass reduction over
    the persisted blocks costs on the cluster (scheduling, the workers' share of the
    cores), the floor under a pass."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        X.sum(axis=0).compute()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def run_cluster(args):
    """``--cluster``: persisted X on a LocalCluster of 2 single-thread workers, 'lloyd'
    against 'hamerly' (bounds in the workers' memory), with distributed's default
    malloc trimming (a plain ``LocalCluster()``) and without it (dqkm's cluster
    configs)."""
    import dask.array as da
    from distributed import Client, LocalCluster, wait

    d, k, n_iter = 16, 64, args.iters
    sizes = [int(r) for r in args.cluster_rows.split(",")]
    rows = []
    for trim, cfg in (("default", {}), ("off", NO_TRIM)):
        with dask.config.set(cfg), LocalCluster(n_workers=2, threads_per_worker=1,
                                                dashboard_address=None,
                                                silence_logs=logging.ERROR) as cluster, \
                Client(cluster):
            for n in sizes:
                X, init = _blobs_init(n, d, k)
                with warnings.catch_warnings():  # the blocks go to the workers once, here
                    warnings.filterwarnings("ignore", message="Sending large graph")
                    Xp = da.from_array(X, chunks=(-(-n // 8), d)).persist()
                    wait(Xp)
                best, same, skipped = _cluster_case(Xp, init, n_iter, args.repeat)
                (lt, ll), (ht, hl) = best["lloyd"], best["hamerly"]
                floor = _reduction_seconds(Xp)
                rows.append([trim, f"{n:,} × {d}", f"{n // 2:,}", f"{floor * 1e3:.0f}",
                             f"{lt:.2f}", f"{ht:.2f}",
                             f"{ht / lt:.2f}", f"{ll * 1e3:.0f}", f"{hl * 1e3:.0f}",
                             f"{hl / ll:.2f}", f"{skipped:.1%}", "yes" if same else "NO"])
                del Xp
    table = markdown_table(["malloc trim", "X", "rows per worker", "X.sum(axis=0) (ms)",
                            "lloyd fit (s)",
                            "hamerly fit (s)", "hamerly ÷ lloyd", "lloyd late pass (ms)",
                            "hamerly late pass (ms)", "late ÷", "skipped, last iteration",
                            "same fit"], rows)
    print(f"\n### LocalCluster 2 × 1 thread, X persisted, K = {k}: {n_iter} iterations, "
          f"best of {args.repeat}\n\n" + table)
    return table


def write_bounds_pages(args, converge, ooc, cluster=None):
    """``--converge`` writes docs/benchmarks/kmeans.md, ``--ooc``
    docs/benchmarks/kmeans_ooc.md, ``--cluster`` docs/benchmarks/kmeans_cluster.md:
    one page per kind of run, each the table of this run only (history lives in git)."""
    if cluster is not None:
        write_page("kmeans_cluster", "K-means on a cluster: bounds against Lloyd passes",
                   cluster, notes=(
                       "Blobs (float32, 16 features, `cluster_std=4`) in 8 row blocks "
                       "persisted on a `distributed.LocalCluster` of 2 single-thread workers "
                       "(the client, the scheduler and both workers on this machine's 2 "
                       "cores); `KMeans(64, algorithm=..., persist=True)` from the same "
                       f"initial centers, `tol=0`, {args.iters} iterations. \"fit\" is the "
                       "whole `fit` (the final labels-and-inertia pass included), \"late "
                       "pass\" the mean seconds of the second half's iterations (what a "
                       "pass costs once the bounds skip most distances), each the best of "
                       f"{args.repeat} interleaved runs; \"X.sum(axis=0)\" the median "
                       "time of that one-pass Dask reduction over the same persisted blocks, "
                       "the floor under any pass on this cluster. \"malloc trim\": `default` is "
                       "distributed's `MALLOC_TRIM_THRESHOLD_` (a plain `LocalCluster()`), "
                       "`off` unset, as dqkm's cluster configs start their workers. \"same "
                       "fit\": 'hamerly''s centers and inertia equal 'lloyd''s exactly."))
    if converge is not None:
        table, skip_table = converge
        write_page("kmeans", "K-means: whole fits to convergence with exact bounds",
                   table + "\n\nShare of row-center distances skipped by the bounds, by "
                   "iteration (the first pass has no bounds yet and computes them all):\n\n"
                   + skip_table, notes=(
                       f"{args.rows:,} rows of blobs (`cluster_std=4`, centers in [−50, 50]; "
                       "float32, float64 at D = 64 where float32 X runs 'lloyd') in 8 "
                       "persisted chunks, Dask's threaded scheduler; every method starts from "
                       "the same initial centers with `tol=1e-4`; scikit-learn runs in memory "
                       "with 2 threads. Seconds for the whole fit, best of "
                       f"{args.repeat} interleaved runs. \"dqkm 'auto'\" is the algorithm "
                       "`KMeans(algorithm='auto')` picks on that data (`KMeans()` runs "
                       "'lloyd', scikit-learn's default), its time over the faster of "
                       "scikit-learn's two. The last column says whether "
                       "'hamerly' and 'elkan' gave the centers, inertia and n_iter of dqkm's "
                       "'lloyd' exactly (checked in the run)."))
    if ooc is not None:
        write_page("kmeans_ooc", "K-means out of core: the bounds' extra I/O", ooc, notes=(
            "Zarr store on local disk, `distributed.LocalCluster` of 2 single-thread "
            "workers, `persist=False` (every pass re-reads X). 'hamerly' keeps 3 numbers per "
            "row, float32 rounded outward in files; in files (one Zarr array per fit, one "
            "chunk per block), every pass reads each block's chunk as the previous pass "
            "wrote it and rewrites it. Seconds per iteration, mean of iterations 2 … "
            f"{args.iters}, best of {args.repeat}; the \"files − memory\" column is the "
            "files' cost as a share of a Lloyd pass."))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--memory", action="store_true")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--no-dask-ml", action="store_true")
    p.add_argument("--lowd", action="store_true",
                   help="the low-dimension part only (D = 2 … 64 against scikit-learn and faiss)")
    p.add_argument("--bounds", action="store_true",
                   help="kernel-level Hamerly/Elkan steps against Lloyd steps (one thread)")
    p.add_argument("--converge", action="store_true",
                   help="whole fits to convergence with bounds against scikit-learn")
    p.add_argument("--ooc", action="store_true",
                   help="out of core: the bounds' files against a Lloyd pass at D = 16")
    p.add_argument("--cluster", action="store_true",
                   help="a LocalCluster, X persisted: 'hamerly' against 'lloyd' at D = 16")
    p.add_argument("--cluster-rows", default="1000000,4000000", help="rows of --cluster")
    p.add_argument("--max-iter", type=int, default=300, help="max_iter of --converge")
    p.add_argument("--cases", default="",
                   help="--converge cases: 'DxK,…' or 'grid' (default: 2x16,16x64,32x256,64x64)")
    p.add_argument("--rows", type=int, default=500_000, help="rows of the low-dimension part")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per method (best kept)")
    add_markdown_option(p)
    args = p.parse_args()
    import sklearn

    print(f"dqkm {dqkm.__version__}, dask {dask.__version__}, sklearn {sklearn.__version__}, "
          f"numpy {np.__version__}; {os.cpu_count()} cores")
    if args.lowd:
        run_lowd(args)
        return
    if args.bounds:
        run_bounds(args)
        return
    if args.converge or args.ooc or args.cluster:
        converge = run_converge(args) if args.converge else None
        ooc = None
        if args.ooc:
            with tempfile.TemporaryDirectory() as tmp:
                ooc = run_ooc(args, tmp)
        cluster = run_cluster(args) if args.cluster else None
        if args.markdown:
            write_bounds_pages(args, converge, ooc, cluster)
        return
    with tempfile.TemporaryDirectory() as tmp:
        if args.memory:
            memory_case(tmp, args.quick)
            return
        cases = [("(a) 200k × 256, K = 64", 200_000, 256, 64),
                 ("(b) 100k × 1024, K = 512", 100_000, 1024, 512)]
        if args.quick:
            cases = [("quick 20k × 64, K = 16", 20_000, 64, 16)]
        tables = []
        for name, n, d, k in cases:
            rows = run_case(name.split()[0], n, d, k, args.iters, tmp,
                            with_daskml=not args.no_dask_ml, repeat=args.repeat)
            tables.append(print_table(name, rows))
        if args.markdown and not args.quick:
            write_page("kmeans_iteration", "K-means per iteration: dqkm, scikit-learn, dask-ml",
                       "\n\n".join(tables), notes=(
                           "Same float32 data (written once to Zarr), same initial centers, "
                           f"`tol=0`, {args.iters} iterations for every method; seconds per "
                           "iteration = fit time / iterations (the final assignment pass "
                           "included); scikit-learn and \"dqkm KMeans, threads, persisted\" "
                           f"the best of {args.repeat} fits, every other row one fit. \"from Zarr\" is Zarr's default codec; \"(uncompressed)\" "
                           "the same data written with `compressors=None`. scikit-learn runs "
                           "in memory with 2 threads; \"one X·Cᵀ GEMM\" is the BLAS product "
                           "alone, the bound a GEMM-based Lloyd pass cannot beat."))


if __name__ == "__main__":
    main()
