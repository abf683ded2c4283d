"""K-Multiple-Means neighbour search, compiled: the rows of one search, one by one.

The inputs come as named tuples (:class:`RowSide`, :class:`ProtoSide`,
:class:`SearchRule`) laid out by :func:`dqkm.kernels.kmm_neighbors.neighbor_problem`.
:func:`neighbors_kernel` unpacks them once and :func:`_search_rows` runs the row
loop.  Reference counts are what a per-row function costs when the work per row is
small (a seeded pass that skips the scan): a tuple holding arrays costs one per
array each time it is passed or read, and an inlined call copies each array
argument (one up and one down).  So the loop calls each per-row function with only
the arrays it reads, per-prototype values reach the element-wise routines as
scalars (:func:`~dqkm.kernels.kmm_distances._df_scalar`), the insertion into the
K nearest is written out where it runs per candidate, and only tuples of scalars
(:class:`SearchRule`, :class:`_Point`) are passed on.  Each row scans its seeds
(:func:`_given_seeds`, or the K smallest bounds), then the candidate lists made
from the lower bounds (:func:`_list_range`, :func:`_bounded_list`) or from the
prototypes that moved (:func:`_movers_list`).  The exact distance is computed in
one place (in :func:`_scan_list`), so both solvers run the same machine code and
a pair computed by both gets the same bits.

All kernels are pure: inputs are never mutated; buffers written in place are
marked ``# OUT``.

References
----------
Y. Fujiwara et al., *Efficient Algorithm for K-Multiple-Means*, SIGMOD 2024
(eqs. 32, 50, 56, 57; Lemma 4.10; Algorithm 3).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from .kmm_distances import _bounds_range, _df_range, _df_scalar, _dot_one, _row_dot, _sqdist

__all__ = ["ProtoSide", "RowSide", "SearchRule", "Outputs", "neighbors_kernel"]


class RowSide(NamedTuple):
    """The rows' side of a search, one entry per row (read by the compiled kernel).

    ``X`` the rows (float32/64); ``skip`` rows left out; ``pcomp``/``pinv`` the
    row's component and 1/n_k; ``F``/``f2`` its columns of F and ‖f‖²;
    ``xt``/``xtn``/``xperp``/``xn2`` its projection (Definition 4.9), ‖x̃‖²,
    residual norm and ‖x − μ‖²; ``seeds`` (n, K) positions or (n, 0);
    ``prev_low`` the previous pass's bound on D_E outside the seeds.
    """

    X: np.ndarray
    skip: np.ndarray
    pcomp: np.ndarray
    pinv: np.ndarray
    F: np.ndarray
    f2: np.ndarray
    xt: np.ndarray
    xtn: np.ndarray
    xperp: np.ndarray
    xn2: np.ndarray
    seeds: np.ndarray
    prev_low: np.ndarray


class ProtoSide(NamedTuple):
    """The prototypes' side, in the order ``perm`` (``perm[p]``: the original index
    of position p).

    ``A`` the prototypes (float64); ``qcomp``/``qinv`` component and 1/n_k;
    ``GT``/``g2`` their side of F (transposed) and ‖g‖²; ``atT``/``atn``/
    ``aperp``/``an2`` the projection (transposed) and its norms; with
    ``comp_lo.size > 0`` the prototypes of component k are the positions
    [comp_lo[k], comp_hi[k]) and ``cross_min[k]`` bounds from below the
    point-independent part of D_F to every prototype outside k;
    ``mv_delta`` the prototypes' moves, descending, at positions ``mv_order``.
    """

    A: np.ndarray
    qcomp: np.ndarray
    qinv: np.ndarray
    GT: np.ndarray
    g2: np.ndarray
    atT: np.ndarray
    atn: np.ndarray
    aperp: np.ndarray
    an2: np.ndarray
    perm: np.ndarray
    comp_lo: np.ndarray
    comp_hi: np.ndarray
    cross_min: np.ndarray
    mv_order: np.ndarray
    mv_delta: np.ndarray


class SearchRule(NamedTuple):
    """The D_F rule (``mode``, ``beta``), the solver (``pruned``), the bound's slack
    (``margin``), L = l + 1 neighbours and K ≥ L kept."""

    mode: int
    beta: float
    pruned: bool
    margin: float
    n_nearest: int
    n_keep: int


class _Point(NamedTuple):
    """One row's constants: its index, component, 1/n_k, ‖f‖², its ‖x̃‖² less the
    slack, and its residual norm (scalars only: free to pass around)."""

    i: int
    ci: int
    pi: float
    f2i: float
    xi: float
    xp: float


class Outputs(NamedTuple):
    """The search's outputs (see :class:`~dqkm.kernels.kmm_neighbors.NeighborResult`)."""

    idx: np.ndarray
    dist: np.ndarray
    de: np.ndarray
    keep: np.ndarray
    low: np.ndarray


