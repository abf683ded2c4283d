"""K-Multiple-Means: F-KMM (``solver='fast'``) vs the SVD reference (``solver='svd'``),
plus scikit-learn's SpectralClustering and DBSCAN as peers.

Both solvers start from the same prototypes (same ``random_state``) and run the
same number of outer iterations, so their labels must be identical; the table
prints seconds, the ratio, NMI against the ground truth, whether the labels
agree, the share of the point–prototype pairs of all passes that got no exact
distance (the paper's Fig. 6 measures the rank-d′ lower bound of Lemma 4.10
alone; here it also counts dqkm's exact skips of other components' prototypes
and of rows whose kept prototypes provably hold the neighbours —
docs/ALGORITHMS.md) and the eigenpairs computed vs the naive count
(Lemma 4.3/4.5, Fig. 4).  Run:

    .venv/bin/python benchmarks/bench_kmm.py            # n = 10k and 100k
    .venv/bin/python benchmarks/bench_kmm.py --quick    # n = 10k only (and a smaller 'svd' run)
    .venv/bin/python benchmarks/bench_kmm.py --dense-reference   # + the dense-SVD reference at 100k
    .venv/bin/python benchmarks/bench_kmm.py --search   # the neighbour search alone (m <= 300)
    .venv/bin/python benchmarks/bench_kmm.py --search --baseline   # ... beside the pre-split code

With ``--markdown`` an end-to-end run writes ``docs/benchmarks/kmm.md`` and a
``--search`` run ``docs/benchmarks/kmm_search.md``.

The reference's SVD of S̃ (``svd_algorithm``): at n = 10k and on digits the
default ('auto') is the dense LAPACK SVD, the paper's original KMM.  At n = 100k
the reference runs with ARPACK ('arpack', sparse S̃) and, with
``--dense-reference``, also with the dense SVD ('dense': the paper's original,
a 100k × 1000 dense S̃ of 800 MB per F update, several minutes); both ratios to
F-KMM are measured in the same run.

Threads: chunks run on the threaded scheduler (one thread per core) for every
method.  F-KMM and the peers run with BLAS limited to ``--blas-threads``
(default 1: F-KMM's work is in the chunks, and BLAS threads inside them only
oversubscribe the cores).  The reference's work is the SVD of S̃ on the driver,
while no chunk runs, so it gets ``--reference-blas-threads`` (default: every
core) — each side in its best setting on the same cores.  ``--reference-blas-threads
1`` gives the single-threaded SVD of earlier tables.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from sklearn.datasets import load_digits, make_blobs, make_moons  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.metrics import adjusted_rand_score  # noqa: E402
from sklearn.metrics import normalized_mutual_info_score as nmi  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

import dqkm  # noqa: E402

from _report import (add_markdown_option, capture_stdout,  # noqa: E402
                     printed_as_markdown, write_page)

NOTES = ("F-KMM (`solver='fast'`) against the original KMM (`solver='svd'`) and scikit-learn "
         'peers on the same data: seconds, ratio, NMI, whether the labels are identical, and '
         'the noisy-moons outlier table.')


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def f_stats(est):
    return (sum(h["spectral_seconds"] for h in est.history_),
            sum(h["f_updates"] for h in est.history_))


def stats(est):
    ex = sum(h["distances_exact"] for h in est.history_)
    tot = sum(h["distances_total"] for h in est.history_)
    comp = sum(h["eig_computed"] for h in est.history_)
    naive = sum(h["eig_naive"] for h in est.history_)
    steps = sum(len(h["beta_steps"]) for h in est.history_)
    return 1 - ex / max(tot, 1), comp, naive, steps


def row(name, secs, ratio, score, same, pruned, eig, steps, spec="-"):
    print(f"| {name:<34} | {secs:9.2f} | {ratio:>7} | {score:5.3f} | {same:>5} | {pruned:>7} | "
          f"{eig:>11} | {steps:>5} | {spec:>14} |", flush=True)


def header(title):
    print(f"\n{title}\n")
    print("| method                             |   seconds |   ratio |   NMI | same  | pruned  | "
          "eig (naive) | steps | F: s (updates) |")
    print("|---|---|---|---|---|---|---|---|---|")


def compare(title, X, y, c, max_iter, *, svd=("auto",), spectral=False, seed=0, ref_threads=1):
    header(title)
    kw = dict(random_state=seed, max_iter=max_iter)
    fast, t_fast = timed(lambda: dqkm.KMultipleMeans(c, solver="fast", **kw).fit(X))
    p, comp, naive, steps = stats(fast)
    sf, nf = f_stats(fast)
    row("dqkm F-KMM (solver='fast')", t_fast, "1.0", nmi(y, fast.labels_), "-",
        f"{100 * p:.1f}%", f"{comp} ({naive})", steps, f"{sf:.2f} ({nf})")
    out = {"fast": t_fast}
    for alg in svd:
        with threadpool_limits(limits=ref_threads, user_api="blas"):
            ref, t_ref = timed(lambda: dqkm.KMultipleMeans(  # noqa: B023
                c, solver="svd", svd_algorithm=alg, **kw).fit(X))
        same = adjusted_rand_score(fast.labels_, ref.labels_) == 1.0
        _, _, _, steps_r = stats(ref)
        sr, nr = f_stats(ref)
        name = "reference (solver='svd')" if alg == "auto" else f"reference, {alg} SVD"
        row(f"dqkm KMM {name}", t_ref, f"{t_ref / t_fast:.1f}x", nmi(y, ref.labels_),
            "yes" if same else "NO", "0%", "SVD", steps_r, f"{sr:.2f} ({nr})")
        out[alg] = {"seconds": t_ref, "spectral": sr, "updates": nr, "same": same}
    if spectral:
        from sklearn.cluster import SpectralClustering

        sc, t_sc = timed(lambda: SpectralClustering(c, affinity="nearest_neighbors",
                                                    random_state=seed).fit(X))
        row("sklearn SpectralClustering (kNN)", t_sc, f"{t_sc / t_fast:.1f}x", nmi(y, sc.labels_),
            "-", "-", "-", "-")
    return out


NOISE_BOXES = {"wide [-3, 4] x [-2.5, 3]": ([-3.0, -2.5], [4.0, 3.0]),
               "tight [-1.5, 2.5] x [-1, 1.5]": ([-1.5, -1.0], [2.5, 1.5])}


def outliers(n, max_iter, seed=0):
    from sklearn.cluster import DBSCAN
    from sklearn.neighbors import NearestNeighbors

    X, y = make_moons(n, noise=0.05, random_state=seed)
    k = n // 20
    for box_name, box in NOISE_BOXES.items():
        rng = np.random.default_rng(seed)
        Xn = np.vstack([X, rng.uniform(*box, (k, 2))])
        yn = np.r_[y, np.full(k, 2)]
        is_noise = yn == 2
        print(f"\nNoisy moons: {n} points + {k} uniform noise points in the {box_name} box; "
              "outliers count as one cluster in NMI (as the paper's Table 6)\n")
        print("| method | seconds | ratio | NMI | flagged | noise recall | precision |")
        print("|---|---|---|---|---|---|---|")
        runs = []
        for label, kw in (("n_prototypes='auto'", {"n_prototypes": "auto"}),
                          ("m = ⌊√(nc)⌋, random", {})):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                od, t_od = timed(lambda: dqkm.KMultipleMeans(  # noqa: B023
                    2, detect_outliers=True, random_state=seed, max_iter=max_iter,
                    **kw).fit(Xn))
            runs.append((f"dqkm F-KMM-OD ({label})", od.labels_, t_od))

        # DBSCAN as in the paper's setup: minPts = 2d, eps = median 1-NN distance ... (here
        # the median distance to the minPts-th neighbour, which gives DBSCAN a usable radius
        # in 2-D)
        def db():
            nn = NearestNeighbors(n_neighbors=4).fit(Xn)  # noqa: B023
            eps = float(np.median(nn.kneighbors(Xn)[0][:, -1]))  # noqa: B023
            return DBSCAN(eps=eps, min_samples=4).fit(Xn)  # noqa: B023

        dbs, t_db = timed(db)
        runs.append(("sklearn DBSCAN", dbs.labels_, t_db))
        t_ref = runs[0][2]
        for name, lab, t in runs:
            lab = np.asarray(lab)
            flagged = lab == -1
            prec = (flagged & is_noise).sum() / max(flagged.sum(), 1)
            print(f"| {name} | {t:.2f} | {t / t_ref:.1f}x | {nmi(yn, lab):.3f} | "
                  f"{flagged.sum()} | {flagged[is_noise].mean():.2f} | {prec:.2f} |", flush=True)


SEARCH_CASES = (("first pass, pruned", dict(pruned=True)),
                ("seeded pass with bound, pruned", dict(pruned=True, seeded=True)),
                ("reference (every D_E)", dict(pruned=False)))


def search_times(n=20_000, d=32, ms=(100, 300), mode=0, repeats=5, seed=0):
    """Median seconds of ``nearest_prototypes`` (l = 5, K = 11) per case and m, with
    the kernels already compiled: ``{(case, m): (wall, cpu, n_exact)}`` (``cpu``: the
    calling thread's CPU time, which the search runs in; on a shared machine it
    varies far less than the wall time).  Reads only the public names of
    ``dqkm.kernels.kmm``, so the same function times any version of the search
    (:func:`baseline_search_times` runs it on an earlier revision)."""
    from dqkm.kernels.kmm import SpectralTerm, nearest_prototypes, project
    from dqkm.kernels.kmm_init import svd_basis

    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((10, d)) * 5
    X = (centers[rng.integers(0, 10, n)] + rng.standard_normal((n, d))).astype(np.float32)
    out = {}
    for m in ms:
        A = X[rng.choice(n, m, replace=False)].astype(np.float64)
        term = SpectralTerm.none(n, m)
        mu, V = svd_basis(A, 5)
        lb = project(X, mu, V) + project(A, mu, V)
        first = nearest_prototypes(X, A, 5, term, pruned=True, lb=lb, n_keep=11)
        moved = A + 0.01 * rng.standard_normal(A.shape)
        lb2 = project(X, mu, V) + project(moved, mu, V)
        mv = np.sqrt(((moved - A) ** 2).sum(1))
        for name, kw in SEARCH_CASES:
            if kw.get("seeded"):
                call = lambda: nearest_prototypes(  # noqa: E731
                    X, moved, 5, term, pruned=True, lb=lb2, n_keep=11,  # noqa: B023
                    seeds=first.keep, bound=first.low, moves=mv)  # noqa: B023
            else:
                call = lambda kw=kw: nearest_prototypes(  # noqa: E731
                    X, A, 5, term, pruned=kw["pruned"], lb=lb, n_keep=11)  # noqa: B023
            res = call()  # compiled (and warm) before timing
            wall, cpu = [], []
            for _ in range(repeats):
                t0, c0 = time.perf_counter(), time.thread_time()
                call()
                cpu.append(time.thread_time() - c0)
                wall.append(time.perf_counter() - t0)
            out[(name, m)] = (float(np.median(wall)), float(np.median(cpu)), int(res.n_exact))
    return out


#: the code before dqkm/kernels/kmm.py was split into modules (the parent of the
#: commit that split it): the baseline of ``--search``
PRE_SPLIT = "76a7142e9b1c53a1ee9692ed6b1c718cf402e31d^"

_BASELINE_RUN = """
import json, sys
sys.path.insert(0, {root!r})
import dqkm
assert dqkm.__file__.startswith({root!r}), dqkm.__file__
sys.path.insert(1, {bench!r})
from threadpoolctl import threadpool_limits
import bench_kmm
with threadpool_limits(limits=1, user_api="blas"):
    out = bench_kmm.search_times(n={n}, ms={ms!r})
