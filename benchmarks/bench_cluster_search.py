"""ClusterIndex's exact in-cluster search: ``search_block`` (one GEMM per cluster
tile and query group, then one numba kernel) vs the NumPy implementation it
replaced (``_search_block_numpy``: argpartition, the (q × k × D) difference,
concatenate/argpartition merges and fancy-index copies per group).

Data: make_blobs-like, generated directly in float32 and in cluster order —
``--n-clusters`` centres uniform in [−10, 10]^D, unit-variance Gaussian noise,
labels uniform at random (clusters of ≈ n/K rows); the index is built in
memory from the generating labels (``InvertedIndex(offsets, X=..., ids=...,
sq_norms=...)``, ids = the rows' positions in a random order).  Queries: fresh
points of the same distribution; their probes are their ``n_probe`` nearest
centres (``_top_probes_block``, as ``ClusterIndex`` with a K-means clusterer).

Both implementations run on the same query blocks (``query_block_rows`` rows,
one after another) with BLAS limited to ``--blas-threads`` (default 1: the
machine is shared; the numba kernel is single-threaded).  Per setting: best of
``--repeat`` seconds, GFlop/s = 2·Σ rows scanned·D / s (the GEMM work; the
exact recomputation of the candidates is not counted), the ratio, and whether
the (distances, ids) of the two are identical — where not, the queries that
differ are searched by brute force in float64 to say which side is exact
(the NumPy path trusts the float32 GEMM's scores and misses near-ties).  The last line is one dense
GEMM of the size of the n_probe = 1 scan for comparison.

``--offsets V [V ...]`` adds a table of ``search_block`` on the data shifted by
each V (rows far from the origin relative to their spread), with and without the
float64 rescoring of float32 tiles whose candidates overflow, and whether the two
results are identical.

``--block-rows N [N ...]`` adds a table of ``search_block`` alone at the first
n_probe and k for each query block size N (the default block is the first
row): seconds, GFlop/s and whether the result is identical to the default
block's — the measurement behind ``query_block_rows``'s sizes.  Run:

    .venv/bin/python benchmarks/bench_cluster_search.py            # 100k × 2000, K = 512
    .venv/bin/python benchmarks/bench_cluster_search.py --quick    # 20k × 500, K = 128
    .venv/bin/python benchmarks/bench_cluster_search.py --n-queries 100000 \
        --n-probe 1 --n-neighbors 1 --block-rows 4096 16384 50000 --repeat 2
    .venv/bin/python benchmarks/bench_cluster_search.py --dim 64 --n 50000 \
        --n-clusters 100 --n-probe 1 --n-neighbors 5 --offsets 0 30 300 3000
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from threadpoolctl import threadpool_limits  # noqa: E402

from dqkm.parallel.neighbors import (InvertedIndex, _search_block_numpy,  # noqa: E402
                                     _top_probes_block, query_block_rows, search_block)

from _report import (add_markdown_option, capture_stdout,  # noqa: E402
                     printed_as_markdown, write_page)

NOTES = ('`search_block` (one GEMM per cluster tile and query group, then one numba kernel) '
         'against the NumPy implementation it replaced, on the same query blocks; best of '
         '`--repeat` seconds, GFlop/s of the GEMM work, the ratio, and whether the two give '
         'identical (distances, ids).')


def make_index(n, dim, n_clusters, n_queries, seed):
    """The index (rows already grouped by cluster), the queries and the centres."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-10.0, 10.0, (n_clusters, dim)).astype(np.float32)
    labels = np.sort(rng.integers(0, n_clusters, n))
    ids = rng.permutation(n).astype(np.int64)
    X = np.empty((n, dim), dtype=np.float32)
    step = 8192
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        X[lo:hi] = rng.standard_normal((hi - lo, dim), dtype=np.float32)
        X[lo:hi] += centers[labels[lo:hi]]
    offsets = np.concatenate([[0], np.cumsum(np.bincount(labels, minlength=n_clusters))])
    sq = np.einsum("ij,ij->i", X, X, dtype=np.float64)
    index = InvertedIndex(offsets, X=X, ids=ids, sq_norms=sq)
    Q = centers[rng.integers(0, n_clusters, n_queries)]
    Q += rng.standard_normal(Q.shape, dtype=np.float32)
    return index, Q, centers


def run_search(fn, Q, probes, index, k, centers, block):
    return np.concatenate([fn(Q[a:a + block], probes[a:a + block], index, k, centers)
                           for a in range(0, Q.shape[0], block)])


