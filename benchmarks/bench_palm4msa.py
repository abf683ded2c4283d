"""palm4MSA and hierarchical palm4MSA: dqkm against pyfaust, same targets, same iterations.

    .venv/bin/python benchmarks/bench_palm4msa.py [--quick] [--hadamard]
        [--targets digits,blobs,hadamard] [--algos palm4msa,hierarchical] [--no-pyfaust]
    .venv/bin/python benchmarks/bench_palm4msa.py --speed [--sizes 512,1024,2048]
        [--iters 3] [--init-size 1024] [--markdown]

``--speed``: one palm4MSA iteration through the sparse factors (``method="factors"``,
the default) against the dense reference path (``method="dense"``, the implementation
before it) on the same K = D random target, s = 5, Q = log2 K factors, from the same
warm start (2 iterations), side by side in one run: median CPU seconds per iteration
(process time between the callbacks), their ratio and the relative error after the same
iterations (and pyfaust's palm4msa where installed); then each path's flops per
iteration and the measured rates of the kernels that carry them (SGEMM, the chain
gradient, a one-factor gather).  Then the hierarchical initial
factorisation as QKMeans runs it with its defaults at K = D = ``--init-size`` on
upsampled digits centroids.  ``--markdown`` writes docs/benchmarks/palm4msa.md.

Targets (Q = ⌈log2 max(K, D)⌉ factors, Splincol(s) on every factor):
- 128×784: 128 K-means centroids of sklearn's digits upsampled to 28×28
  (scipy.ndimage.zoom, bilinear), KMeans(random_state=0);
- 256×2048: the 256 centres of sklearn's make_blobs in 2048 dimensions
  (``--quick`` skips it).

Both libraries run ``n_iter`` iterations per palm4MSA call (300; 50 with
``--quick``); dqkm stops earlier when the relative change of its error is below
its default tol = 1e-6 (the iterations it ran are printed).  Hierarchical
residual constraints: Splincol(min(s^(Q-l), min(shape))) for both.
OMP/OpenBLAS threads are pinned to 1 before numpy is imported (pyfaust's
fastest setting on this machine, measured earlier), so both run on one core,
and both wall-clock and CPU seconds (``time.process_time``) are printed: on
the shared machine the CPU seconds are the load-independent measure.
If pyfaust is missing, dqkm's numbers and the PYFAUST_RECORDED figures are printed.
Last, hierarchical palm4MSA on the 2^k Hadamard matrix (k = 7, 8; 7 with
``--quick``; ``--hadamard`` runs only this part), Splincol(2) factors and
Splincol(n/2^l) residuals, dqkm only.
"""

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

from dqkm.kernels import default_constraints, default_residual_constraints  # noqa: E402
from dqkm.kernels import hierarchical_palm4msa, palm4msa  # noqa: E402

PYFAUST_RECORDED = {  # pyfaust 3.41, measured earlier on this machine: (seconds, relative error, nnz)
    ("digits 128x784", "palm4msa", 5): (24.8, 0.900, 11343),
    ("digits 128x784", "hierarchical", 5): (189.0, 0.220, 8344),
    ("digits 128x784", "hierarchical", 3): (188.0, 0.353, 5081),
    ("blobs 256x2048", "palm4msa", 5): (269.0, 0.993, 27006),
}


def digits_centroids():
    from scipy.ndimage import zoom
    from sklearn.cluster import KMeans
    from sklearn.datasets import load_digits

    imgs = load_digits().images
    X = np.stack([zoom(x, 28 / 8, order=1) for x in imgs]).reshape(len(imgs), -1)
    return KMeans(128, n_init=1, random_state=0).fit(X).cluster_centers_


def blob_centres():
    from sklearn.datasets import make_blobs

    _, _, centres = make_blobs(n_samples=256, centers=256, n_features=2048, random_state=0,
                               return_centers=True)
    return centres


