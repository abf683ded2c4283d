"""Sparse-factor apply ``X @ V.T`` (``SparseFactors.apply_rows``) vs the dense BLAS product.

8192 rows of float32 X; V = S1 ··· SQ in the QK-means default layout for a
K × D target: A = min(K, D), B = max(K, D), Q = ceil(log2 B) factors, S1 is
K × A, the inner ones A × A, SQ is A × D.  Random supports with s = 5 stored
values in every row and every column of the square factors; a rectangular
factor has exactly s per line along its longer side and s·(long/short)
(rounded, balanced) along its shorter side.  The peer is ``X @ U.T`` with the
dense ``U = V.toarray()`` in float32 BLAS.  Both use 2 threads (threadpoolctl
for BLAS, ``n_threads=2`` for the kernel); each time is the best of several
runs in the same process, the dense and the factor runs interleaved.  The
machine may be shared, so a last column repeats the comparison on one thread
in CPU time (``time.thread_time``, 2048 rows), which other processes disturb
much less.  Run:

    .venv/bin/python benchmarks/bench_factor_apply.py            # full table
    .venv/bin/python benchmarks/bench_factor_apply.py --quick    # smaller, for a smoke run
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from dqkm.kernels import SparseFactors  # noqa: E402

from _report import (add_markdown_option, capture_stdout,  # noqa: E402
                     printed_as_markdown, write_page)

NOTES = ("Applying QK-means's sparse factors λ·S1···SQ to a block of rows, against the dense "
         'K×D product and a chain of scipy CSR products, on the same rows; ratios are measured '
         'side by side in one run.')


def balanced_support(m, n, s, rng):
    """0/1-pattern m × n with s entries per line along the longer side, balanced on the other."""
    if m > n:
        return balanced_support(n, m, s, rng).T.tocsr()
    rows_perm = rng.permutation(m)
    shift = rng.permutation(n)
    cols = np.repeat(np.arange(n), s)
    rows = rows_perm[(shift[cols] + np.tile(np.arange(s), n)) % m]
    vals = rng.standard_normal(cols.size).astype(np.float32)
    return sp.csr_matrix((vals, (rows, cols)), shape=(m, n))


def qkmeans_factors(K, D, s, rng):
    A, B = min(K, D), max(K, D)
    Q = max(1, math.ceil(math.log2(B)))
    shapes = [(K, A)] + [(A, A)] * (Q - 2) + [(A, D)] if Q >= 2 else [(K, D)]
    return SparseFactors([balanced_support(m, n, s, rng) for m, n in shapes], lam=1.0)


def best_times(fs, repeat, clock=time.perf_counter):
    """Best time of each callable, the callables interleaved (same load on each)."""
    best = [np.inf] * len(fs)
    for _ in range(repeat):
        for k, f in enumerate(fs):
            t0 = clock()
            f()
            best[k] = min(best[k], clock() - t0)
    return best


def run(cases, n_rows, s, repeat, with_scipy):
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    head = (f"{'K x D':>12} {'Q':>3} {'nnz':>8} {'dense s':>9} {'factor s':>9} "
            f"{'time ratio':>10} {'flop ratio':>10} {'1-thr cpu ratio':>15}"
            + (f" {'scipy s':>9}" if with_scipy else ""))
    print(head)
    print("-" * len(head))
    for K, D in cases:
        V = qkmeans_factors(K, D, s, rng)
        U = V.toarray()  # float32 (K, D)
        X = rng.standard_normal((n_rows, D)).astype(np.float32)
        V.apply_rows(X[:64], n_threads=2)  # compile / warm caches
        with threadpool_limits(2):
            t_dense, t_fac = best_times([lambda: X @ U.T, lambda: V.apply_rows(X, n_threads=2)],
                                        repeat)
            if with_scipy:
                t_scipy, = best_times([lambda: V.apply_rows(X, method="scipy")],
                                      max(1, repeat // 2))
        # the same on one thread in CPU time: robust to other processes sharing the cores
        X1 = X[:2048]
        with threadpool_limits(1):
            c_dense, c_fac = best_times([lambda: X1 @ U.T, lambda: V.apply_rows(X1, n_threads=1)],
                                        repeat, clock=time.thread_time)
        err = np.abs(V.apply_rows(X[:256]) - X[:256] @ U.T).max() / np.abs(X[:256] @ U.T).max()
        assert err < 1e-4, err
        flop_ratio = 2 * K * D / V.flops
        line = (f"{f'{K} x {D}':>12} {V.n_factors:>3} {V.nnz:>8} {t_dense:>9.4f} {t_fac:>9.4f} "
                f"{t_dense / t_fac:>10.2f} {flop_ratio:>10.1f} {c_dense / c_fac:>15.2f}")
        if with_scipy:
            line += f" {t_scipy:>9.4f}"
        print(line, flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller cases, fewer repeats")
    p.add_argument("--rows", type=int, default=8192)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--no-scipy", action="store_true", help="skip the scipy CSR-chain column")
    add_markdown_option(p)
    a = p.parse_args(argv)
    with capture_stdout() as out:
        _run(a)
    if a.markdown:
        write_page('factor_apply', 'Sparse-factor apply (SparseFactors)',
                   printed_as_markdown(out.getvalue(), fenced=True),
                   notes=NOTES)


def _run(a):
    if a.quick:
        cases, repeat = [(512, 512), (1024, 1024)], 3
    else:
        cases, repeat = [(512, 512), (1024, 1024), (2048, 2048), (4096, 4096), (512, 2000)], \
            a.repeat
    import numba

    print(f"# {a.rows} rows, float32, s = 5, 2 threads, {os.cpu_count()} cpus")
    run(cases, a.rows, 5, repeat, not a.no_scipy)
    print(f"# numba threading layer: {numba.threading_layer()}")


if __name__ == "__main__":
    main()
