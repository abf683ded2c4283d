"""Would Hamerly's bounds pay for QK-means's assignment?  A quick measurement.

A QK-means fit is recorded (its centers ``V`` after every iteration, by the
fit's callback); Hamerly's bounds (:func:`dqkm.kernels.bounds.hamerly_partials`)
are then replayed over that sequence of centers, giving per iteration the share
of rows whose bound test passes (their K products would be skipped).  One
thread, CPU time per row of:

- the QK assignment (``SparseFactors.nearest_rows``: the factor chain and the
  argmin), what a passing row saves;
- the bounds' bookkeeping every row pays (moving and testing its bounds, and
  the exact distance to its own center where the first test fails), plus
  gathering the failing rows into a block for the factor chain.

The pruned pass pays for itself when ``share × assignment > bookkeeping +
gather``.  Run::

    .venv/bin/python benchmarks/bench_qk_pruning.py [--rows 100000] [--dims 16,64,256]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from _report import add_markdown_option, markdown_table, write_page  # noqa: E402

import dqkm  # noqa: E402
from dqkm.kernels import bounds as kb  # noqa: E402


def _cpu(fn, repeat):
    best = np.inf
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def case(n, d, k, repeat, spread, seed=0):
    rng = np.random.default_rng(seed)
    means = rng.normal(scale=spread, size=(k, d))
    X = (means[rng.integers(k, size=n)] + rng.normal(size=(n, d))).astype(np.float32)
    seq = []
    qk = dqkm.QKMeans(k, random_state=seed, max_iter=20, tol=0.0)
    qk.fit(X, callback=lambda rec, state: seq.append(np.asarray(state.toarray(), np.float32)))
    factors = qk.factors_
    norms = factors.row_norms_sq()
    t_assign = _cpu(lambda: factors.nearest_rows(X, norms, n_threads=1), repeat) / n
    labels, upper, lower = np.full(n, -1, np.int32), np.zeros(n), np.zeros(n)
    prev, shares, t_book = None, [], []
    for V in seq:
        half_sep, shift = kb.center_geometry(V, prev)
        if prev is not None:
            todo = np.empty(n, dtype=np.int64)
            args = (X, V, labels.copy(), upper.copy(), lower.copy(), shift, half_sep, kb._EPS,
                    todo, n + 1)  # full_from past n: every row moved and tested
            t_book.append(_cpu(lambda: kb._hamerly_rows(*args), repeat) / n)
            _, m = kb._hamerly_rows(*args)
            shares.append(1.0 - m / n)
            rows = todo[:m]
            t_book[-1] += _cpu(lambda: np.take(X, rows, axis=0), repeat) / n
        res = kb.hamerly_partials(X, V, labels, upper, lower, shift, half_sep)
        labels, upper, lower = res[3], res[5], res[6]
        prev = V
    return d, k, len(seq), shares, t_assign, float(np.median(t_book))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--dims", default="16,64,256")
    p.add_argument("--k", type=int, default=64)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--spreads", default="6,0.3",
                   help="scales of the blobs' means (the blobs have unit spread): "
                        "6 separates them, 0.3 makes them overlap")
    add_markdown_option(p)
    args = p.parse_args()
    from threadpoolctl import threadpool_limits
    headers = ["D", "K", "means' scale", "iterations", "rows passing (median, last)",
               "QK assignment ns/row", "bookkeeping + gather ns/row",
               "saved ÷ paid (median share)"]
    rows = []
    print("| D | K | means' scale | iterations | rows passing (median, last) | QK assignment ns/row | "
          "bookkeeping + gather ns/row | saved ÷ paid (median share) |")
    print("|---|---|---|---|---|---|---|---|")
    with threadpool_limits(1):
        for spread in map(float, args.spreads.split(",")):
            for d in map(int, args.dims.split(",")):
                d, k, iters, shares, ta, tb = case(args.rows, d, args.k, args.repeat, spread)
                med = float(np.median(shares))
                rows.append([d, k, f"{spread:g}", iters, f"{med:.0%}, {shares[-1]:.0%}",
                             f"{ta * 1e9:.0f}", f"{tb * 1e9:.0f}", f"{med * ta / tb:.2f}"])
                print("| " + " | ".join(map(str, rows[-1])) + " |", flush=True)
    if args.markdown:
        write_page("qk_pruning", "QK-means: would Hamerly's bounds pay?",
                   markdown_table(headers, rows), notes=(
                       f"{args.rows:,} rows of blobs (unit spread; means scaled by the "
                       "'means' scale' column: 6 separates the clusters, 0.3 makes them "
                       "overlap), a QK-means fit's centers replayed through Hamerly's bounds; "
                       "one thread, CPU time per row of the QK assignment (what a passing row "
                       "saves) and of the bounds' bookkeeping plus the gather of the failing "
                       "rows (what every row pays). Pruning pays where the last column "
                       "exceeds 1."))


if __name__ == "__main__":
    main()