def load_pyfaust():
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pyfaust.fact
            import pyfaust.factparams
        return pyfaust
    except Exception as exc:  # any import failure: report and go on without it
        print(f"pyfaust is MISSING ({type(exc).__name__}: {exc}); printing dqkm and PYFAUST_RECORDED only.")
        return None


def faust_palm(pf, A, cons, n_iter):
    from pyfaust.factparams import ConstraintInt, ParamsPalm4MSA, StoppingCriterion

    fc = [ConstraintInt("splincol", c.shape[0], c.shape[1], c.s) for c in cons]
    p = ParamsPalm4MSA(fc, StoppingCriterion(num_its=n_iter))
    return pf.fact.palm4msa(A, p, backend=2020)


def faust_hier(pf, A, cons, res, n_iter):
    from pyfaust.factparams import ConstraintInt, ParamsHierarchical, StoppingCriterion

    def ci(c):
        return ConstraintInt("splincol", c.shape[0], c.shape[1], c.s)

    stop = StoppingCriterion(num_its=n_iter)
    # pyfaust's default splits the leftmost factor off and keeps the residual on
    # the right, as dqkm does
    p = ParamsHierarchical([ci(c) for c in cons[:-1]], [ci(c) for c in res] + [ci(cons[-1])],
                           stop, StoppingCriterion(num_its=n_iter))
    return pf.fact.hierarchical(A, p, backend=2020)


def run(label, A, algo, s, n_iter, pf, rows, slow_pyfaust=False):
    K, D = A.shape
    cons = default_constraints(K, D, sparsity=s)
    nrm = np.linalg.norm(A)
    t, c = time.perf_counter(), time.process_time()
    if algo == "palm4msa":
        res = palm4msa(A, cons, n_iter=n_iter)
    else:
        res = hierarchical_palm4msa(A, cons, n_iter=n_iter)
    t_dq, c_dq = time.perf_counter() - t, time.process_time() - c
    err_dq = np.linalg.norm(A - res.factors.toarray()) / nrm
    row = {"target": label, "algo": algo, "s": s, "dq_t": t_dq, "dq_c": c_dq, "dq_err": err_dq,
           "dq_nnz": res.factors.nnz, "dq_it": res.n_iter}
    if algo == "palm4msa" and label.startswith("digits"):
        t = time.perf_counter()
        ung = palm4msa(A, cons, n_iter=n_iter, safeguard=False)
        row["ung_t"] = time.perf_counter() - t
        row["ung_err"] = np.linalg.norm(A - ung.factors.toarray()) / nrm
    if pf is not None and (slow_pyfaust or not (label.startswith("blobs")
                                                 and algo == "hierarchical")):
        t, c = time.perf_counter(), time.process_time()
        try:
            if algo == "palm4msa":
                F = faust_palm(pf, A, cons, n_iter)
            else:
                F = faust_hier(pf, A, cons, default_residual_constraints(cons), n_iter)
            row["pf_t"] = time.perf_counter() - t
            row["pf_c"] = time.process_time() - c
            row["pf_err"] = np.linalg.norm(A - F.toarray()) / nrm
            row["pf_nnz"] = F.nnz_sum()
        except Exception as exc:
            print(f"pyfaust {algo} failed on {label}: {type(exc).__name__}: {exc}")
    rows.append(row)
    print_row(row, n_iter)


HEADER = ("| target | algorithm | s | dqkm s wall / cpu | dqkm rel. error | dqkm nnz | dqkm iters | "
          "pyfaust s wall / cpu | pyfaust rel. error | pyfaust nnz | ratio dqkm/pyfaust wall / cpu |")


