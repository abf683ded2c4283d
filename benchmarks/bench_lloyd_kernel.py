"""One Lloyd step on one chunk, one thread: dqkm's kernel against scikit-learn's.

CPU time (``time.thread_time``, every BLAS/OpenMP pool limited to one thread)
of one Lloyd step on a 50,000-row float32 chunk of blobs at K = 16 and 64, for D
in {2, 3, 8, 16, 20, 24, 28, 32, 48, 64, 256}: :func:`dqkm.kernels.lloyd.lloyd_partials`
(labels, float64 sums and counts, exact objective) against scikit-learn's chunked
dense Lloyd step (labels and new centers), the same data and centers.  Up to 32
features dqkm's direct kernel alone and its certified GEMM kernel alone are timed
as well: the columns that set where dqkm picks the GEMM kernel (``_GEMM_MIN_D``,
``_GEMM_MIN_D_F32``, ``_GEMM_MIN_D_MANY``); above 32 features dqkm with NumPy's
BLAS per tile (``_BLAS_TILES`` on) instead of numba's: the column that sets
``_BLAS_TILES``.  The
runs alternate, ``--repeat`` per method and D; the table gives the fastest time
of each and the ratio of the fastest times.  scikit-learn's step is a private
function: it is used here only as the peer.
Run::

    .venv/bin/python benchmarks/bench_lloyd_kernel.py [--rows 50000] [--k 16,64] [--repeat 15]
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

from dqkm.kernels import lloyd as lloyd_kernels  # noqa: E402
from dqkm.kernels.lloyd import lloyd_partials  # noqa: E402

DIMS = (2, 3, 8, 16, 20, 24, 28, 32, 48, 64, 256)


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


def _step_with(X, C, **settings):
    """dqkm's step with the kernel module's ``settings`` (its thresholds and
    switches) in place of its own, restored after."""
    saved = {name: getattr(lloyd_kernels, name) for name in settings}
    for name, value in settings.items():
        setattr(lloyd_kernels, name, value)
    try:
        return lloyd_partials(X, C)
    finally:
        for name, value in saved.items():
            setattr(lloyd_kernels, name, value)


def _gemm_from(min_d, X, C):
    """dqkm's step with the GEMM kernel allowed from ``min_d`` features, whatever the
    dtype and the number of centers (its probe still decides)."""
    return _step_with(X, C, _GEMM_MIN_D=min_d, _GEMM_MIN_D_F32=min_d, _GEMM_MIN_D_MANY=min_d)


def _direct_only(X, C):
    return _gemm_from(lloyd_kernels._DIRECT_MAX_D + 1, X, C)


def _gemm_only(X, C):
    """dqkm with the certified GEMM kernel wherever its probe allows (up to 32 features)."""
    return _gemm_from(0, X, C)


def _numpy_gemm(X, C):
    return _step_with(X, C, _BLAS_TILES=True)


def measure(n, d, k, repeat, seed=0):
    """Fastest CPU seconds of one step: dqkm, dqkm's direct kernel and its certified
    GEMM kernel (None above ``_DIRECT_MAX_D`` features), dqkm with NumPy's BLAS per
    tile (None up to ``_DIRECT_MAX_D``), scikit-learn; whether the labels agree."""
    X, C = _blobs(n, d, k, seed)
    fns = {"dqkm": lambda: lloyd_partials(X, C), "sklearn": _sklearn_step(X, C)}
    if d <= lloyd_kernels._DIRECT_MAX_D:
        fns["direct"] = lambda: _direct_only(X, C)
        fns["gemm"] = lambda: _gemm_only(X, C)
    else:
        fns["numpy"] = lambda: _numpy_gemm(X, C)
    for fn in fns.values():
        fn()
    same = bool(np.array_equal(fns["dqkm"]()[3], fns["sklearn"]()))
    best = dict.fromkeys(fns, np.inf)
    for _ in range(repeat):
        for name, fn in fns.items():
            best[name] = min(best[name], _cpu(fn))
    return (best["dqkm"], best.get("direct"), best.get("gemm"), best.get("numpy"),
            best["sklearn"], same)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=50_000)
    p.add_argument("--k", default="16,64", help="numbers of centers, comma-separated")
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--dims", default=",".join(map(str, DIMS)))
    add_markdown_option(p)
    args = p.parse_args()
    rows = []
    # SciPy's BLAS (numba's np.dot calls it) loaded before the limit, which only
    # reaches the libraries loaded when it is set
    import scipy.linalg.cython_blas  # noqa: F401
    from threadpoolctl import threadpool_limits
    import numba
    numba.set_num_threads(1)
    with threadpool_limits(1):
        print(f"{args.rows} rows float32, K in {args.k}, one thread, CPU ms per step "
              f"(fastest of {args.repeat})")
        headers = ["K", "D", "dqkm ms", "dqkm, direct kernel only ms",
                   "dqkm, certified GEMM kernel only ms", "dqkm, NumPy's BLAS per tile ms",
                   "sklearn ms", "dqkm ÷ sklearn", "same labels"]
        print("| " + " | ".join(headers) + " |\n|" + "---|" * len(headers))
        for k in map(int, args.k.split(",")):
            for d in map(int, args.dims.split(",")):
                a, direct, gemm, npy, b, same = measure(args.rows, d, k, args.repeat)
                rows.append([k, d, f"{a * 1e3:.2f}"] + [
                    "–" if v is None else f"{v * 1e3:.2f}" for v in (direct, gemm, npy)]
                    + [f"{b * 1e3:.2f}", f"{a / b:.2f}", same])
                print("| " + " | ".join(map(str, rows[-1])) + " |", flush=True)
    if args.markdown:
        write_page("lloyd_kernel", "K-means: one Lloyd step per chunk against scikit-learn's",
                   markdown_table(headers, rows), notes=(
                       f"{args.rows:,} rows of float32 blobs, K ∈ {{{args.k}}}, one thread (BLAS, "
                       "OpenMP and numba limited to one): CPU time of the calling thread of "
                       "one step, dqkm's `lloyd_partials` (labels, float64 sums and counts, "
                       "exact objective) against scikit-learn's chunked dense Lloyd step on "
                       f"the same data and centers, timed alternately {args.repeat} times; "
                       "milliseconds: the fastest of each; the ratio: of the fastest times. "
                       "\"direct kernel only\": dqkm with its GEMM kernel switched off up to "
                       "32 features (above, only the GEMM kernel exists), \"certified GEMM "
                       "kernel only\" with the GEMM kernel from any dimension (its probe "
                       "accepts these blobs near the origin): dqkm picks the certified GEMM "
                       "kernel from 12 features with 64 centers or more, and with fewer "
                       "float64 X from 20 features, float32 X never up to 32. "
                       "\"NumPy's BLAS per tile\": above 32 features (float32 labels not "
                       "certified) dqkm forms each tile's products with numba's `np.dot` "
                       "(SciPy's bundled OpenBLAS) inside its compiled loop over tiles that "
                       "keep the finishing loop in cache; this column is the same kernel "
                       "with NumPy's BLAS called from a Python loop over tiles of up to "
                       "2048 rows (`_BLAS_TILES`, off). \"same labels\": dqkm's "
                       "labels equal scikit-learn's (float32 GEMMs of both may round a "
                       "near-tie apart)."))


if __name__ == "__main__":
    main()