# --------------------------------------------------------------------------- lists
# An inlined call copies each array argument (a reference count up and down per
# call), so the per-row functions take only the arrays they use, the kernel calls
# them with plain arrays, and the per-prototype values reach the element-wise
# routines as scalars.  With β = 0 (mode 0) β·D_F stays 0: ``dfv`` starts as zeros
# and nothing computes it.
@njit(cache=True, nogil=True, inline="always")
def _df_list(F, GT, qcomp, qinv, g2, dfv, cand, lo, n_cand, rule, pt):  # OUT dfv
    """β·D_F of the listed prototypes ``cand[lo:n_cand]``, one by one: the same
    operations as a range (same bits)."""
    use_f = rule.mode == 2 or rule.mode == 3
    for u in range(lo, n_cand):
        j = cand[u]
        fgj = _dot_one(F, pt.i, GT, j) if use_f else 0.0
        dfv[j] = _df_scalar(rule.mode, rule.beta, pt.ci, pt.pi, pt.f2i, qcomp[j], qinv[j], fgj,
                            g2[j])


@njit(cache=True, nogil=True, inline="always")
def _list_range(F, GT, qcomp, qinv, g2, xt, atT, atn, aperp, an2, fg, dfv, xa, lbm, seedP, cand,
                rule, pt, thr, n_cand, lo, hi):  # OUT fg, dfv, xa, lbm, cand
    """β·D_F and the bounds for the positions [lo, hi); appends to ``cand`` (from
    ``n_cand``) those, not seeds, whose bound is ≤ ``thr``; returns the new count."""
    if hi <= lo:
        return n_cand
    if rule.mode != 0:
        if rule.mode == 2 or rule.mode == 3:
            _row_dot(F, pt.i, GT, fg, lo, hi)
        _df_range(rule.mode, rule.beta, pt.ci, pt.pi, pt.f2i, qcomp, qinv, fg, g2, dfv, lo, hi)
    _row_dot(xt, pt.i, atT, xa, lo, hi)
    _bounds_range(pt.xi, pt.xp, xa, atn, aperp, an2, dfv, rule.margin, lbm, lo, hi)
    for k in range(seedP.shape[0]):  # seeds are computed already
        if lo <= seedP[k] < hi:
            lbm[seedP[k]] = np.nan  # NaN <= thr is False
    for j in range(np.uint64(lo), np.uint64(hi)):  # branch-free list
        cand[n_cand] = j
        n_cand += lbm[j] <= thr
    return n_cand


@njit(cache=True, nogil=True, inline="always")
def _bounded_list(lbm, cand, thr, m):  # OUT cand
    """Every position whose bound (computed for all m) is ≤ ``thr``; their count."""
    n_cand = 0
    for j in range(m):
        cand[n_cand] = j
        n_cand += lbm[j] <= thr
    return n_cand


@njit(cache=True, nogil=True, inline="always")
def _smallest_bounds(lbm, seedD, seedP, m):  # OUT seedD, seedP
    """The positions of the K smallest bounds, ordered by (bound, position), into
    ``seedP`` (:func:`~dqkm.kernels.kmm_distances._insert`'s order and loop, written
    out: an inlined call would copy its arrays for each insertion)."""
    K = seedP.shape[0]
    for k in range(K):
        seedD[k] = np.inf
        seedP[k] = m
    for j in range(m):
        v = lbm[j]
        if v < seedD[K - 1] or (v == seedD[K - 1] and j < seedP[K - 1]):
            k = K - 1
            while k > 0 and (seedD[k - 1] > v or (seedD[k - 1] == v and seedP[k - 1] > j)):
                seedD[k], seedP[k] = seedD[k - 1], seedP[k - 1]
                k -= 1
            seedD[k], seedP[k] = v, j