def print_row(r, n_iter):
    if "pf_t" in r:
        pf = (f"{r['pf_t']:.2f} / {r['pf_c']:.2f} | {r['pf_err']:.3f} | {r['pf_nnz']} | "
              f"{r['dq_t'] / r['pf_t']:.3f} / {r['dq_c'] / r['pf_c']:.3f}")
    else:
        anc = PYFAUST_RECORDED.get((r["target"], r["algo"], r["s"]))
        pf = ("(not run) | – | – | –" if anc is None else
              f"PYFAUST_RECORDED {anc[0]:.0f} (quiet) | {anc[1]:.3f} | {anc[2]} | "
              f"cpu vs PYFAUST_RECORDED: {r['dq_c'] / anc[0]:.3f}")
    print(f"| {r['target']} | {r['algo']} | {r['s']} | {r['dq_t']:.2f} / {r['dq_c']:.2f} | {r['dq_err']:.3f} | "
          f"{r['dq_nnz']} | {r['dq_it']} | {pf} |", flush=True)
    if "ung_t" in r:
        print(f"|   (dqkm palm4msa without safeguard) | | | {r['ung_t']:.2f} | {r['ung_err']:.3f} "
              f"| | {n_iter} max | | | | |", flush=True)


def hadamard_rows(ks):
    from scipy.linalg import hadamard

    from dqkm.kernels import Splincol

    print("| Hadamard n | k factors | dqkm s | relative error | nnz per factor | global iters |")
    print("|---|---|---|---|---|---|")
    for k in ks:
        n = 2**k
        H = hadamard(n).astype(np.float64)
        t = time.perf_counter()
        res = hierarchical_palm4msa(H, [Splincol((n, n), 2)] * k)
        t = time.perf_counter() - t
        err = np.linalg.norm(H - res.factors.toarray()) / np.linalg.norm(H)
        nnz = sorted({S.nnz for S in res.factors.factors})
        print(f"| {n} | {k} | {t:.2f} | {err:.1e} | {nnz} (2n = {2 * n}) | {res.n_iter} |", flush=True)


def _wall_per_iteration(A, cons, n_iter, init, threads):
    """Median wall seconds per iteration through the factors (iterations 2 … n_iter + 1)
    with the split kernels (dqkm.kernels._split) on at most ``threads`` threads, and the
    factors' λ (bit-identical across counts)."""
    from dqkm.kernels._split import limit_threads

    stamps = []
    with limit_threads(threads):
        res = palm4msa(A, cons, n_iter=n_iter + 1, tol=0, init=init, adaptive_step=True,
                       callback=lambda t, e: stamps.append(time.perf_counter()))
    return float(np.median(np.diff(stamps))), res.lam


def threads_rows(sizes, n_iter):
    """Through the factors, wall seconds per iteration on one thread and on all of
    numba's threads, side by side, from the same warm start."""
    import numba

    rows = []
    n_all = min(numba.config.NUMBA_NUM_THREADS, 8)
    for n in sizes:
        A = np.random.default_rng(n).standard_normal((n, n))
        cons = default_constraints(n, n, sparsity=5)
        start = palm4msa(A, cons, n_iter=2, adaptive_step=True)
        # alternated, best of two each: the first run in a process pays cold caches
        t1 = tn = math.inf
        for _ in range(2):
            t, lam1 = _wall_per_iteration(A, cons, n_iter, start, 1)
            t1 = min(t1, t)
            t, lamn = _wall_per_iteration(A, cons, n_iter, start, n_all)
            tn = min(tn, t)
        rows.append([f"{n} × {n}", n_all, f"{t1:.3f}", f"{tn:.3f}", f"{t1 / tn:.2f}×",
                     "yes" if lam1 == lamn else "no"])
        print("| " + " | ".join(str(c) for c in rows[-1]) + " |", flush=True)
    return rows


def _per_iteration(A, cons, method, n_iter, init):
    """Median CPU seconds of the iterations 2 … n_iter + 1 (the process time between
    callbacks: the set-up and the first iteration's one-off costs are left out; both
    paths run on one thread, so CPU seconds leave out the waits of a loaded machine) and
    the relative error after ``n_iter + 1`` iterations."""
    stamps = []
    res = palm4msa(A, cons, n_iter=n_iter + 1, tol=0, init=init, adaptive_step=True,
                   method=method, callback=lambda t, e: stamps.append(time.process_time()))
    times = np.diff(stamps)
    return float(np.median(times)), float(np.linalg.norm(A - res.factors.toarray()) / np.linalg.norm(A))


