"""QK-means's hierarchical runs: the progress budget against the tighter one, whole fits.

    .venv/bin/python benchmarks/bench_qk_budget.py              # digits and K = 256
    .venv/bin/python benchmarks/bench_qk_budget.py --quick      # digits only, ~2 minutes
    .venv/bin/python benchmarks/bench_qk_budget.py --markdown   # writes the page

``QKMeans`` runs hierarchical palm4MSA twice in a default fit: the initial
factorisation of the k-means++ centroids, and iteration 1's hierarchical refit on
the cluster means.  Each run stops on progress, on one of two budgets: the
"progress" budget stops the 2-factor splits and the global runs before the last
after the first iteration that improves the relative error by at most 0.3 %, the
last global run at 0.1 % (``_FIT_BUDGET`` of ``dqkm/cluster/_qk_solvers.py``); the
"tighter" one at 0.1 % and 0.01 % (``_FULL_BUDGET``, also
:func:`dqkm.factorize_centroids`'s).  Three configurations, side by side:

- ``default``: QKMeans's own — the init on the progress budget, the refit on the
  tighter one;
- ``both tighter``: both runs on the tighter budget (QKMeans's default before);
- ``both progress``: both runs on the progress budget.

The configurations other than the default are run by swapping the module's budget
for the length of a fit (so ``both tighter`` is the previous default exactly).

Two data sets, every other parameter at its default (``QKMeans(K, sparsity=s)``):

- digits (1797 × 64) at several ``(K, sparsity)``, ``--seeds`` seeds each: one
  k-means++ draw per seed (scikit-learn's ``kmeans_plusplus``) given as ``init``
  to ``KMeans(K)`` and to every QK-means fit; the mean objective over K-means's
  and the seconds of all seeds;
- digits upsampled to 32 × 32 = 1024 features (``--rows`` rows drawn from the 1797
  images, Gaussian noise σ = 0.5, float32) with ``K = --k``, sparsity 5,
  ``random_state=0``: seconds split into seeding + initial factorisation, palm4MSA
  refits and passes, iterations, objective over K-means's.

The objective is the QK-means objective (eq. 5 of the QuicK-means journal paper),
QK-means's ``inertia_``.  One run on a shared machine: the seconds are one fit each
(noisy), the objectives do not depend on the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

import dask
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import dqkm  # noqa: E402
from dqkm.cluster import _qk_solvers  # noqa: E402
from _report import add_markdown_option, capture_stdout, markdown_table, write_page  # noqa: E402
from bench_qk_objective import upsampled_digits  # noqa: E402

_NOTES = """\
What `bench_qk_budget.py` measures is in its docstring: whole `QKMeans` fits at their
defaults with the two hierarchical runs of a fit (the initial factorisation, iteration 1's
hierarchical refit on the cluster means) on QK-means's progress budget or on the tighter
budget of `factorize_centroids`: the default (init progress, refit tighter), both tighter
(the default before) and both progress; K-means's objective as the reference.  Seconds are
one fit each on a shared machine; the objectives do not depend on it.
"""

BUDGETS = ("default", "both tighter", "both progress")


@contextlib.contextmanager
def budget(name):
    """QK-means's hierarchical runs in the configuration ``name`` for the block's length."""
    saved = _qk_solvers._FIT_BUDGET, _qk_solvers._FULL_BUDGET
    if name == "both tighter":
        _qk_solvers._FIT_BUDGET = _qk_solvers._FULL_BUDGET
    elif name == "both progress":
        _qk_solvers._FULL_BUDGET = _qk_solvers._FIT_BUDGET
    try:
        yield
    finally:
        _qk_solvers._FIT_BUDGET, _qk_solvers._FULL_BUDGET = saved


def fit(name, **kw):
    """``(QKMeans fitted on the budget name, seconds)``; ``kw['X']`` the rows."""
    X = kw.pop("X")
    with budget(name):
        t0 = time.perf_counter()
        qk = dqkm.QKMeans(**kw).fit(X)
        return qk, time.perf_counter() - t0


def digits_part(settings, seeds):
    from sklearn.cluster import kmeans_plusplus
    from sklearn.datasets import load_digits

    X = load_digits().data
    print(f"\n## digits: 1,797 × 64, {seeds} k-means++ seeds per setting (shared with "
          "K-means)\n", flush=True)
    rows = []
    for K, s in settings:
        ratio = {b: [] for b in BUDGETS}
        secs = dict.fromkeys(BUDGETS, 0.0)
        iters = {b: [] for b in BUDGETS}
        for seed in range(seeds):
            init = kmeans_plusplus(X, K, random_state=seed)[0]
            km = dqkm.KMeans(K, init=init).fit(X)
            for b in BUDGETS:
                qk, t = fit(b, X=X, n_clusters=K, sparsity=s, init=init, random_state=seed)
                ratio[b].append(qk.inertia_ / km.inertia_)
                secs[b] += t
                iters[b].append(qk.n_iter_)
        for b in BUDGETS:
            rows.append([K, s, b, f"{np.mean(ratio[b]):.4f}",
                         " ".join(f"{r:.4f}" for r in ratio[b]),
                         " ".join(str(i) for i in iters[b]), f"{secs[b]:.1f}",
                         f"{secs[b] / secs['both tighter']:.2f}"])
    print(markdown_table(["K", "sparsity", "hierarchical runs", "objective ÷ KMeans (mean)",
                          "per seed", "iterations per seed", "seconds (all seeds)",
                          "seconds ÷ both tighter"], rows), flush=True)


def upsampled_part(n, K):
    X = upsampled_digits(n, 4)  # 8 × 8 images zoomed 4 ×: 1024 features
    print(f"\n## digits upsampled to 1024 features: {n:,} × 1024, K = {K}, sparsity 5, "
          "random_state=0\n", flush=True)
    t0 = time.perf_counter()
    km = dqkm.KMeans(K, random_state=0).fit(X)
    t_km = time.perf_counter() - t0
    rows = [["KMeans (defaults)", f"{t_km:.1f}", "–", "–", "–", km.n_iter_, "1.0000"]]
    for b in BUDGETS:
        qk, t = fit(b, X=X, n_clusters=K, random_state=0)
        h = qk.history_
        palm = sum(r["seconds_palm"] for r in h)
        passes = sum(r["seconds_assign"] for r in h)
        rows.append([f"QKMeans, {b}", f"{t:.1f}", f"{t - palm - passes:.1f}",
                     f"{palm:.1f} ({sum(r['palm_iter'] for r in h)} iterations)",
                     f"{passes:.1f}", qk.n_iter_, f"{qk.inertia_ / km.inertia_:.4f}"])
    print(markdown_table(["fit", "seconds", "seeding + init factorisation s",
                          "palm4MSA refits s", "passes s", "Lloyd iterations",
                          "objective ÷ KMeans"], rows), flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="digits only")
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--k", type=int, default=256)
    p.add_argument("--rows", type=int, default=10_000)
    add_markdown_option(p)
    a = p.parse_args(argv)
    print(f"bench_qk_budget: {' '.join(sys.argv[1:]) or '(defaults)'}; "
          f"{os.cpu_count()} CPUs", flush=True)
    t0 = time.perf_counter()
    with capture_stdout() as out, dask.config.set(scheduler="threads"):
        dqkm.QKMeans(4, sparsity=2, max_iter=2, palm_iter_init=2, palm_iter=2).fit(
            np.random.default_rng(0).normal(size=(200, 16)))  # compilation
        digits_part([(10, 5), (16, 3), (32, 5), (64, 5)], a.seeds)
        if not a.quick:
            upsampled_part(a.rows, a.k)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")
    if a.markdown:
        write_page("qk_budget", "QuicK-means: the budget of its hierarchical runs",
                   out.getvalue(), notes=_NOTES)


if __name__ == "__main__":
    main()