def exact_knn(q, probes, index, k):
    """Brute-force k-NN of one query among its probed clusters: float64
    distances of the stored values, ties by the lower id."""
    rows = np.concatenate([np.arange(index.offsets[c], index.offsets[c + 1])
                           for c in np.unique(probes)])
    d2 = ((index.X[rows].astype(np.float64) - q.astype(np.float64)) ** 2).sum(axis=1)
    order = np.lexsort((index.ids[rows], d2))[:k]
    return np.sqrt(d2[order]), index.ids[rows][order]


def compare(old, new, Q, probes, index, k):
    """"yes" when the two results are identical; else how many queries differ
    and, checked by brute force on those, which side is the exact k-NN."""
    if np.array_equal(old, new):
        return "yes"
    rows = np.flatnonzero((old != new).any(axis=1))
    ok_old = ok_new = 0
    for r in rows:
        d, ids = exact_knn(Q[r], probes[r], index, k)
        ok_old += bool(np.array_equal(old[r, k:], ids) and np.allclose(old[r, :k], d))
        ok_new += bool(np.array_equal(new[r, k:], ids) and np.allclose(new[r, :k], d))
    return (f"NO: {rows.size} of {old.shape[0]} queries differ; exact there: "
            f"old {ok_old}, new {ok_new}")