def speed_rows(sizes, n_iter, pf):
    rows, frows = [], []
    for n in sizes:
        A = np.random.default_rng(n).standard_normal((n, n))
        cons = default_constraints(n, n, sparsity=5)
        start = palm4msa(A, cons, n_iter=2, adaptive_step=True)
        t_f, e_f = _per_iteration(A, cons, "factors", n_iter, start)
        t_d, e_d = _per_iteration(A, cons, "dense", n_iter, start)
        pf_cell = "not run"
        if pf is not None:
            t = time.perf_counter()
            F = faust_palm(pf, A, cons, n_iter)
            pf_cell = f"{(time.perf_counter() - t) / n_iter:.3f} s, err {np.linalg.norm(A - F.toarray()) / np.linalg.norm(A):.4f}"
        rows.append([f"{n} × {n}", len(cons), n_iter + 1, f"{t_f:.3f}", f"{t_d:.3f}", f"{t_d / t_f:.1f}×",
                     f"{e_f:.6f}", f"{e_d:.6f}", pf_cell])
        print("| " + " | ".join(str(c) for c in rows[-1]) + " |", flush=True)
        frows.append(flop_row(n, start, t_f, t_d))
    return rows, frows


def _best(fn, k=3):
    times = []
    for _ in range(k):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return min(times)


def flop_row(n, start, t_f, t_d):
    """Flops of one iteration on each path (main terms, counted from the warm start's
    non-zeros) and the rates of the kernels that carry them, measured here."""
    from dqkm.kernels._factor_apply import _Factor
    from dqkm.kernels._palm_chains import _Chains, fmul

    facs = [_Factor(S.toarray().astype(np.float64)) for S in start.factors.factors]
    Q = len(facs)
    nnz = [float(np.count_nonzero(f.dense)) for f in facs]
    shapes = [f.dense.shape for f in facs]
    # reference: per factor the float32 GEMMs C = Lᵀ·(A Rᵀ) (r×K×c) and GL·(S·GR) (r×r×c)
    f_ref = sum(2.0 * r * c * (n + r) for r, c in shapes)
    # through the factors: the chain gradient, 2·c·Σ_{j<q} nnz_j multiply-adds for factor
    # q, and about eight one-factor products of 2·nnz·n flops per factor (the parts, the
    # Grams, the objective of one candidate)
    f_grad = sum(4.0 * c * sum(nnz[:q]) for q, (r, c) in enumerate(shapes))
    f_prod = sum(16.0 * z * n for z in nnz)
    rng = np.random.default_rng(0)
    X32 = rng.standard_normal((n, n)).astype(np.float32)
    rate_gemm = 2.0 * n**3 / _best(lambda: X32 @ X32)
    X, Tt, d = rng.standard_normal((n, n)), rng.standard_normal((n, n)), np.ones(n)
    ch = _Chains(facs[:Q - 1])
    fwd = np.arange(Q - 2, -1, -1)
    rate_chain = 4.0 * n * sum(nnz[:Q - 1]) / _best(
        lambda: ch.gradient(fwd, ch.n + fwd[::-1], X, Tt, d, 1.0))
    rate_gather = 2.0 * nnz[-1] * n / _best(lambda: fmul(facs[-1], X), 5)
    bound = (f_ref / rate_gemm) / (f_grad / rate_chain)
    row = [f"{n} × {n}", f"{sum(nnz) / Q / n:.1f}", f"{f_ref / 1e9:.1f}", f"{f_grad / 1e9:.2f}",
           f"{f_prod / 1e9:.2f}", f"{f_ref / (f_grad + f_prod):.0f}×", f"{rate_gemm / 1e9:.1f}",
           f"{rate_chain / 1e9:.1f}", f"{rate_gather / 1e9:.1f}", f"{f_ref / t_d / 1e9:.1f}",
           f"{(f_grad + f_prod) / t_f / 1e9:.1f}", f"{bound:.1f}×"]
    print("| " + " | ".join(row) + " |", flush=True)
    return row