@njit(cache=True, nogil=True, inline="always")
def _given_seeds(seeds, seedP, i, m):  # OUT seedP
    """Stage 0 with the row's seeds in ``seedP`` when it has K valid ones, else
    stage 1 with ``seedP`` emptied (the K smallest bounds will be the seeds)."""
    K = seedP.shape[0]
    given = seeds.shape[1] == K
    if given:
        for k in range(K):
            if seeds[i, k] < 0 or seeds[i, k] >= m:
                given = False
    for k in range(K):
        seedP[k] = seeds[i, k] if given else m
    return 0 if given else 1


@njit(cache=True, nogil=True, inline="always")
def _seed_list(seedP, lbm, cand, stage, m):  # OUT lbm, cand
    """The seeds as the first list, each once; at stage 1 their bounds are marked
    (NaN) so that the bound lists do not take them again."""
    n_seed = 0
    for k in range(seedP.shape[0]):
        j = seedP[k]
        rep = j >= m
        for kk in range(k):
            rep = rep or seedP[kk] == j
        if not rep:  # a repeated seed is computed once
            if stage == 1:
                lbm[j] = np.nan
            cand[n_seed] = j
            n_seed += 1
    return n_seed


@njit(cache=True, nogil=True, inline="always")
def _movers(E, thr_l, mv_delta, margin, m):
    """``(n_mv, track)``: the previous bound says every other prototype had D_E ≥ E;
    moved by δ_j it has √D_E ≥ √E − δ_j, so it can only be among the l + 1 nearest
    (D ≥ D_E ≤ ``thr_l``, the (l+1)-th D of the seeds) if δ_j ≥ √E − √thr_l: only
    those n_mv "movers" need a distance, and ``track`` bounds D_E for the others.
    n_mv = −1 when the row must scan."""
    if E > 0.0 and E < np.inf and thr_l < np.inf:
        g = np.sqrt(E) * (1.0 - margin) - np.sqrt(thr_l) * (1.0 + margin)
        if g > 0.0:
            n_mv = 0
            while n_mv < m and mv_delta[n_mv] * (1.0 + margin) >= g:
                n_mv += 1
            if 4 * n_mv <= m:
                d_rest = mv_delta[n_mv] * (1.0 + margin) if n_mv < m else 0.0
                r = np.sqrt(E) * (1.0 - margin) - d_rest
                return n_mv, r * r * (1.0 - margin)  # bound for the non-movers
    return -1, 0.0


@njit(cache=True, nogil=True, inline="always")
def _movers_list(seedP, cand, mv_order, n_mv):  # OUT cand
    """The movers that are not seeds; their count."""
    n_cand = 0
    for u in range(n_mv):
        q = mv_order[u]
        rep = False
        for kk in range(seedP.shape[0]):
            rep = rep or seedP[kk] == q
        if not rep:
            cand[n_cand] = q
            n_cand += 1
    return n_cand


@njit(cache=True, nogil=True, inline="always")
def _cross_exceeds(rule, pt, cross_min_ci, thr):
    """Whether β·(the least D_F to another component) alone exceeds ``thr``."""
    cross = rule.beta * (0.5 * pt.pi + cross_min_ci + (pt.f2i if rule.mode == 2 else 0.0))
    return cross * (1.0 - rule.margin) > thr


# --------------------------------------------------------------------------- scan
@njit(cache=True, nogil=True, inline="always")
def _refilter(cand, lbm, t, n_cand, thr):  # OUT cand[t:]
    """Drops the candidates left (from ``t``) whose bound exceeds ``thr``
    (branch-free); returns the new count."""
    kept = t
    for u in range(t, n_cand):
        cand[kept] = cand[u]
        kept += lbm[cand[u]] <= thr
    return kept


