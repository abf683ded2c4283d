"""Applications: ClusterIndex queries and FactorNystroem transforms, QK-means vs K-means.

Same data, same queries for every method; the peers are measured in the same
run and the script prints ratios.  Run:

    .venv/bin/python benchmarks/bench_applications.py            # 100k × 2000, K = 512
    .venv/bin/python benchmarks/bench_applications.py --quick    # 20k × 2000, K = 128

Measured:
* query throughput (queries / s, NumPy queries, threaded scheduler) of
  ClusterIndex(KMeans), ClusterIndex(QKMeans) (n_probe = 1, or each value of
  ``--n-probes 1,2,3`` for a recall/throughput curve) and scikit-learn's
  brute-force ``NearestNeighbors`` (on a subset of the queries: it is slow),
  with recall@1 against the exact neighbour;
* FactorNystroem ``transform`` time with K-means landmarks (dense K×D) and
  QK-means landmarks (its sparse factors), and the max difference between
  their features and those of the dense form of the same landmarks.

QK-means rows appear only when ``dqkm.QKMeans`` can be fitted in this checkout.
QK-means is fitted on a sample of X (``--qk-sample`` rows) with the palm4MSA
budgets of the ``--qk-*`` options: the benchmark is about inference (the cost
of applying the factors depends on their supports, not on how well they fit);
the recall shows what the fitted factors give.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import dqkm  # noqa: E402
from dqkm import datasets  # noqa: E402
from dqkm.kernel_approximation import FactorNystroem  # noqa: E402
from dqkm.metrics import model_flops  # noqa: E402
from dqkm.neighbors import ClusterIndex  # noqa: E402

from _report import (add_markdown_option, capture_stdout,  # noqa: E402
                     printed_as_markdown, write_page)

NOTES = ("Query throughput of ClusterIndex(KMeans), ClusterIndex(QKMeans) and scikit-learn's "
         'brute-force NearestNeighbors on the same queries, with recall@1 against the exact '
         "neighbour; FactorNystroem transform time with dense K-means landmarks and QK-means's "
         'sparse factors. Ratios are measured side by side in one run.'
         " With `--centers digits` the blobs' centres are scikit-learn's 8×8 digits upsampled "
         "to `--d` pixels (centroids that compress). The sizes are on the command line: at "
         "small K and D the dense K×D product is already cheap and the factored assignment "
         "gains little or nothing; its advantage grows with K and D "
         "([Choosing an algorithm](../user_guide/choosing.md)).")


def best_time(f, repeat=2):
    best, out = np.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - t0)
    return best, out


def digit_centers(k, d, seed):
    """K distinct 8×8 digit images (scikit-learn's), bilinearly upsampled to a
    ``rows × cols`` grid with rows·cols = d (the most square one), pixel values
    0–16 shifted to mean 0 — about the spread of the uniform centres."""
    from scipy.ndimage import zoom
    from sklearn.datasets import load_digits

    imgs = load_digits().images
    if k > len(imgs):
        raise SystemExit(f"--centers digits: K = {k} > {len(imgs)} digit images")
    rows = max(r for r in range(1, int(d ** 0.5) + 1) if d % r == 0)
    cols = d // rows
    pick = np.random.default_rng(seed).choice(len(imgs), k, replace=False)
    C = np.stack([zoom(imgs[i], (rows / 8, cols / 8), order=1)[:rows, :cols].ravel()
                  for i in pick])
    return C - C.mean()


def fit_qkmeans(X, k, a):
    try:
        from dqkm.kernels import default_constraints  # noqa: F401
    except ImportError as e:
        print(f"QK-means rows missing: dqkm.QKMeans cannot be fitted in this checkout ({e}).")
        return None
    rng = np.random.default_rng(a.seed)
    Xs = X[np.sort(rng.choice(len(X), min(a.qk_sample, len(X)), replace=False))]
    t0 = time.perf_counter()
    qk = dqkm.QKMeans(k, sparsity=5, max_iter=a.qk_max_iter, palm_iter=a.qk_palm_iter,
                      palm_iter_init=a.qk_palm_iter_init, init_factorization=a.qk_init,
                      random_state=a.seed).fit(Xs)
    print(f"QKMeans fit on {len(Xs)} rows ({a.qk_init} init, {a.qk_palm_iter_init} palm4MSA "
          f"iterations, then {qk.n_iter_} × {a.qk_palm_iter}): {time.perf_counter() - t0:.1f} s, "
          f"flops {qk.factors_.flops:,} vs dense {2 * k * X.shape[1]:,}; last palm4MSA rel. "
          f"error {qk.history_[-1]['palm_error']:.3f}")
    return qk


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--n", type=int)
    p.add_argument("--d", type=int, default=2000)
    p.add_argument("--k", type=int)
    p.add_argument("--queries", type=int)
    p.add_argument("--brute-queries", type=int)
    p.add_argument("--km-max-iter", type=int, default=10)
    p.add_argument("--qk-sample", type=int, default=20_000)
    p.add_argument("--qk-max-iter", type=int, default=5)
    p.add_argument("--qk-palm-iter", type=int, default=30)
    p.add_argument("--qk-palm-iter-init", type=int, default=100)
    p.add_argument("--qk-init", default="hierarchical", choices=["hierarchical", "palm4msa"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cluster-std", type=float, default=12.0)
    p.add_argument("--centers", default="uniform", choices=["uniform", "digits"],
                   help="blob centres: 'uniform' in [-10, 10]^d (default; an unstructured "
                        "matrix), or 'digits': K of scikit-learn's 8x8 digit images upsampled "
                        "to d pixels (structured, compressible centroids, a stand-in for the "
                        "journal's image data)")
    p.add_argument("--n-probes", default="1",
                   help="comma-separated n_probe values for both indexes (recall/throughput "
                        "trade-off; the ratio line compares n_probe = the first value)")
    add_markdown_option(p)
    a = p.parse_args(argv)
    with capture_stdout() as out:
        _run(a)
    if a.markdown:
        write_page('applications', 'Applications: ClusterIndex and FactorNystroem',
                   printed_as_markdown(out.getvalue(), fenced=False),
                   notes=NOTES)


def _run(a):
    n = a.n or (20_000 if a.quick else 100_000)
    k = a.k or (128 if a.quick else 512)
    nq = a.queries or (2_000 if a.quick else 10_000)
    nb = a.brute_queries or (500 if a.quick else 1_000)
    d = a.d

    t0 = time.perf_counter()
    centers = k if a.centers == "uniform" else digit_centers(k, d, a.seed)
    X_all = datasets.make_blobs(n + nq, d, centers=centers, cluster_std=a.cluster_std, chunks=8192,
                                random_state=a.seed)[0].compute()
    X, Q = np.ascontiguousarray(X_all[:n]), np.ascontiguousarray(X_all[n:])
    del X_all
    print(f"data: X {X.shape} {X.dtype}, {nq} queries, K = {k}, {a.centers} centres, std {a.cluster_std} "
          f"({time.perf_counter() - t0:.1f} s to generate)")

    from sklearn.neighbors import NearestNeighbors

    nn = NearestNeighbors(algorithm="brute").fit(X)
    t_brute, (_, exact) = best_time(lambda: nn.kneighbors(Q[:nb], 1), repeat=1)
    exact = exact[:, 0]
    rows = [("sklearn brute force", nb / t_brute, 1.0, 2 * n * d)]

    t0 = time.perf_counter()
    km = dqkm.KMeans(k, max_iter=a.km_max_iter, random_state=a.seed).fit(X)
    print(f"KMeans fit: {time.perf_counter() - t0:.1f} s ({km.n_iter_} iterations)")
    qk = fit_qkmeans(X, k, a)

    probes = [int(v) for v in a.n_probes.split(",")]
    results = {}
    for name, model in (("KMeans", km), ("QKMeans", qk)):
        if model is None:
            continue
        idx = ClusterIndex(model).fit(X)
        t_pred, _ = best_time(lambda m=model: m.predict(Q))
        sizes = idx.cluster_sizes_.astype(np.float64)
        print(f"{name} index: largest cluster {int(sizes.max())} rows (mean {sizes.mean():.0f}); "
              f"rows scanned per query Σn_c²/n = {(sizes ** 2).sum() / sizes.sum():,.0f}")
        for n_probe in probes:
            idx.set_params(n_probe=n_probe)
            t_q, (_, ind) = best_time(lambda i=idx: i.kneighbors(Q, 1))
            recall = float(np.mean(ind[:nb, 0] == exact))
            if n_probe == probes[0]:
                results[name] = (t_q, t_pred, recall)
            label = f"ClusterIndex({name})" + (f", n_probe={n_probe}" if len(probes) > 1 else "")
            rows.append((label, nq / t_q, recall, model_flops(model)))
    print()
    print("| method | queries / s | recall@1 | flops of the assignment |")
    print("|---|---|---|---|")
    for name, qps, rec, fl in rows:
        print(f"| {name} | {qps:,.0f} | {rec:.3f} | {fl:,} |")
    for name, (t_q, t_pred, _) in results.items():
        print(f"{name}: query {t_q:.3f} s for {nq} queries, of which predict {t_pred:.3f} s")
    print(f"ratio ClusterIndex(KMeans) / brute force throughput: "
          f"{(nq / results['KMeans'][0]) / (nb / t_brute):.1f}x")
    if "QKMeans" in results:
        print(f"ratio ClusterIndex(QKMeans) / ClusterIndex(KMeans) throughput: "
              f"{results['KMeans'][0] / results['QKMeans'][0]:.2f}x; recall difference "
              f"{results['KMeans'][2] - results['QKMeans'][2]:+.3f}")

    print()
    gamma = 1.0 / float(np.median(((Q[:200, None, :] - Q[None, 200:400, :]) ** 2).sum(-1)))
    t_km, F_km = best_time(lambda: FactorNystroem(km, gamma=gamma).fit(X[:10]).transform(Q))
    print(f"FactorNystroem transform, K-means landmarks ({k}×{d} dense): {t_km:.3f} s "
          f"for {nq} rows")
    if qk is not None:
        fq = FactorNystroem(qk, gamma=gamma).fit(X[:10])
        t_qk, F_qk = best_time(lambda: fq.transform(Q))
        F_dense = FactorNystroem(qk.factors_.toarray(), gamma=gamma).fit(X[:10]).transform(Q)
        print(f"FactorNystroem transform, QK-means landmarks (factors, {qk.factors_.flops} "
              f"flops): {t_qk:.3f} s; max |Φ_factors − Φ_dense| = "
              f"{float(np.abs(F_qk - F_dense).max()):.2e}")
        print(f"ratio transform K-means / QK-means: {t_km / t_qk:.2f}x")
    else:
        print("QK-means transform rows missing (dqkm.QKMeans not available).")
    del F_km


if __name__ == "__main__":
    main()
