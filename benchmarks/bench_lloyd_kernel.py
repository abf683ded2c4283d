"""One Lloyd step on one chunk, one thread: dqkm's kernel against scikit-learn's.

CPU time (``time.thread_time``, every BLAS/OpenMP pool limited to one thread)
of one Lloyd step on a 50,000-row float32 chunk of blobs at K = 64, for D in
{2, 3, 8, 16, 32, 64, 256}: :func:`dqkm.kernels.lloyd.lloyd_partials` (labels,
float64 sums and counts, exact objective) against scikit-learn's chunked dense
Lloyd step (labels and new centers), the same data and centers.  The two are
timed alternately, ``--repeat`` pairs per D; the table gives the fastest time
of each and the median of the pairs' ratios, so that a loaded machine slows
both alike; the ratio is what counts.
scikit-learn's step is a private function: it is used here only as the peer.
Run::

    .venv/bin/python benchmarks/bench_lloyd_kernel.py [--rows 50000] [--k 64] [--repeat 15]
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

from dqkm.kernels.lloyd import lloyd_partials  # noqa: E402

DIMS = (2, 3, 8, 16, 32, 64, 256)


def _blobs(n, d, k, seed):
    rng = np.random.default_rng(seed)
    means = rng.normal(scale=10.0, size=(k, d))
    X = (means[rng.integers(k, size=n)] + rng.normal(size=(n, d))).astype(np.float32)
    C = X[rng.choice(n, size=k, replace=False)].copy()
    return X, C


def _sklearn_step(X, C):
    from sklearn.cluster._k_means_lloyd import lloyd_iter_chunked_dense
    n, k = X.shape[0], C.shape[0]
    w = np.ones(n, dtype=X.dtype)
    new = np.empty_like(C)
    weight = np.empty(k, dtype=X.dtype)
    labels = np.empty(n, dtype=np.int32)
    shift = np.empty(k, dtype=X.dtype)

    def step():
        lloyd_iter_chunked_dense(X, w, C, new, weight, labels, shift, 1)
        return labels
    return step


def _cpu(fn):
    """CPU seconds of ``fn`` in this thread (every pool is limited to this one: an
    idle helper thread's spinning would otherwise count)."""
    t0 = time.thread_time()
    fn()
    return time.thread_time() - t0


def measure(n, d, k, repeat, seed=0):
    """Fastest CPU seconds of one step, dqkm and scikit-learn; median ratio of the pairs;
    whether the labels agree."""
    X, C = _blobs(n, d, k, seed)
    sk = _sklearn_step(X, C)
    ours = lambda: lloyd_partials(X, C)  # noqa: E731
    ours()
    sk()
    same = bool(np.array_equal(ours()[3], sk()))
    a, b = [], []
    for _ in range(repeat):
        a.append(_cpu(ours))
        b.append(_cpu(sk))
    return min(a), min(b), float(np.median(np.divide(a, b))), same


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=50_000)
    p.add_argument("--k", type=int, default=64)
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--dims", default=",".join(map(str, DIMS)))
    add_markdown_option(p)
    args = p.parse_args()
    rows = []
    from threadpoolctl import threadpool_limits
    import numba
    numba.set_num_threads(1)
    with threadpool_limits(1):
        print(f"{args.rows} rows float32, K = {args.k}, one thread, CPU ms per step "
              f"(fastest of {args.repeat}) and the median ratio of the pairs")
        print("| D | dqkm ms | sklearn ms | dqkm ÷ sklearn | same labels |")
        print("|---|---|---|---|---|")
        for d in map(int, args.dims.split(",")):
            a, b, ratio, same = measure(args.rows, d, args.k, args.repeat)
            rows.append([d, f"{a * 1e3:.2f}", f"{b * 1e3:.2f}", f"{ratio:.2f}", same])
            print("| " + " | ".join(map(str, rows[-1])) + " |", flush=True)
    if args.markdown:
        write_page("lloyd_kernel", "K-means: one Lloyd step per chunk against scikit-learn's",
                   markdown_table(["D", "dqkm ms", "sklearn ms", "dqkm ÷ sklearn",
                                   "same labels"], rows), notes=(
                       f"{args.rows:,} rows of float32 blobs, K = {args.k}, one thread (BLAS, "
                       "OpenMP and numba limited to one): CPU time of the calling thread of "
                       "one step, dqkm's `lloyd_partials` (labels, float64 sums and counts, "
                       "exact objective) against scikit-learn's chunked dense Lloyd step on "
                       f"the same data and centers, timed alternately {args.repeat} times; "
                       "milliseconds: the fastest of each; the ratio: the median of the "
                       "pairs' ratios."))


if __name__ == "__main__":
    main()
