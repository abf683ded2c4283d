"""QK-means speed: inference, end-to-end fit on digits, and training per iteration.

    .venv/bin/python benchmarks/bench_qkmeans.py            # all three parts
    .venv/bin/python benchmarks/bench_qkmeans.py --quick    # smaller, ~3 minutes
    .venv/bin/python benchmarks/bench_qkmeans.py --parts inference

(1) Inference.  ``QKMeans.predict`` against ``KMeans.predict`` (dense BLAS)
    on the same ``--rows`` rows (float32 NumPy array in memory, Dask threaded
    scheduler, both through the same blockwise path), sparsity 5, the paper's
    layout (Q = ⌈log2 max(K, D)⌉ factors).  The factors are NOT fitted:
    fitting palm4MSA at K = D = 2048 costs minutes per iteration here, so each
    factor is the Splincol(5) projection of a Gaussian matrix of its shape —
    the same shapes and per-row/column supports that palm4MSA returns (the
    apply time depends on the supports, not on the values) — and they are set
    as ``factors_`` of a ``QKMeans`` (predict reads only ``factors_``); the
    dense model gets ``cluster_centers_ = V.toarray()`` so both compute the
    same labels (checked).  With ``--check-fitted`` one extra row uses factors
    from ``factorize_centroids`` (palm4MSA, few iterations) of a K-means fitted
    on a subsample, to show the timing is the same.
(2) End to end on digits (1797 × 64), K = 16, sparsity 3, hierarchical init,
    ``max_iter=10, tol=0`` — the authors' reference setting (their Python:
    ~300 s at palm_iter = 300, objective 1.09 × K-means).  Fit seconds and
    objective ratio to K-means (same k-means++ init, same 10 iterations) over
    ``palm_iter``, ``palm_iter_init`` and ``hierarchical_refits`` (0: warm-started
    palm4MSA only, with dqkm's safeguarded adaptive step — Algorithm 1 as
    published is ``QKMeans(variant="paper")``; 1: the default; 10: every
    iteration), mean ± std over seeds, and the factors' non-zeros.
(3) Training per iteration at K = D (default 1024): ``history_`` seconds split
    into assignment and palm4MSA against ``dqkm.KMeans``'s per-iteration
    seconds on the same data, and the N above which a QK-means iteration
    would be cheaper (linear extrapolation of the measured per-row
    assignment time and per-palm4MSA-iteration time).
(4) ``--parts defaults``: ``QKMeans(K)`` with all defaults against ``KMeans(K)``
    (defaults), K = ``--default-k`` (1024), on ``--default-rows`` rows of digits
    upsampled to 1024 dims, both fitted whole (same ``random_state``): seconds,
    Lloyd iterations, the QK-means fit split into init + palm4MSA refits and
    passes over the rows, the objective ratio; then the fit times at N = 100k
    and 1M and the crossover N, extrapolated (labelled) with the fixed parts as
    measured and the passes linear in N at the measured iteration counts.
(5) ``--parts minibatch``: MiniBatchQKMeans on digits, the objective after 8
    epochs of ``partial_fit`` for several ``refit_every`` against QKMeans.fit
    from the same init.

(6) ``--parts init``: the hierarchical initial factorisation of K rows of
    upsampled digits (the first K of the 1024 columns when K < 1024), K = D,
    s = 5, QK-means's residual rule and adaptive step, for the settings named
    by ``--init-variants`` (``INIT_VARIANTS``: ``fixed`` = 300 iterations in
    every run, no early stop; ``previous`` = QKMeans's init budget before its
    ``_SPLIT_TOL`` / ``_LAST_TOL`` (split_tol 1e-3, last run tol 1e-4);
    ``default`` = QKMeans's own; ``AS…`` = adaptive step in the splits, ``-L`` cap of
    the last global run, ``-G`` cap of the other global runs, ``-st``
    split_tol), one single-threaded process per setting, ``--init-jobs`` at a
    time: seconds, relative error ‖C − V‖/‖C‖, and every palm4MSA run
    (factors:iterations:seconds).

``--markdown`` writes the parts of the run other than (2) to docs/benchmarks/qkmeans.md.
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
from dqkm.kernels.palm4msa import default_shapes  # noqa: E402
from dqkm.kernels.projections import Splincol  # noqa: E402
from dqkm.kernels.sparse_factors import SparseFactors  # noqa: E402


_NOTES = """\
The parts of `bench_qkmeans.py` named in the command above (see its docstring for what
each measures).  Absolute seconds depend on the machine and its load (the header gives
the load average); the ratios come from one run, side by side.  "measured" rows were timed
whole; "extrapolated" rows are computed from measured parts, as the row says.
"""


def best_of(f, repeat, cpu=False):
    """Best wall seconds of ``repeat`` calls (and best CPU seconds of this process
    when ``cpu``: less sensitive to other processes on a shared machine)."""
    best, best_cpu, out = np.inf, np.inf, None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = f()
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return ((best, best_cpu) if cpu else best), out


def projected_factors(K, D, s, rng):
    mats = []
    for shape in default_shapes(K, D):
        P = Splincol(shape, min(s, min(shape)))
        mats.append(P(rng.standard_normal(shape)))
    import scipy.sparse as sp

    return SparseFactors([sp.csr_matrix(M) for M in mats], lam=1.0)


def fitted_like(cls, K, D, **attrs):
    m = cls(K)
    for k, v in attrs.items():
        setattr(m, k, v)
    m.n_features_in_ = D
    return m


# ----------------------------------------------------------------------------- (1)
def inference(a):
    print(f"\n## (1) Inference: predict on {a.rows:,} rows (float32, in memory, threaded "
          f"scheduler), sparsity 5, best of {a.repeat}\n")
    print("| K | D | factors | Q | nnz | compression | KMeans.predict s (CPU s) "
          "| QKMeans.predict s (CPU s) | speed-up wall | speed-up CPU | target |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    Dmax = max(D for _, D in a.shapes)
    Xall = rng.standard_normal((a.rows, Dmax), dtype=np.float32)
    targets = {(512, 2000): "≥ 3×", (2048, 2048): "≥ 5×"}
    with dask.config.set(scheduler="threads"):
        for K, D in a.shapes:
            X = np.ascontiguousarray(Xall[:, :D])
            kinds = [("projected", projected_factors(K, D, 5, rng))]
            if a.check_fitted and (K, D) == a.check_fitted:
                from dqkm.cluster.qkmeans import factorize_centroids

                km = dqkm.KMeans(K, max_iter=3, random_state=0).fit(X[:max(4 * K, 5000)])
                kinds.append(("palm4MSA-fitted",
                              factorize_centroids(km, 5, method="palm4msa", n_iter=5)))
            for kind, F in kinds:
                V = F.toarray().astype(np.float32)
                km = fitted_like(dqkm.KMeans, K, D, cluster_centers_=V)
                qk = fitted_like(dqkm.QKMeans, K, D, factors_=F, cluster_centers_=V,
                                 flops_=F.flops, compression_=F.compression)
                qk.predict(X[:1000])  # numba compilation
                km.predict(X[:1000])
                (t_km, c_km), l_km = best_of(lambda: km.predict(X), a.repeat, cpu=True)
                (t_qk, c_qk), l_qk = best_of(lambda: qk.predict(X), a.repeat, cpu=True)
                agree = float(np.mean(l_km == l_qk))
                note = "" if agree > 0.999 else f" (labels agree {agree:.3f})"
                print(f"| {K} | {D} | {kind} | {F.n_factors} | {F.nnz:,} | {F.compression:.1f} "
                      f"| {t_km:.3f} ({c_km:.2f}) | {t_qk:.3f} ({c_qk:.2f}) | **{t_km / t_qk:.2f}×**{note} "
                      f"| {c_km / c_qk:.2f}× "
                      f"| {targets.get((K, D), '')} |", flush=True)


# ----------------------------------------------------------------------------- (2)
def end_to_end(a):
    from sklearn.cluster import kmeans_plusplus

    X = dqkm.datasets.load_digits()[0].compute()
    K = 16
    print(f"\n## (2) End to end: digits {X.shape[0]} × {X.shape[1]}, K = {K}, sparsity 3, "
          f"hierarchical init, max_iter=10, tol=0; {a.seeds} k-means++ seeds (shared)\n")
    inits = [kmeans_plusplus(X, K, random_state=s)[0] for s in range(a.seeds)]
    km_obj, km_t = [], []
    for init in inits:
        t0 = time.perf_counter()
        km = dqkm.KMeans(K, init=init, max_iter=10, tol=0).fit(X)
        km_t.append(time.perf_counter() - t0)
        km_obj.append(km.inertia_)
    print(f"K-means (dqkm.KMeans, 10 iterations): {np.mean(km_t):.2f} s, objective "
          f"{np.mean(km_obj):.5g}\n")
    print("| hierarchical_refits | palm_iter | palm_iter_init | fit s | init factorisation s "
          "| palm4MSA s (10 it.) | assign s (10 it.) | objective ÷ K-means | min–max ratio | nnz |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    settings = ([(0, p, 300) for p in a.palm_iters] + [(1, p, 300) for p in a.palm_iters]
                + [(1, 50, pi) for pi in a.palm_iter_inits if pi != 300]
                + [(10, p, 300) for p in a.refit_palm_iters])
    dqkm.QKMeans(K, sparsity=3, init=inits[0], max_iter=1, palm_iter=1,
                 palm_iter_init=1).fit(X)  # numba compilation
    for refit, p, pi in settings:
        secs, init_s, palm_s, ass_s, ratios, nnz = [], [], [], [], [], []
        for init, base in zip(inits, km_obj):
            t0 = time.perf_counter()
            qk = dqkm.QKMeans(K, sparsity=3, init=init, init_factorization="hierarchical",
                              palm_iter=p, palm_iter_init=pi, hierarchical_refits=refit,
                              max_iter=10, tol=0).fit(X)
            dt = time.perf_counter() - t0
            h = qk.history_
            secs.append(dt)
            palm_s.append(sum(r["seconds_palm"] for r in h))
            ass_s.append(sum(r["seconds_assign"] for r in h))
            init_s.append(dt - sum(r["seconds"] for r in h))
            ratios.append(qk.inertia_ / base)
            nnz.append(qk.factors_.nnz)
        r = np.asarray(ratios)
        print(f"| {refit} | {p} | {pi} | {np.mean(secs):.2f} ± {np.std(secs):.2f} "
              f"| {np.mean(init_s):.2f} | {np.mean(palm_s):.2f} | {np.mean(ass_s):.2f} "
              f"| **{r.mean():.4f} ± {r.std():.4f}** | {r.min():.3f}–{r.max():.3f} "
              f"| {np.mean(nnz):.0f} |", flush=True)
    print("\nTargets: fit ≤ 15 s at objective ratio ≤ 1.10 (authors' code: ~300 s, 1.09).")


# ----------------------------------------------------------------------------- (3)
def training(a):
    K = D = a.train_k
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((K, D)).astype(np.float32) * 4
    lab = rng.integers(0, K, a.train_rows)
    X = (centers[lab] + rng.standard_normal((a.train_rows, D), dtype=np.float32))
    init = X[rng.choice(a.train_rows, K, replace=False)]
    P = a.train_palm_iter
    print(f"\n## (3) Training per iteration: K = D = {K}, N = {a.train_rows:,} (float32 blobs in "
          f"memory, threaded scheduler); QK-means: palm4MSA init (palm_iter_init=1), "
          f"palm_iter={P}, max_iter={a.train_iter}, tol=0, hierarchical_refits=0 (the steady "
          f"iteration: a refit is a one-time first-iteration cost, like the init)\n")
    with dask.config.set(scheduler="threads"):
        dqkm.KMeans(K, init=init, max_iter=1, tol=0).fit(X[:5000])  # compilation
        km = dqkm.KMeans(K, init=init, max_iter=a.train_iter + 1, tol=0).fit(X)
        qk = dqkm.QKMeans(K, sparsity=5, init=init, init_factorization="palm4msa",
                          palm_iter_init=1, palm_iter=P, max_iter=a.train_iter, tol=0,
                          hierarchical_refits=0).fit(X)
    # the first K-means iteration includes warm-up effects: drop it
    t_km = float(np.median([r["seconds"] for r in km.history_[1:]]))
    h = qk.history_
    t_ass = float(np.median([r["seconds_assign"] for r in h]))
    t_palm = float(np.median([r["seconds_palm"] for r in h]))
    N = a.train_rows
    per_row_km, per_row_qk = t_km / N, t_ass / N
    per_palm = t_palm / P
    print("| method | s / iteration | assignment s | palm4MSA s | per row (µs) |")
    print("|---|---|---|---|---|")
    print(f"| dqkm.KMeans | {t_km:.3f} | {t_km:.3f} | – | {1e6 * per_row_km:.2f} |")
    print(f"| dqkm.QKMeans (palm_iter={P}) | {t_ass + t_palm:.3f} | {t_ass:.3f} | {t_palm:.3f} "
          f"({per_palm:.3f} per palm4MSA iteration) | {1e6 * per_row_qk:.2f} |")
    print(f"\nQK-means iteration ÷ K-means iteration at N = {N:,}: "
          f"{(t_ass + t_palm) / t_km:.2f}×; assignment alone: {t_ass / t_km:.2f}×")
    for p in sorted({P, 5, 10, 50}):
        if per_row_km > per_row_qk:
            n_star = p * per_palm / (per_row_km - per_row_qk)
            print(f"palm_iter={p}: a QK-means iteration is cheaper than a K-means one for "
                  f"N > {n_star:,.0f} (extrapolated: {p} × {per_palm:.3f} s / "
                  f"({1e6 * per_row_km:.2f} − {1e6 * per_row_qk:.2f}) µs per row)")
        else:
            print(f"palm_iter={p}: never — the factored assignment per row "
                  f"({1e6 * per_row_qk:.2f} µs) is not cheaper than the dense one "
                  f"({1e6 * per_row_km:.2f} µs)")


def upsampled_digits(n, rng):
    """``n`` rows of digits upsampled to 32 × 32 = 1024 dims (bilinear), drawn with
    replacement, plus Gaussian noise (σ = 0.5 on the 0–16 scale): float32."""
    from scipy.ndimage import zoom
    from sklearn.datasets import load_digits

    imgs = load_digits().images
    up = zoom(imgs, (1, 4, 4), order=1).reshape(len(imgs), 1024)
    return (up[rng.integers(0, len(up), n)] + rng.normal(0, 0.5, (n, 1024))).astype(np.float32)


def _constraints(K, D):
    from dqkm.kernels import default_constraints

    return default_constraints(K, D, sparsity=5,
                               n_factors=dqkm.QKMeans(K)._check_qk_params(D))


def _fit_record(est, X):
    t0 = time.perf_counter()
    est.fit(X)
    total = time.perf_counter() - t0
    h = est.history_
    it = len(h)
    return dict(total=total, it=it, iter_s=sum(r["seconds"] for r in h),
                assign=sum(r.get("seconds_assign", r["seconds"]) for r in h),
                palm=sum(r.get("seconds_palm", 0.0) for r in h),
                palm_its=sum(r.get("palm_iter", 0) for r in h), inertia=est.inertia_)


def defaults(a):
    """QKMeans(K) with all defaults vs KMeans(K) (defaults), both fitted whole on the
    same rows; the fit split into parts, and the N where QKMeans.fit would be faster
    (extrapolated from the parts, labelled)."""
    K, N, rng = a.default_k, a.default_rows, np.random.default_rng(0)
    X = upsampled_digits(N, rng)
    print(f"\n## (4) All defaults at K = {K}, D = 1024: digits upsampled to 1024 dims, "
          f"N = {N:,} (float32 in memory, threaded scheduler), random_state=0\n", flush=True)
    with dask.config.set(scheduler="threads"):
        dqkm.KMeans(8, max_iter=2).fit(X[:2000])  # compilation, both
        dqkm.QKMeans(8, max_iter=2, palm_iter_init=2, palm_iter=2).fit(X[:2000])
        km = _fit_record(dqkm.KMeans(K, random_state=0), X)
        qk = _fit_record(dqkm.QKMeans(K, random_state=0), X)
    # a fit = fixed part (seeding, factorisation, palm4MSA) + per-row passes
    a_km = km["iter_s"] / (km["it"] * N)
    a_qk = qk["assign"] / (qk["it"] * N)
    fixed_km = km["total"] - km["iter_s"]
    fixed_qk = qk["total"] - qk["assign"]
    init_qk = qk["total"] - qk["iter_s"]
    rows = [
        ["KMeans(K).fit, measured", f"{km['total']:.1f}", km["it"],
         f"{km['iter_s'] / km['it']:.2f}", "–", f"{1e6 * a_km:.2f}", "1.000", "1.00"],
        ["QKMeans(K).fit, measured", f"{qk['total']:.1f}", qk["it"],
         f"{qk['assign'] / qk['it']:.2f}",
         f"{init_qk:.1f} + {qk['palm']:.1f} ({qk['palm_its']} palm4MSA iterations)",
         f"{1e6 * a_qk:.2f}", f"{qk['inertia'] / km['inertia']:.4f}",
         f"{qk['total'] / km['total']:.2f}"],
    ]
    print(markdown_table(["what", "seconds", "Lloyd iterations", "pass s / iteration",
                          "init + palm4MSA refits s", "pass µs / row-iteration",
                          "objective ÷ KMeans", "time ÷ KMeans"], rows))
    for n in (100_000, 1_000_000):
        t_km = fixed_km + n * a_km * km["it"]
        t_qk = fixed_qk + n * a_qk * qk["it"]
        print(f"\nextrapolated to N = {n:,} (fixed parts as measured, passes linear in N, "
              f"the measured iteration counts): KMeans {t_km:.0f} s, QKMeans {t_qk:.0f} s, "
              f"ratio {t_qk / t_km:.2f}", end="")
    gain = a_km * km["it"] - a_qk * qk["it"]
    if gain > 0:
        print(f"\ncrossover (extrapolated as above): QKMeans.fit faster than KMeans.fit for "
              f"N > {(fixed_qk - fixed_km) / gain:,.0f}")
    else:
        print("\ncrossover: none — QK-means's passes over the rows (its iterations × its "
              "per-row cost) are not cheaper than K-means's here")


# ----------------------------------------------------------------------------- (6)
# hierarchical_palm4msa settings of part (6); every one with QK-means's geometric
# residual rule and adaptive step in the global runs
INIT_VARIANTS = {
    "fixed": dict(n_iter=300, tol=0.0, split_tol=0.0),
    "previous": dict(n_iter=300, split_tol=1e-3, tol=1e-4),
    "AS": dict(n_iter=300, split_adaptive_step=True),
    "AS-L100": dict(n_iter=300, split_adaptive_step=True, n_iter_last=100),
    "AS-L150": dict(n_iter=300, split_adaptive_step=True, n_iter_last=150),
    "AS-G0": dict(n_iter=300, split_adaptive_step=True, n_iter_global=0, n_iter_last=300),
    "AS-G20": dict(n_iter=300, split_adaptive_step=True, n_iter_global=20, n_iter_last=300),
    "AS-st3e-3": dict(n_iter=300, split_adaptive_step=True, split_tol=3e-3),
    "AS-st3e-3-L100": dict(n_iter=300, split_adaptive_step=True, split_tol=3e-3,
                           n_iter_last=100),
    "AS-G20-L100": dict(n_iter=300, split_adaptive_step=True, n_iter_global=20,
                        n_iter_last=100),
    "default": None,  # QKMeans(K)'s own initial factorisation
}


def _init_variant(K, name, q):
    """Factorise K upsampled-digits rows (D = 1024 columns cut to K when K < 1024)
    with one INIT_VARIANTS setting; put (name, K, seconds, relative error, runs)."""
    from dqkm.cluster.qkmeans import _hierarchical
    from dqkm.kernels import default_residual_constraints, hierarchical_palm4msa
    import dqkm.kernels.hierarchical as hier

    rng = np.random.default_rng(0)
    X = upsampled_digits(4 * K, rng)
    D = min(K, 1024) if K < 1024 else 1024
    C = X[rng.choice(len(X), K, replace=False), :D].astype(np.float64)
    cons = _constraints(K, D)
    hierarchical_palm4msa(np.eye(8), n_iter=2)  # numba compilation
    runs, real = [], hier._run

    def spy(*args, **kw):
        t0 = time.perf_counter()
        out = real(*args, **kw)
        runs.append(f"{len(args[2])}:{len(out[2]) - 1}:{time.perf_counter() - t0:.0f}")
        return out

    hier._run = spy
    t0 = time.perf_counter()
    if INIT_VARIANTS[name] is None:
        res = _hierarchical(C, cons, n_iter=dqkm.QKMeans(K).palm_iter_init)
    else:
        res = hierarchical_palm4msa(
            C, cons, residual_constraints=default_residual_constraints(cons, rule="geometric"),
            adaptive_step=True, **INIT_VARIANTS[name])
    row = (name, K, time.perf_counter() - t0, res.errors[-1] / np.linalg.norm(C), " ".join(runs))
    if os.environ.get("BENCH_QK_INIT_LOG"):  # each row as it ends, for runs cut short
        with open(os.environ["BENCH_QK_INIT_LOG"], "a") as f:
            f.write(repr(row) + "\n")
    q.put(row)


class _InitJobs:
    """The part (6) processes: started (forked) before any other part runs, so they
    run side by side with it; :meth:`report` waits for them and prints the table."""

    def __init__(self, a):
        import multiprocessing as mp

        self.a = a
        self.ctx = mp.get_context("fork")
        self.q = self.ctx.Queue()
        jobs = [(K, name) for K in a.init_k for name in a.init_variants]
        self.skipped = [(K, name) for K, name in jobs
                        if name == "fixed" and K > a.fixed_max_k]
        self.pending = [j for j in jobs if j not in self.skipped]
        self.running, self.rows = [], []
        self._start()

    def _start(self):
        while self.pending and len(self.running) < self.a.init_jobs:
            K, name = self.pending.pop(0)
            proc = self.ctx.Process(target=_init_variant, args=(K, name, self.q))
            proc.start()
            self.running.append((proc, K, name, time.perf_counter()))

    def report(self):
        a = self.a
        while self.pending or self.running:
            self._start()
            time.sleep(1)
            for item in list(self.running):
                proc, K, name, t0 = item
                if not proc.is_alive():
                    self.running.remove(item)
                elif time.perf_counter() - t0 > a.init_budget:
                    proc.terminate()
                    proc.join()
                    self.running.remove(item)
                    self.rows.append((name, K, None, None, "stopped"))
            while not self.q.empty():
                self.rows.append(self.q.get())
        while not self.q.empty():
            self.rows.append(self.q.get())
        print(f"\n## (6) Hierarchical initial factorisation of K upsampled-digits rows, K = D, "
              f"s = 5 (one single-threaded process per row, {a.init_jobs} at a time, stopped "
              f"after {a.init_budget:.0f} s)\n", flush=True)
        rows = sorted(self.rows + [(n, K, None, None, "not run") for K, n in self.skipped],
                      key=lambda r: (r[1], a.init_variants.index(r[0])))
        table = []
        for name, K, t, e, runs in rows:
            secs = (f"{t:.0f}" if t is not None else "not run" if runs == "not run"
                    else f"> {a.init_budget:.0f} (stopped)")
            table.append([K, name, secs, f"{e:.4f}" if e is not None else "–", runs])
        print(markdown_table(["K = D", "setting", "seconds", "relative error",
                              "runs (factors:iterations:seconds)"], table), flush=True)


def minibatch(a):
    """MiniBatchQKMeans on digits: refit_every against the objective of QKMeans.fit."""
    from sklearn.datasets import load_digits

    X = load_digits().data
    init = X[np.random.default_rng(0).choice(len(X), 10, replace=False)]
    print("\n## (5) MiniBatchQKMeans on digits (K = 10, sparsity 3, batch_size=100, 8 epochs "
          "of partial_fit over shuffled chunks, same init as QKMeans.fit(max_iter=30))\n",
          flush=True)
    t0 = time.perf_counter()
    full = dqkm.QKMeans(10, sparsity=3, init=init, max_iter=30, palm_iter_init=100,
                        random_state=0).fit(X)
    t_full = time.perf_counter() - t0
    rows = [["QKMeans.fit", f"{t_full:.1f}", "–", "1.000"]]
    for every in a.refit_every:
        rng = np.random.default_rng(0)
        mb = dqkm.MiniBatchQKMeans(10, sparsity=3, init=init, batch_size=100, palm_iter=10,
                                   palm_iter_init=100, refit_every=every, random_state=0,
                                   compute_labels=False)
        t0 = time.perf_counter()
        for _ in range(8):
            order = rng.permutation(len(X))
            mb.partial_fit(dask.array.from_array(X[order], chunks=100))
        t = time.perf_counter() - t0
        rows.append([f"MiniBatchQKMeans(refit_every={every})", f"{t:.1f}", mb.n_refits_,
                     f"{-mb.score(X) / full.inertia_:.3f}"])
    print(markdown_table(["method", "seconds", "refits", "objective ÷ QKMeans.fit"], rows))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--parts", nargs="*", default=["inference", "end-to-end", "training"])
    p.add_argument("--rows", type=int)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--seeds", type=int)
    p.add_argument("--check-fitted", action="store_true",
                   help="extra inference row with palm4MSA-fitted factors at K=128, D=2000")
    p.add_argument("--train-k", type=int)
    p.add_argument("--train-rows", type=int)
    p.add_argument("--train-iter", type=int, default=2)
    p.add_argument("--train-palm-iter", type=int, default=2)
    p.add_argument("--default-rows", type=int, default=20_000,
                   help="rows of upsampled digits for part (4)")
    p.add_argument("--default-k", type=int, default=1024, help="n_clusters of part (4)")
    p.add_argument("--init-budget", type=float, default=600.0,
                   help="seconds allowed to the default initial factorisation in part (4)")
    p.add_argument("--init-k", type=int, nargs="*", default=[512, 1024])
    p.add_argument("--init-variants", nargs="*", default=["previous", "default"],
                   choices=list(INIT_VARIANTS))
    p.add_argument("--init-jobs", type=int, default=2)
    p.add_argument("--fixed-max-k", type=int, default=512,
                   help="largest K at which the 'fixed' init variant is run (hours beyond)")
    p.add_argument("--refit-every", type=int, nargs="*", default=[1, 5, 10, 25])
    add_markdown_option(p)
    a = p.parse_args(argv)
    a.rows = a.rows or (20_000 if a.quick else 100_000)
    a.shapes = [(512, 2000), (1024, 1024)] if a.quick else \
        [(128, 2000), (256, 2000), (512, 2000), (512, 512), (1024, 1024), (2048, 2048)]
    a.check_fitted = (128, 2000) if a.check_fitted else None
    a.seeds = a.seeds or (2 if a.quick else 5)
    a.palm_iters = [5, 20, 50, 300] if a.quick else [5, 10, 20, 50, 100, 300]
    a.palm_iter_inits = [] if a.quick else [50, 100]
    a.refit_palm_iters = [50, 300] if a.quick else [50, 100, 300]
    a.train_k = a.train_k or (256 if a.quick else 1024)
    a.train_rows = a.train_rows or (20_000 if a.quick else 50_000)
    print(f"bench_qkmeans: {' '.join(sys.argv[1:]) or '(defaults)'}; "
          f"{os.cpu_count()} CPUs", flush=True)
    t0 = time.perf_counter()
    if "end-to-end" in a.parts:
        end_to_end(a)
    jobs = _InitJobs(a) if "init" in a.parts else None  # forked first, run alongside
    with capture_stdout() as out:
        if "inference" in a.parts:
            inference(a)
        if "training" in a.parts:
            training(a)
        if "defaults" in a.parts:
            defaults(a)
        if "minibatch" in a.parts:
            minibatch(a)
        if jobs is not None:
            jobs.report()
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")
    if a.markdown:
        write_page("qkmeans", "QuicK-means: inference, defaults at K = D = 1024, mini-batch",
                   out.getvalue(), notes=_NOTES)


if __name__ == "__main__":
    main()