print(json.dumps([[k[0], k[1], *v] for k, v in out.items()]))
"""


def export_revision(rev, dest):
    """Writes the ``dqkm`` package of git revision ``rev`` under ``dest``."""
    import io
    import subprocess
    import tarfile

    repo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    tar = subprocess.run(["git", "-C", repo, "archive", "--format=tar", rev, "dqkm"],
                         capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as f:
        f.extractall(dest, filter="data")


def baseline_search_times(root, n, ms):
    """:func:`search_times` (this file's) on the ``dqkm`` under ``root``, in a fresh
    process (the package name is taken); its numba cache is kept under ``root``."""
    import json
    import subprocess

    code = _BASELINE_RUN.format(root=root, bench=os.path.dirname(os.path.abspath(__file__)),
                                n=n, ms=tuple(ms))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          check=True)
    return {(name, m): tuple(v) for name, m, *v in json.loads(done.stdout.splitlines()[-1])}


def search_table(n=20_000, ms=(100, 300), baseline=None, rounds=2):
    """Prints the neighbour-search table (ms per call, pairs computed); with a git
    ``baseline`` revision, that code's times beside this one's, measured in
    alternation over ``rounds`` rounds (the least median of each is kept)."""
    import tempfile

    print(f"\nNeighbour search alone: nearest_prototypes, n = {n}, d = 32, β = 0, l = 5, "
          "K = 11; median of 5 calls (compiled), the least over the rounds; CPU: the "
          "calling thread's CPU time\n")
    if baseline is None:
        print("| case | m | ms per call (CPU) | ms per call (wall) | ns per row (CPU) | exact D_E |")
        print("|---|---|---|---|---|---|")
        for (name, m), (t, c, ex) in search_times(n=n, ms=ms).items():
            print(f"| {name} | {m} | {1e3 * c:.2f} | {1e3 * t:.2f} | {1e9 * c / n:.0f} | {ex} |",
                  flush=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        export_revision(baseline, tmp)
        base, now = {}, {}
        for _ in range(rounds):
            for res, get in ((base, lambda: baseline_search_times(tmp, n, ms)),  # noqa: B023
                             (now, lambda: search_times(n=n, ms=ms))):
                for key, v in get().items():
                    res[key] = tuple(min(a, b) for a, b in zip(res.get(key, v), v))
    print(f"baseline: `{baseline}`, {rounds} rounds\n")
    print("| case | m | baseline ms (CPU) | now ms (CPU) | now / baseline (CPU) | "
          "baseline ms (wall) | now ms (wall) | exact D_E (same) |")
    print("|---|---|---|---|---|---|---|---|")
    for key, (t, c, ex) in now.items():
        bt, bc, bex = base[key]
        print(f"| {key[0]} | {key[1]} | {1e3 * bc:.1f} | {1e3 * c:.1f} | {c / bc:.2f}x | "
              f"{1e3 * bt:.1f} | {1e3 * t:.1f} | {ex} ({'yes' if ex == bex else 'NO'}) |",
              flush=True)


SEARCH_NOTES = (
    "`nearest_prototypes` on float32 blobs (`search_times` of `benchmarks/bench_kmm.py`): the "
    "first pruned pass, a seeded pass with the previous pass's bound after the prototypes "
    "moved a little, and the reference that computes every D_E.  The ratio uses the CPU time "
    "of the calling thread (the search runs in it), which a shared machine disturbs far less "
    "than the wall time; both are printed.")

SEARCH_BASELINE_NOTES = (
    "The baseline revision's `dqkm/` is exported to a temporary directory and timed in its own "
    "process by the same function, in alternation with the checked-out code; each time is "
    "the least, over the rounds, of the median of 5 calls.  The exact-distance counts must be "
    "equal: the search is the same, only its code moved.")

#: the last run at full size (n = 100k, with the dense-SVD reference): the commit whose
#: page held its table, and the commit of the code it measured
FULL_SIZE_COMMAND = ("OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python benchmarks/bench_kmm.py "
                     "--dense-reference")
FULL_SIZE_PAGE = ("docs/benchmarks/index.md", "5ebfbc7", "9336b9b", "2026-11-24")

LOAD_NOTES = (
    "The reference's SVD runs on the driver with BLAS on every core "
    "(`--reference-blas-threads`): of all the timings it suffers most when other processes "
    "share the cores, so on a loaded machine (see the load average above) its ratio to "
    "F-KMM is far above an idle machine's; the label columns (\"same\", NMI) do not depend "
    "on the load.")


def page_notes(args):
    """The prose of the end-to-end page: what is measured, the sizes this run covers and,
    unless it is the full-size run, where the last full-size table is."""
    sizes = ("blobs at n = 10k, digits, noisy moons of 2,000 points and the neighbour search "
             "at n = 10k" if args.quick else
             "blobs at n = 10k and 100k, digits, noisy moons of 10,000 points and the "
             "neighbour search at n = 20k")
    parts = [NOTES, LOAD_NOTES, f"This run covers {sizes}."]
    if args.quick or not args.dense_reference:
        path, page_commit, code_commit, date = FULL_SIZE_PAGE
        parts.append(
            f"The full-size run, `{FULL_SIZE_COMMAND}`, adds n = 100k with both the ARPACK and "
            "the dense-SVD reference (the paper's original KMM, several minutes per run); it "
            "takes longer than a shared 2-core machine allows, and its last table is in git "
            f"history: `{path}` at commit {page_commit} (measured on the code of commit "
            f"{code_commit}, {date}).  On that older code, at n = 100k, F-KMM was 70× faster "
            "than the dense-SVD reference and 5.2× faster than the ARPACK one, with identical "
            "labels.")
    return "\n\n".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--blas-threads", type=int, default=1,
                    help="BLAS threads for F-KMM and the peers (default 1)")
    ap.add_argument("--reference-blas-threads", type=int, default=os.cpu_count(),
                    help="BLAS threads for the reference's SVD (default: every core)")
    ap.add_argument("--max-iter", type=int, default=5)
    ap.add_argument("--dense-reference", action="store_true",
                    help="at n = 100k also run the reference with the dense SVD (the paper's "
                         "original KMM; ~800 MB, several minutes)")
    ap.add_argument("--search", action="store_true",
                    help="only the neighbour-search table (nearest_prototypes, m <= 300); "
                         "with --markdown it writes its own page, docs/benchmarks/"
                         "kmm_search.md")
    ap.add_argument("--baseline", nargs="?", const=PRE_SPLIT, default=None, metavar="REV",
                    help="with --search: time the search of git revision REV too (default: "
                         "the code before the K-Multiple-Means split), in alternation")
    ap.add_argument("--rounds", type=int, default=2,
                    help="with --baseline: rounds of alternation (default 2)")
    add_markdown_option(ap)
    args = ap.parse_args()
    with capture_stdout() as out:
        _run(args)
    if args.markdown and args.search:
        notes = SEARCH_NOTES + ("\n\n" + SEARCH_BASELINE_NOTES if args.baseline else "")
        write_page("kmm_search", "K-Multiple-Means: the neighbour search alone",
                   printed_as_markdown(out.getvalue(), fenced=False), notes=notes)
    elif args.markdown:
        write_page("kmm", "K-Multiple-Means: F-KMM against the original KMM",
                   printed_as_markdown(out.getvalue(), fenced=False), notes=page_notes(args))


def _run(args):
    if args.search:
        print(f"bench_kmm --search: BLAS threads {args.blas_threads}, cores {os.cpu_count()}")
        with threadpool_limits(limits=args.blas_threads, user_api="blas"):
            return search_table(baseline=args.baseline, rounds=args.rounds)
    print(f"bench_kmm: quick={args.quick}, dense_reference={args.dense_reference}, "
          f"max_iter={args.max_iter}, BLAS threads {args.blas_threads} (reference: "
          f"{args.reference_blas_threads}), cores {os.cpu_count()}")
    with threadpool_limits(limits=args.blas_threads, user_api="blas"):
        Xw, yw = make_blobs(300, 8, centers=3, random_state=0)
        dqkm.KMultipleMeans(3, random_state=0, max_iter=2).fit(Xw)  # numba warm-up
        dqkm.KMultipleMeans(3, random_state=0, max_iter=2, solver="svd").fit(Xw)
        sizes = [10_000] if args.quick else [10_000, 100_000]
        runs = {}
        for n in sizes:
            X, y = make_blobs(n, 32, centers=10, cluster_std=5.0, random_state=0)
            X = X.astype(np.float32)
            m = int(np.sqrt(n * 10))
            if n * m <= 40_000_000:
                algs, kind = ("auto",), "dense LAPACK ('auto')"
            else:
                algs = ("arpack", "dense") if args.dense_reference else ("arpack",)
                kind = " and ".join(algs)
            runs[n] = compare(f"Blobs n = {n}, d = 32, c = 10 (cluster_std 5: the β = 0 graph is "
                              f"connected, b = 1), m = {m}, l = 5, d′ = 5, {args.max_iter} outer "
                              f"iterations; reference SVD: {kind}", X, y, 10, args.max_iter,
                              svd=algs, spectral=n <= 10_000,
                              ref_threads=args.reference_blas_threads)
        big = runs.get(100_000)
        if big:
            print()
            for alg, what in (("dense", "dense LAPACK SVD of S̃ per F update (the paper's "
                                        "original KMM)"),
                              ("arpack", "ARPACK SVD of the sparse S̃ per F update")):
                if alg in big:
                    r = big[alg]
                    print(f"n = 100k: reference with the {what}: {r['seconds']:.1f} s "
                          f"(F: {r['spectral']:.1f} s in {r['updates']} updates), measured: "
                          f"{r['seconds'] / big['fast']:.1f}x F-KMM's {big['fast']:.1f} s; "
                          f"labels identical: {'yes' if r['same'] else 'NO'}.")
        X, y = load_digits(return_X_y=True)
        compare(f"Digits n = 1797, d = 64, c = 10, m = 134, {args.max_iter} outer iterations",
                X, y, 10, args.max_iter, ref_threads=args.reference_blas_threads)
        outliers(2_000 if args.quick else 10_000, args.max_iter)
        search_table(n=10_000 if args.quick else 20_000)


if __name__ == "__main__":
    main()