FLOP_HEAD = ["K × D", "nnz per factor / A", "reference GFLOP/iter (GEMMs)",
             "factors GFLOP/iter: chain gradient", "factors GFLOP/iter: one-factor products",
             "flop ratio", "SGEMM GFLOP/s", "chain-gradient kernel GFLOP/s",
             "gather kernel GFLOP/s", "reference achieved GFLOP/s", "factors achieved GFLOP/s",
             "bound: GEMM time / chain-gradient time"]


def upsampled_digit_centroids(n):
    from scipy.ndimage import zoom
    from sklearn.cluster import KMeans
    from sklearn.datasets import load_digits

    side = int(round(math.sqrt(n)))
    imgs = load_digits().images
    X = np.stack([zoom(x, side / 8, order=1) for x in imgs]).reshape(len(imgs), -1)
    return KMeans(n, n_init=1, random_state=0, max_iter=20).fit(X).cluster_centers_


def init_row(n):
    """QK-means's hierarchical factorisation at K = D = n with its default caps, timed
    with both progress budgets: ``"fit"`` (what ``QKMeans()`` runs for its initial
    factorisation) and ``"full"`` (the tighter budget of its hierarchical refits and of
    ``factorize_centroids``)."""
    from dqkm.cluster.qkmeans import _hierarchical

    A = upsampled_digit_centroids(n)
    cons = default_constraints(*A.shape, sparsity=5)
    rows = []
    for budget, who in (("fit", "QKMeans() init"), ("full", "hierarchical refit, post hoc")):
        t = time.perf_counter()
        res = _hierarchical(A, cons, n_iter=300, budget=budget)  # palm_iter_init=300
        t = time.perf_counter() - t
        err = np.linalg.norm(A - res.factors.toarray()) / np.linalg.norm(A)
        rows.append([f"{A.shape[0]} × {A.shape[1]}", f"{budget} ({who})", len(cons),
                     f"{t:.1f}", f"{err:.4f}", res.n_iter])
        print("| " + " | ".join(str(c) for c in rows[-1]) + " |", flush=True)
    return rows


