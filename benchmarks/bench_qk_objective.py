"""QK-means's objective against K-means's: the offset row, and where each stopping rule stops.

    .venv/bin/python benchmarks/bench_qk_objective.py              # K = 256 and digits
    .venv/bin/python benchmarks/bench_qk_objective.py --quick      # digits only, ~1 minute
    .venv/bin/python benchmarks/bench_qk_objective.py --markdown   # writes the page

Two data sets: digits upsampled to ``--zoom``² × 64 features (``--rows`` rows drawn
from the 1797 images, Gaussian noise of standard deviation 0.5, float32) with
``K = --k``, sparsity 5; and digits itself (1797 × 64) with K = 10, sparsity 3.
On each, ``KMeans(K, random_state=0)`` with its defaults, then one long QK-means
fit for each ``offset`` (``QKMeans(K, random_state=0, max_iter=--max-iter,
objective_tol=0)``, every other parameter at its default, so only the center
shift can stop it).  A fit stopped by ``objective_tol = r`` makes exactly the
iterations of the long fit up to the first iteration t whose objective changed
by at most ``r`` relatively, and its result is the long fit's factors after t:
so each rule's row is read from the long fit's ``history_`` — iterations, the
objective of those factors (the next iteration's, or the long fit's
``inertia_``) over K-means's, and the seconds up to t (the long fit's seconds
less those of its later iterations).  The objective here is the QK-means
objective (eq. 5 of the QuicK-means journal paper), the sum of squared
distances of the rows to their nearest row of V.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import dask
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import dqkm  # noqa: E402
from _report import add_markdown_option, capture_stdout, markdown_table, write_page  # noqa: E402

_NOTES = """\
What `bench_qk_objective.py` measures is in its docstring: for each data set, K-means with
its defaults, then one long QK-means fit per `offset` (only the center shift could stop it),
and for each `objective_tol` the iteration at which that rule would have stopped the same
fit, the objective of the factors it would have returned (÷ K-means's) and the seconds to
get there.  Seconds are one run on a shared machine; the objectives do not depend on it.
"""


def upsampled_digits(n, zoom, seed=0):
    from scipy.ndimage import zoom as resize
    from sklearn.datasets import load_digits

    imgs = load_digits().images
    up = resize(imgs, (1, zoom, zoom), order=1).reshape(len(imgs), -1)
    rng = np.random.default_rng(seed)
    X = up[rng.integers(0, len(up), n)] + rng.normal(0, 0.5, (n, up.shape[1]))
    return X.astype(np.float32)


def stop_at(history, rtol):
    """The iteration (from 1) at which ``objective_tol=rtol`` stops, or None."""
    for t in range(1, len(history)):
        before, now = history[t - 1]["objective"], history[t]["objective"]
        if abs(before - now) <= rtol * before:
            return t + 1
    return None


def case(name, X, K, sparsity, a):
    print(f"\n## {name}: {X.shape[0]:,} × {X.shape[1]}, K = {K}, sparsity {sparsity}\n",
          flush=True)
    t0 = time.perf_counter()
    km = dqkm.KMeans(K, random_state=0).fit(X)
    t_km = time.perf_counter() - t0
    rows = [["KMeans (defaults)", "–", "tol (center shift)", km.n_iter_, "1.0000",
             f"{t_km:.1f}", "1.00", "–"]]
    for offset in (False, True):
        t0 = time.perf_counter()
        qk = dqkm.QKMeans(K, sparsity=sparsity, random_state=0, max_iter=a.max_iter,
                          objective_tol=0, offset=offset).fit(X)
        total = time.perf_counter() - t0
        h = qk.history_
        for rtol in a.rtols:
            t = stop_at(h, rtol)
            if t is None:
                rows.append(["QKMeans", offset, f"objective_tol={rtol:g}",
                             f"> {len(h)} (not reached)", "–", "–", "–", qk.factors_.nnz])
                continue
            obj = h[t]["objective"] if t < len(h) else qk.inertia_
            secs = total - sum(r["seconds"] for r in h[t:])
            rows.append(["QKMeans", offset, f"objective_tol={rtol:g}", t,
                         f"{obj / km.inertia_:.4f}", f"{secs:.1f}", f"{secs / t_km:.2f}",
                         "–"])
        stopped = "tol" if qk.n_iter_ < a.max_iter else f"max_iter={a.max_iter}"
        rows.append(["QKMeans", offset, f"{stopped} (objective_tol=0)", qk.n_iter_,
                     f"{qk.inertia_ / km.inertia_:.4f}", f"{total:.1f}",
                     f"{total / t_km:.2f}", qk.factors_.nnz])
        print(f"offset={offset}: objective ÷ K-means per iteration "
              + " ".join(f"{r['objective'] / km.inertia_:.4f}" for r in h), flush=True)
    print()
    print(markdown_table(["method", "offset", "stopping rule", "iterations",
                          "objective ÷ KMeans", "seconds", "seconds ÷ KMeans", "nnz"], rows))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="digits only")
    p.add_argument("--k", type=int, default=256)
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--zoom", type=int, default=2)
    p.add_argument("--max-iter", type=int, default=40)
    p.add_argument("--rtols", type=float, nargs="*", default=[1e-2, 3e-3, 1e-3, 3e-4, 1e-4])
    add_markdown_option(p)
    a = p.parse_args(argv)
    print(f"bench_qk_objective: {' '.join(sys.argv[1:]) or '(defaults)'}; "
          f"{os.cpu_count()} CPUs", flush=True)
    from sklearn.datasets import load_digits

    t0 = time.perf_counter()
    with capture_stdout() as out, dask.config.set(scheduler="threads"):
        case("digits", load_digits().data, 10, 3, a)
        if not a.quick:
            X = upsampled_digits(a.rows, a.zoom)
            case(f"digits upsampled ×{a.zoom}", X, a.k, 5, a)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")
    if a.markdown:
        write_page("qk_objective", "QuicK-means: the offset row and the stopping rule",
                   out.getvalue(), notes=_NOTES)


if __name__ == "__main__":
    main()