@njit(cache=True, nogil=True, inline="always")
def _scan_list(A, perm, xi64, dfv, lbm, cand, topD, topJ, topE, rule, n_cand, thr,
               track):  # OUT cand, topD, topJ, topE
    """Exact distances for one candidate list (made with the threshold ``thr``);
    ``(n_exact, track)``, ``track`` the bound on D_E of the pairs not kept."""
    K = rule.n_keep
    m = A.shape[0]
    margin = rule.margin
    t = 0
    n_exact = 0
    while t < n_cand:
        if rule.pruned and t >= 32 and (t & (t - 1)) == 0 and topD[K - 1] < thr:
            # the K-th D has dropped since the list was made: drop the candidates left
            # whose bound now exceeds it (any threshold >= the final K-th D is safe)
            thr = topD[K - 1]
            n_cand = _refilter(cand, lbm, t, n_cand, thr)
            if t >= n_cand:
                break
        # the exact distance (the only call of _sqdist) and its place among the K nearest
        p = cand[t]
        j = perm[p]
        e = _sqdist(xi64, A, p)
        n_exact += 1
        D = e + dfv[p]
        if D < topD[K - 1] or (D == topD[K - 1] and j < topJ[K - 1]):
            if topJ[K - 1] < m:  # the K-th leaves the kept ones: the bound covers it
                track = min(track, topE[K - 1] * (1.0 - margin))
            # _insert's loop, written out: an inlined call would copy the three arrays
            k = K - 1
            while k > 0 and (topD[k - 1] > D or (topD[k - 1] == D and topJ[k - 1] > j)):
                topD[k], topJ[k], topE[k] = topD[k - 1], topJ[k - 1], topE[k - 1]
                k -= 1
            topD[k], topJ[k], topE[k] = D, j, e
        else:
            track = min(track, e * (1.0 - margin))
        t += 1
    return n_exact, track


@njit(cache=True, nogil=True, inline="always")
def _low_after_scan(dfv, h, margin, m):
    """A scanned row's bound on D_E outside its K nearest: every other prototype has
    D ≥ the K-th D ``h``, and D_E = D − β·D_F ≥ h − max β·D_F (all m computed)."""
    mx = 0.0
    for j in range(m):
        mx = max(mx, dfv[j])
    return (h - mx) - margin * (abs(h) + mx)


@njit(cache=True, nogil=True, inline="always")
def _skipped_row(idx, dist, de, keep, i):  # OUT idx, dist, de, keep [i]
    """A row left out: no neighbours."""
    for k in range(idx.shape[1]):
        idx[i, k] = -1
        dist[i, k] = np.inf
        de[i, k] = np.inf
    for k in range(keep.shape[1]):
        keep[i, k] = -1


@njit(cache=True, nogil=True)
def neighbors_kernel(rows, protos, rule, out):  # OUT out
    """Every row of ``rows`` (ties and the outputs use the original prototype
    indices; ``seeds`` are positions); returns the number of exact D_E.

    The tuples are unpacked here, once per call, and the buffers made; the rows
    are searched by :func:`_search_rows`.
    """
    n, d = rows.X.shape
    m = protos.A.shape[0]
    K = rule.n_keep
    # the row's buffers: the K nearest so far (D, index, D_E), the seeds, the row in
    # float64, and per prototype f·g, β·D_F (0 with β = 0), x̃·ã, the bound, the list
    top = (np.empty(K), np.empty(K, np.int64), np.empty(K))
    seed = (np.empty(K), np.empty(K, np.int64))
    buf = (np.empty(d), np.empty(m), np.zeros(m), np.empty(m), np.empty(m), np.empty(m, np.int64))
    return _search_rows(
        rows.X, rows.skip, rows.pcomp, rows.pinv, rows.f2, rows.xtn, rows.xperp, rows.xn2,
        rows.seeds, rows.prev_low, protos.A, protos.perm, protos.comp_lo, protos.comp_hi,
        protos.cross_min, protos.mv_order, protos.mv_delta, rule,
        (rows.F, protos.GT, protos.qcomp, protos.qinv, protos.g2),
        (rows.xt, protos.atT, protos.atn, protos.aperp, protos.an2), top, seed, buf, out)