SPEED_NOTES = """What is measured: `--speed` runs palm4MSA iterations (adaptive step, safeguard on, the
QK-means setting) on a K = D random Gaussian target, Splincol(5) factors, Q = log2 K,
from the same 2-iteration warm start, once through the sparse factors (the default
`method="factors"`) and once with the dense reference path (`method="dense"`, the
implementation that forms r×K×c products of the factor chains, kept unchanged), one
after the other for each size in the same process; seconds per iteration are medians of
the CPU time (`time.process_time`) between callbacks from the second iteration on
(set-up and the first iteration's one-off costs left out), single-threaded BLAS and
numba for both, so the waits of the shared machine are left out (its cache contention
is not).  The
through-the-factors path applies the left chain as sparse operators for the gradient
(one tiled float32 kernel), keeps every factor as CSR arrays next to its dense array,
forms one-factor products as gathers (`Sᵀ` through its own transposed CSR arrays, no
scatter), computes a Splincol step in one fused kernel (no dense step, mask or
dense-to-CSR conversion; the same entries and ties as the projection), and takes the
objective's quadratic term as ⟨GL, S·GR·Sᵀ⟩ with `S·GR·Sᵀ` formed by one fused kernel
(also for the left Grams `Sᵀ·GL·S`), which is the next right Gram when the candidate is
accepted.  The errors after the same iterations agree to rounding (the reference forms
its gradient in float32).  pyfaust's column says "not run" when
`--no-pyfaust` is given or pyfaust is missing.

The second table counts the flops of one iteration on each path from the warm start's
non-zeros (main terms only): for the reference its two float32 GEMMs per factor
(r×K×c and r×r×c, `2·r·c·(K + r)` flops); through the factors the chain gradient
(`2·c·Σ_{j<q} nnz_j` multiply-adds for factor q) and about eight one-factor products
of `2·nnz·A` flops per factor.  The rates are measured in the same run on the same sizes: a
float32 A×A×A GEMM (numpy/OpenBLAS, one thread), the chain-gradient kernel on the warm
start's deepest chain (float32), and one gather product of a factor with an A×A float64
matrix; "achieved" is the counted flops over the measured seconds per iteration.  The
last column, the reference's GEMM flops at the GEMM rate over the chain gradient's flops
at the chain kernel's rate, bounds the speed-up if everything else were free.

The third table is wall time (the better of two alternated runs each): the
through-the-factors path on one thread and on all of
numba's `NUMBA_NUM_THREADS` (this machine's cores by default, at most eight).  palm4MSA runs
on the driver while the workers wait, and its three largest kernels (the chain
gradient, the Gram sandwiches, the one-factor gathers) write independent columns or
rows of their outputs, so from 2¹⁹ output entries they are split into one contiguous
range per thread (at most eight); every entry is summed in the same order, so the
factors and λ are the same to the bit ("same λ").  The fused Splincol step splits its
rows the same way, each range with its own column buffers merged in range order (the
same picks, ties included).  The support dot products and the power iterations stay on
one thread.

QK-means variants and defaults:

- `QKMeans(variant="paper")` is Algorithm 1 of "QuicK-means: Acceleration of K-means by
  learning a fast transform" (Giffon, Emiya, Ralaivola, Kadri; 2019/2021) exactly: the
  initial centroids factorised by hierarchical palm4MSA with the product residual rule,
  then in every Lloyd iteration palm4MSA warm-started from the previous factors, plain
  PALM (step 1/c, c = 1.001·λ²‖L‖₂²‖R‖₂², no safeguard, no adaptive step), `palm_iter`
  iterations, no early stop; `hierarchical_refits` is ignored.
  `hierarchical_refits=0` with the default `variant="dqkm"` is warm-started palm4MSA
  only, but with dqkm's safeguarded adaptive step — not the published algorithm.
- Defaults (`variant="dqkm"`) and their cost: hierarchical initial factorisation with
  the geometric residual rule, at most `palm_iter_init=300` iterations per run, the
  runs before the last global one stopping when an iteration improves the error by at
  most 0.3 %, the last at 0.1 % (the "fit" budget of the last table);
  `hierarchical_refits=1` runs a hierarchical refit in iteration 1, its hierarchical
  run on the tighter "full" budget (0.1 % and 0.01 %, as `factorize_centroids`); later
  iterations run `palm_iter=50` warm-started, safeguarded iterations.  Every factor
  update costs O(Q·s·A·B) through the sparse factors (A = min(K, D), B = max(K, D)).
- Empty clusters (both variants, every `hierarchical_refits`): a cluster that receives
  no point keeps its previous row of V as the refit's target with the weight of one
  point (√n = 1 instead of 0).  The warm start's fit objective is unchanged, so the
  QK-means objective stays non-increasing, and the row moves by at most the refit's
  starting objective — it neither collapses to 0 nor drifts unconstrained.
"""