def best_of(repeat, fn):
    best, out = np.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return out, best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=2000)
    ap.add_argument("--n-clusters", type=int, default=512)
    ap.add_argument("--n-queries", type=int, default=10_000)
    ap.add_argument("--n-probe", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--n-neighbors", type=int, nargs="+", default=[1, 10])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--blas-threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="20k × 500, K = 128, 2000 queries")
    ap.add_argument("--block-rows", type=int, nargs="+",
                    help="also time search_block alone with these query block sizes")
    ap.add_argument("--offsets", type=float, nargs="+",
                    help="also time search_block on the data shifted by each offset, with "
                         "and without the float64 rescoring of coarse float32 tiles")
    add_markdown_option(ap)
    args = ap.parse_args(argv)
    for flag, vals in (("--n", [args.n]), ("--dim", [args.dim]),
                       ("--n-clusters", [args.n_clusters]), ("--n-queries", [args.n_queries]),
                       ("--n-probe", args.n_probe), ("--n-neighbors", args.n_neighbors),
                       ("--repeat", [args.repeat]), ("--blas-threads", [args.blas_threads]),
                       ("--block-rows", args.block_rows or [])):
        bad = [v for v in vals if v < 1]
        if bad:
            ap.error(f"{flag} must be positive integers, got {bad}")
    with capture_stdout() as out:
        _run(args)
    if args.markdown:
        write_page('cluster_search', "In-cluster search (ClusterIndex's exact search)",
                   printed_as_markdown(out.getvalue(), fenced=True),
                   notes=NOTES)


def _run(args):
    if args.quick:
        args.n, args.dim, args.n_clusters, args.n_queries = 20_000, 500, 128, 2000

    t0 = time.perf_counter()
    index, Q, centers = make_index(args.n, args.dim, args.n_clusters, args.n_queries, args.seed)
    counts = np.diff(index.offsets)
    block = query_block_rows(Q.shape[0])
    print(f"data: {args.n} × {args.dim} float32, K = {args.n_clusters} (mean "
          f"{counts.mean():.0f}, min {counts.min()}, max {counts.max()} rows per cluster), "
          f"{Q.shape[0]} queries in blocks of {block}, BLAS threads {args.blas_threads}; "
          f"generated in {time.perf_counter() - t0:.1f} s")
    c_sq = np.einsum("ij,ij->i", centers, centers, dtype=np.float64)
    with threadpool_limits(args.blas_threads):
        cdist = c_sq[None, :] - 2.0 * (Q @ centers.T)
        # compile the kernel outside the timings
        search_block(Q[:4], _top_probes_block(cdist[:4], 1), index, 1, centers)
        hdr = (f"{'n_probe':>7} {'k':>3} {'rows scanned':>12} {'old s':>8} {'new s':>8} "
               f"{'old GF/s':>8} {'new GF/s':>8} {'ratio':>6}  identical")
        print(hdr)
        print("-" * len(hdr))
        for n_probe in args.n_probe:
            probes = _top_probes_block(cdist, n_probe)
            scanned = int(counts[probes].sum())
            gflop = 2.0 * scanned * args.dim / 1e9
            for k in args.n_neighbors:
                old, t_old = best_of(args.repeat, lambda: run_search(
                    _search_block_numpy, Q, probes, index, k, centers, block))
                new, t_new = best_of(args.repeat, lambda: run_search(
                    search_block, Q, probes, index, k, centers, block))
                note = compare(old, new, Q, probes, index, k)
                print(f"{n_probe:>7} {k:>3} {scanned:>12} {t_old:>8.3f} {t_new:>8.3f} "
                      f"{gflop / t_old:>8.1f} {gflop / t_new:>8.1f} {t_old / t_new:>6.2f}  {note}")
        rows = int(round(counts.mean()))
        B = np.ascontiguousarray(index.X[:rows])
        _, t_gemm = best_of(args.repeat, lambda: Q @ B.T)
        print(f"dense GEMM ({Q.shape[0]} × {args.dim}) · ({args.dim} × {rows}): "
              f"{t_gemm:.3f} s, {2.0 * Q.shape[0] * rows * args.dim / 1e9 / t_gemm:.1f} GFlop/s")
        if args.block_rows:
            block_table(args, index, Q, centers, cdist, counts, block)
        if args.offsets:
            offset_table(args, index, Q, centers, cdist, block)


def block_table(args, index, Q, centers, cdist, counts, default_block):
    """``search_block`` alone, one query block after another, per block size."""
    n_probe, k = args.n_probe[0], args.n_neighbors[0]
    probes = _top_probes_block(cdist, n_probe)
    gflop = 2.0 * int(counts[probes].sum()) * args.dim / 1e9
    print(f"\nsearch_block by query block size (n_probe = {n_probe}, k = {k}, "
          f"{Q.shape[0]} queries; default block {default_block} first)")
    hdr = f"{'block rows':>10} {'blocks':>6} {'s':>8} {'GF/s':>8} {'vs default':>10}  identical"
    print(hdr)
    print("-" * len(hdr))
    ref, t_ref = None, None
    for b in [default_block] + [b for b in args.block_rows if b != default_block]:
        out, t = best_of(args.repeat, lambda b=b: run_search(
            search_block, Q, probes, index, k, centers, b))
        if ref is None:
            ref, t_ref = out, t
        same = "yes" if np.array_equal(ref, out) else "NO"
        print(f"{b:>10} {-(-Q.shape[0] // b):>6} {t:>8.3f} {gflop / t:>8.1f} "
              f"{t_ref / t:>10.2f}  {same}")


def offset_table(args, index, Q, centers, cdist, default_block):
    """``search_block`` on the same data shifted by each offset (every coordinate +v:
    rows far from the origin relative to their spread), with the float64 rescoring of
    tiles whose float32 candidates overflow (the default) and without it."""
    import dqkm.parallel.neighbors as nb

    n_probe, k = args.n_probe[0], args.n_neighbors[0]
    probes = _top_probes_block(cdist, n_probe)  # shifting changes no distance
    print(f"\nsearch_block on shifted data (n_probe = {n_probe}, k = {k}, {Q.shape[0]} "
          "queries): float32 GEMM only vs with the float64 rescoring")
    hdr = f"{'offset':>8} {'float32 s':>10} {'rescored s':>10} {'ratio':>6}  identical"
    print(hdr)
    print("-" * len(hdr))
    slack = nb._WIDEN_SLACK
    for v in args.offsets:
        X = index.X + np.float32(v)
        shifted = InvertedIndex(index.offsets, X=X, ids=index.ids,
                                sq_norms=np.einsum("ij,ij->i", X, X, dtype=np.float64))
        Qv, Cv = Q + np.float32(v), centers + np.float32(v)
        try:
            nb._WIDEN_SLACK = 10 ** 12
            plain, t_plain = best_of(args.repeat, lambda: run_search(
                search_block, Qv, probes, shifted, k, Cv, default_block))
        finally:
            nb._WIDEN_SLACK = slack
        wide, t_wide = best_of(args.repeat, lambda: run_search(
            search_block, Qv, probes, shifted, k, Cv, default_block))
        same = "yes" if np.array_equal(plain, wide) else "NO"
        print(f"{v:>8g} {t_plain:>10.3f} {t_wide:>10.3f} {t_plain / t_wide:>6.2f}  {same}")


if __name__ == "__main__":
    main()