@njit(cache=True, nogil=True)
def _search_rows(X, skip, pcomp, pinv, f2, xtn, xperp, xn2, seeds, prev_low, A, perm, comp_lo,
                 comp_hi, cross_min, mv_order, mv_delta, rule, dfs, bds, top, seed, buf,
                 out):  # OUT the buffers, out
    """The row loop: the lists of each row, scanned one after the other (stage 0:
    the given seeds, 1: the K smallest bounds, 2: the own component, 3: the last).

    Called once per search: its tuples are unpacked once, and the loop hands each
    per-row function the plain arrays it reads.
    """
    F, GT, qcomp, qinv, g2 = dfs
    xt, atT, atn, aperp, an2 = bds
    topD, topJ, topE = top
    seedD, seedP = seed
    xi64, fg, dfv, xa, lbm, cand = buf
    idx, dist, de, keep, low = out
    n, d = X.shape
    m = A.shape[0]
    K, L = rule.n_keep, rule.n_nearest
    grouped = comp_lo.shape[0] > 0
    n_exact = 0
    for i in range(n):
        low[i] = -np.inf
        if skip[i]:
            _skipped_row(idx, dist, de, keep, i)
            continue
        for k in range(K):
            topD[k], topJ[k], topE[k] = np.inf, m, np.inf
        for k in range(d):
            xi64[k] = X[i, k]
        ci = pcomp[i]
        pt = _Point(i, ci, pinv[i], f2[i], xtn[i] - rule.margin * xn2[i], xperp[i])
        lo, hi = (comp_lo[ci], comp_hi[ci]) if grouped and ci >= 0 else (0, m)
        if not rule.pruned:  # the reference: every prototype
            stage = 3
            n_cand = m
            if rule.mode != 0:
                if rule.mode == 2 or rule.mode == 3:
                    _row_dot(F, i, GT, fg, 0, m)
                _df_range(rule.mode, rule.beta, ci, pt.pi, pt.f2i, qcomp, qinv, fg, g2, dfv, 0, m)
            for j in range(m):
                cand[j] = j
        else:
            stage = _given_seeds(seeds, seedP, i, m)
            if stage == 1:  # the K smallest bounds, from all m
                _list_range(F, GT, qcomp, qinv, g2, xt, atT, atn, aperp, an2, fg, dfv, xa, lbm,
                            seedP, cand, rule, pt, -np.inf, 0, 0, m)
                _smallest_bounds(lbm, seedD, seedP, m)
            n_cand = _seed_list(seedP, lbm, cand, stage, m)
            if stage == 0 and rule.mode != 0:
                _df_list(F, GT, qcomp, qinv, g2, dfv, cand, 0, n_cand, rule, pt)
        thr, track, no_scan, stop = -np.inf, np.inf, False, False
        while True:  # the lists, one after the other
            if n_cand > 0:
                ne, track = _scan_list(A, perm, xi64, dfv, lbm, cand, topD, topJ, topE, rule,
                                       n_cand, thr, track)
                n_exact += ne
            if stage == 3:
                break
            thr = topD[K - 1]
            if stage == 1:  # bounds already computed for all m
                n_cand, stage = _bounded_list(lbm, cand, thr, m), 3
                continue
            if stage == 0:
                n_mv, bound = _movers(prev_low[i], topD[L - 1], mv_delta, rule.margin, m)
                if n_mv >= 0:  # only the movers; no bounds for this list: no re-filter
                    n_cand = _movers_list(seedP, cand, mv_order, n_mv)
                    if rule.mode != 0:
                        _df_list(F, GT, qcomp, qinv, g2, dfv, cand, 0, n_cand, rule, pt)
                    stage, thr, track, no_scan = 3, -np.inf, bound, True
                    continue
                # the own component (then stage 2, unless it is all)
                ranges, stage = (lo, hi, hi, hi), (2 if (lo > 0 or hi < m) else 3)
            else:  # the other components, unless β·D_F alone exceeds the K-th D
                stage = 3
                if _cross_exceeds(rule, pt, cross_min[ci], thr):
                    stop = True
                    break
                ranges = (0, lo, hi, m)
            n_cand = 0
            for r in range(2):  # one inlined copy of _list_range for both stages
                n_cand = _list_range(F, GT, qcomp, qinv, g2, xt, atT, atn, aperp, an2, fg, dfv,
                                     xa, lbm, seedP, cand, rule, pt, thr, n_cand, ranges[2 * r],
                                     ranges[2 * r + 1])
        if no_scan:
            low[i] = track
        elif rule.pruned and not stop and topD[K - 1] < np.inf:
            low[i] = _low_after_scan(dfv, topD[K - 1], rule.margin, m)
        for k in range(K):
            keep[i, k] = topJ[k] if topJ[k] < m else -1
            if k < L:
                idx[i, k] = keep[i, k]
                dist[i, k] = topD[k]
                de[i, k] = topE[k]
    return n_exact