def speed_main(args, pf):
    from _report import markdown_table, write_page

    palm4msa(np.eye(8), n_iter=2)  # load numba's cached kernels
    palm4msa(np.eye(8), n_iter=2, method="dense")
    head = ["K × D", "Q", "iterations", "factors CPU s/iter", "dense CPU s/iter", "speed-up",
            "factors rel. error", "dense rel. error", "pyfaust s/iter"]
    print("| " + " | ".join(head) + " |")
    from dqkm.kernels._split import limit_threads

    with limit_threads(1):  # CPU seconds on one thread for both paths, as the BLAS
        rows, frows = speed_rows([int(v) for v in args.sizes.split(",")], args.iters, pf)
    thead = ["K × D (through the factors)", "threads", "1 thread wall s/iter",
             "all threads wall s/iter", "speed-up", "same λ"]
    print("| " + " | ".join(thead) + " |")
    trows = threads_rows([int(v) for v in args.sizes.split(",")], args.iters)
    ihead = ["hierarchical init, K × D", "budget", "Q", "wall seconds", "rel. error",
             "global iterations"]
    if args.init_size:
        print("| " + " | ".join(ihead) + " |")
    table = (markdown_table(head, rows) + "\n\n" + markdown_table(FLOP_HEAD, frows) + "\n\n"
             + markdown_table(thead, trows))
    if args.init_size:
        table += "\n\n" + markdown_table(ihead, init_row(args.init_size))
    print(table)
    if args.markdown:
        write_page("palm4msa", "palm4MSA through the sparse factors", table, notes=SPEED_NOTES)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--speed", action="store_true",
                    help="per-iteration time, through the factors vs the dense reference")
    ap.add_argument("--sizes", default="512,1024,2048", help="K = D sizes for --speed")
    ap.add_argument("--iters", type=int, default=3, help="palm4MSA iterations timed per size")
    ap.add_argument("--init-size", type=int, default=1024,
                    help="K = D of the hierarchical init row of --speed (0: skip)")
    from _report import add_markdown_option
    add_markdown_option(ap)
    ap.add_argument("--quick", action="store_true", help="digits target, s=5, 50 iterations")
    ap.add_argument("--hadamard", action="store_true", help="only the Hadamard factorisations")
    ap.add_argument("--targets", default="digits,blobs,hadamard",
                    help="comma-separated: digits, blobs, hadamard")
    ap.add_argument("--algos", default="palm4msa,hierarchical",
                    help="comma-separated: palm4msa, hierarchical")
    ap.add_argument("--slow-pyfaust", action="store_true",
                    help="also run pyfaust's hierarchical on the 256x2048 target (~30 min each "
                         "on the 2-core machine; skipped by default)")
    ap.add_argument("--sparsities", default="5,3", help="comma-separated splincol s values")
    ap.add_argument("--no-pyfaust", action="store_true",
                    help="dqkm only; time ratios against the PYFAUST_RECORDED figures")
    args = ap.parse_args()
    if args.speed:
        speed_main(args, None if args.no_pyfaust else load_pyfaust())
        return
    if args.hadamard:
        hierarchical_palm4msa(np.eye(8), n_iter=2)
        hadamard_rows([7] if args.quick else [7, 8])
        return
    n_iter = 50 if args.quick else 300
    pf = None if args.no_pyfaust else load_pyfaust()
    wanted = args.targets.split(",")
    targets = []
    if "digits" in wanted:
        targets.append(("digits 128x784", digits_centroids()))
    if "blobs" in wanted and not args.quick:
        targets.append(("blobs 256x2048", blob_centres()))
    sparsities = [5] if args.quick else [int(v) for v in args.sparsities.split(",")]
    print(f"threads: OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}; n_iter={n_iter}; "
          f"Q = ceil(log2 max(K, D)) = {[math.ceil(math.log2(max(A.shape))) for _, A in targets]}")
    print(HEADER)
    print("|---" * (HEADER.count("|") - 1) + "|")
    # load numba's cached kernels before timing (pyfaust has nothing to compile)
    hierarchical_palm4msa(np.eye(8), n_iter=2)
    rows = []
    for label, A in targets:
        for algo in [a for a in ("palm4msa", "hierarchical") if a in args.algos.split(",")]:
            for s in sparsities:
                run(label, A, algo, s, n_iter, pf, rows, args.slow_pyfaust)
    if "hadamard" in wanted or args.quick:
        print()
        hadamard_rows([7] if args.quick else [7, 8])


if __name__ == "__main__":
    main()
