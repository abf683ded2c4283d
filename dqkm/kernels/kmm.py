"""K-Multiple-Means on one chunk of rows: neighbour prototypes and CAN rows of S.

Each data point x_i is connected to its ``l`` nearest prototypes under

    D[i, j] = D_E[i, j] + β·D_F[i, j]                        (Fujiwara et al., eq. 32)

with ``D_E = ‖x_i − a_j‖²`` (eq. 33) and ``D_F`` the spectral term of eq. (34),
computed by one of four rules (``mode``):

* ``MODE_NONE``  β = 0: ``D_F`` is not used (Algorithm 4, line 8);
* ``MODE_COMPONENTS``  b ≥ c: eq. (56), 0 inside a connected component,
  ½(1/n_i + 1/n_j) across components;
* ``MODE_EXTRA``  b < c, F-KMM: eq. (50) (Lemma 4.8), the first b columns of F
  in closed form, only the c − b extra columns read;
* ``MODE_FULL``  b < c, reference: eq. (11) on all c columns of F.

The weights follow the closed form of eq. (10) with the (l+1)-th distance; ties
are broken by the lower prototype index (the order is the pair ``(D, j)``).

``solver='fast'`` computes the exact ``D_E`` only where the rank-d′ SVD lower
bound of Lemma 4.10 (eq. 57), minus a floating-point margin, does not exceed the
current K-th smallest distance (Algorithm 3, with K ≥ l + 1 nearest kept for the
next pass); it skips the prototypes of other components when β·D_F alone
exceeds that distance, and a whole row when the previous pass's lower bound on
``D_E`` outside the K kept prototypes exceeds their (l+1)-th distance (dqkm's
additions, exact; docs/ALGORITHMS.md).  The reference computes every ``D_E``.
Both use the same float64 routine for an exact distance, so a pair computed by
both has bit-identical ``D_E``.

All kernels are pure: inputs are never mutated; buffers written in place are
marked ``# OUT``.

References
----------
Y. Fujiwara et al., *Efficient Algorithm for K-Multiple-Means*, SIGMOD 2024
(eqs. 10–12, 32–34, 50, 56, 57; Lemma 4.10; Algorithm 3).
F. Nie, C.-L. Wang, X. Li, *K-Multiple-Means*, KDD 2019.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

__all__ = [
    "MODE_NONE", "MODE_COMPONENTS", "MODE_EXTRA", "MODE_FULL", "LB_MARGIN",
    "NeighborResult", "SpectralTerm", "nearest_prototypes", "can_weights", "project",
    "spectral_rows",
]

MODE_NONE = 0
MODE_COMPONENTS = 1
MODE_EXTRA = 2
MODE_FULL = 3

#: relative floating-point slack of the lower bound: a pair is pruned only when
#: ``lb − LB_MARGIN·(‖x − μ‖² + ‖a − μ‖²) > current (l+1)-th distance``.
LB_MARGIN = 1e-9


@dataclass(frozen=True)
class SpectralTerm:
    """What a chunk needs to evaluate β·D_F[i, j] (eq. 34) for its rows.

    Attributes
    ----------
    mode : int
        One of ``MODE_NONE``, ``MODE_COMPONENTS``, ``MODE_EXTRA``, ``MODE_FULL``.
    beta : float
    point_comp : ndarray of shape (n_rows,), int64
        Connected component of each row (−1: none / outlier).
    point_inv_n : ndarray of shape (n_rows,)
        1/n_k of the row's component (n_k = data points in component k).
    proto_comp : ndarray of shape (m,), int64
        Component of each prototype (−1: prototype with no data point).
    proto_inv_n : ndarray of shape (m,)
        1/n_k of the prototype's component (0 for an empty prototype).
    point_f : ndarray of shape (n_rows, k)
        ``f_i/√d[i]``: the c − b extra columns (MODE_EXTRA) or all c columns
        (MODE_FULL) of F's data rows; shape (n_rows, 0) otherwise.
    proto_g : ndarray of shape (m, k)
        ``f_{n+j}/√d[n+j]`` for the same columns.
    """

    mode: int
    beta: float
    point_comp: np.ndarray
    point_inv_n: np.ndarray
    proto_comp: np.ndarray
    proto_inv_n: np.ndarray
    point_f: np.ndarray
    proto_g: np.ndarray

    @classmethod
    def none(cls, n_rows, m):
        """β = 0: the plain Euclidean neighbours (Algorithm 4, line 8)."""
        return cls(MODE_NONE, 0.0, np.full(n_rows, -1, np.int64), np.zeros(n_rows),
                   np.full(m, -1, np.int64), np.zeros(m), np.zeros((n_rows, 0)),
                   np.zeros((m, 0)))


@dataclass(frozen=True)
class NeighborResult:
    """The l+1 nearest prototypes of each row, sorted by ``(D, j)``.

    Attributes
    ----------
    indices : ndarray of shape (n_rows, l + 1), int32
        Prototype indices (−1 for skipped rows).
    distances : ndarray of shape (n_rows, l + 1), float64
        D = D_E + β·D_F of those pairs.
    exact_de : ndarray of shape (n_rows, l + 1), float64
        D_E of those pairs.
    n_exact : int
        Number of exact D_E computed.
    n_pairs : int
        Number of (row, prototype) pairs considered (rows × m).
    keep : ndarray of shape (n_rows, K), int32
        ``K = n_keep`` prototypes containing the l + 1 nearest (the K nearest
        when the row was scanned): the next pass's ``seeds``.
    low : ndarray of shape (n_rows,), float64
        A lower bound on D_E from the row to every prototype not in ``keep``
        (−inf: none known); the next pass's ``bound``.
    """

    indices: np.ndarray
    distances: np.ndarray
    exact_de: np.ndarray
    n_exact: int
    n_pairs: int
    keep: np.ndarray = None
    low: np.ndarray = None


def project(X, mu, V):
    """Rank-d′ coordinates and residual norms of Definition 4.9.

    Parameters
    ----------
    X : ndarray of shape (n, d)
    mu : ndarray of shape (d,)
        Centre subtracted first (distances are shift invariant; centring keeps
        the norms, hence the rounding error of the bound, small).
    V : ndarray of shape (d, d′), orthonormal columns

    Returns
    -------
    xt : ndarray of shape (n, d′)
        ``(x − μ)·V``.
    xperp : ndarray of shape (n,)
        ``x′ = ‖(x − μ) − (x − μ)·V·Vᵀ‖`` — the residual norm computed
        directly, not as √(‖x‖² − ‖x̃‖²), so it has no cancellation.
    norm2 : ndarray of shape (n,)
        ``‖x − μ‖²`` (scales the floating-point margin).
    """
    Xc = np.asarray(X, dtype=np.float64) - np.asarray(mu, dtype=np.float64)
    xt = Xc @ V
    r = Xc - xt @ V.T
    return xt, np.sqrt(np.einsum("ij,ij->i", r, r)), np.einsum("ij,ij->i", Xc, Xc)


@njit(cache=True, nogil=True, fastmath={"reassoc", "nsz"})
def _sqdist(xi, A, j):
    """‖xi − A[j]‖² in float64 (``xi``: the row already in float64).

    Reassociation lets LLVM vectorise the sum.  The summation order is then
    whatever the compiled loop does, so :func:`_neighbors_kernel` calls this
    from exactly one place: both solvers run the same machine code and a pair
    computed by both gets the same bits.
    """
    s = 0.0
    for k in range(xi.shape[0]):
        t = xi[k] - A[j, k]
        s += t * t
    return s


@njit(cache=True, nogil=True, inline="always")
def _insert(topD, topJ, topE, D, j, E):  # OUT topD, topJ, topE
    """Insert (D, j) into the ascending list if it beats its last entry."""
    L = topD.shape[0]
    last = L - 1
    if D > topD[last] or (D == topD[last] and j > topJ[last]):
        return
    k = last
    while k > 0 and (topD[k - 1] > D or (topD[k - 1] == D and topJ[k - 1] > j)):
        topD[k] = topD[k - 1]
        topJ[k] = topJ[k - 1]
        topE[k] = topE[k - 1]
        k -= 1
    topD[k] = D
    topJ[k] = j
    topE[k] = E


@njit(cache=True, nogil=True, inline="always")
def _row_dot(P, i, QT, out, lo, hi):  # OUT out[lo:hi]
    """``out[j] = Σ_k P[i, k]·QT[k, j]`` for j in [lo, hi), summed in k order
    (k outer, four at a time, so the j loop vectorises without reassociation:
    every j gets the same bits whatever the range)."""
    kk = P.shape[1]
    for j in range(np.uint64(lo), np.uint64(hi)):
        out[j] = 0.0
    k = 0
    while k + 4 <= kk:
        p0 = P[i, k]
        p1 = P[i, k + 1]
        p2 = P[i, k + 2]
        p3 = P[i, k + 3]
        for j in range(np.uint64(lo), np.uint64(hi)):
            out[j] = out[j] + p0 * QT[k, j] + p1 * QT[k + 1, j] + p2 * QT[k + 2, j] \
                + p3 * QT[k + 3, j]
        k += 4
    while k < kk:
        p0 = P[i, k]
        for j in range(np.uint64(lo), np.uint64(hi)):
            out[j] = out[j] + p0 * QT[k, j]
        k += 1


@njit(cache=True, nogil=True, inline="always")
def _df_range(mode, beta, ci, pi, f2i, qcomp, qinv, fg, g2, out, lo, hi):  # OUT out[lo:hi]
    """β·D_F[i, j] for the prototypes j in [lo, hi) (eqs. 11, 50, 56).

    ``‖f − g‖²`` is taken as ``‖f‖² + ‖g‖² − 2 f·g`` (``fg[j] = f·g_j``),
    clamped at 0.  Element-wise (one loop per rule), so a prototype's value
    does not depend on the range it is computed in.
    """
    if mode == 0:
        for j in range(np.uint64(lo), np.uint64(hi)):
            out[j] = 0.0
    elif mode == 1:  # eq. (56)
        for j in range(np.uint64(lo), np.uint64(hi)):
            same = ci >= 0 and qcomp[j] == ci
            out[j] = beta * (0.0 if same else 0.5 * (pi + qinv[j]))
    elif mode == 3:  # eq. (11) on all columns
        for j in range(np.uint64(lo), np.uint64(hi)):
            out[j] = beta * max(f2i + g2[j] - 2.0 * fg[j], 0.0)
    else:  # eq. (50): same component / different components
        for j in range(np.uint64(lo), np.uint64(hi)):
            same = ci >= 0 and qcomp[j] == ci
            v_same = max(f2i + g2[j] - 2.0 * fg[j], 0.0)
            v_diff = 0.5 * (pi + qinv[j]) + f2i + g2[j]
            out[j] = beta * (v_same if same else v_diff)


@njit(cache=True, nogil=True, inline="always")
def _dot_one(P, i, QT, j):
    """``Σ_k P[i, k]·QT[k, j]`` for one j, in the order of :func:`_row_dot`
    (same operations, so the same bits)."""
    kk = P.shape[1]
    s = 0.0
    k = 0
    while k + 4 <= kk:
        s = s + P[i, k] * QT[k, j] + P[i, k + 1] * QT[k + 1, j] + P[i, k + 2] * QT[k + 2, j] \
            + P[i, k + 3] * QT[k + 3, j]
        k += 4
    while k < kk:
        s = s + P[i, k] * QT[k, j]
        k += 1
    return s


@njit(cache=True, nogil=True, inline="always")
def _df_one(mode, beta, ci, pi, f2i, qcomp, qinv, fgj, g2, j):
    """β·D_F[i, j] for one prototype: the expressions of :func:`_df_range`."""
    if mode == 0:
        return 0.0
    same = ci >= 0 and qcomp[j] == ci
    if mode == 1:
        return beta * (0.0 if same else 0.5 * (pi + qinv[j]))
    if mode == 3:
        return beta * max(f2i + g2[j] - 2.0 * fgj, 0.0)
    v_same = max(f2i + g2[j] - 2.0 * fgj, 0.0)
    v_diff = 0.5 * (pi + qinv[j]) + f2i + g2[j]
    return beta * (v_same if same else v_diff)


@njit(cache=True, nogil=True, inline="always")
def _bounds_range(xtn_i, xperp_i, xa, atn, aperp, an2, dfv, margin, out, lo, hi):  # OUT out
    """Lemma 4.10 lower bound (eq. 57) plus β·D_F, less the slack; branch-free."""
    for j in range(np.uint64(lo), np.uint64(hi)):
        t = xperp_i - aperp[j]
        out[j] = xtn_i + atn[j] - 2.0 * xa[j] + t * t + dfv[j] - margin * an2[j]


@njit(cache=True, nogil=True, inline="always")
def _list_range(i, F, GT, use_f, mode, beta, ci, pi, f2i, qcomp, qinv, fg, g2, dfv, xt, atT,
                xa, xi, xp, atn, aperp, an2, margin, lbm, seedP, thr, cand, n_cand, lo,
                hi):  # OUT fg, dfv, xa, lbm, cand
    """β·D_F and the bounds for the positions [lo, hi); appends to ``cand`` (from
    ``n_cand``) those, not seeds, whose bound is ≤ ``thr``; returns the new count."""
    if hi <= lo:
        return n_cand
    if use_f:
        _row_dot(F, i, GT, fg, lo, hi)
    _df_range(mode, beta, ci, pi, f2i, qcomp, qinv, fg, g2, dfv, lo, hi)
    _row_dot(xt, i, atT, xa, lo, hi)
    _bounds_range(xi, xp, xa, atn, aperp, an2, dfv, margin, lbm, lo, hi)
    for k in range(seedP.shape[0]):  # seeds are computed already
        if lo <= seedP[k] < hi:
            lbm[seedP[k]] = np.nan  # NaN <= thr is False
    for j in range(np.uint64(lo), np.uint64(hi)):  # branch-free list
        cand[n_cand] = j
        n_cand += lbm[j] <= thr
    return n_cand


@njit(cache=True, nogil=True)
def _neighbors_kernel(X, A, skip, mode, beta, pcomp, pinv, qcomp, qinv, F, GT, f2, g2,
                      pruned, xt, atT, xtn, atn, xperp, aperp, xn2, an2, margin, seeds,
                      prev_low, mv_order, mv_delta, perm, comp_lo, comp_hi, cross_min,
                      idx, dist, de, keep, low):  # OUT idx, dist, de, keep, low
    """Prototype arrays (A, qcomp, qinv, GT, g2, atT, atn, aperp, an2) are in the
    order ``perm`` (``perm[p]`` = original index of position p); ties and the
    outputs use the original indices; ``seeds`` are positions.  With
    ``comp_lo.size > 0`` the prototypes of component k are the positions
    [comp_lo[k], comp_hi[k]) and ``cross_min[k]`` bounds from below the
    point-independent part of D_F to every prototype outside k.  The K =
    ``keep.shape[1]`` ≥ l + 1 nearest are found; ``low[i]`` bounds from below
    D_E to every prototype outside ``keep[i]`` (−inf: unknown).  ``prev_low``
    is the previous pass's ``low`` for the seeds, before the prototypes moved
    by ``mv_delta`` (descending; ``mv_order``: their positions)."""
    n, d = X.shape
    m = A.shape[0]
    L = idx.shape[1]
    K = keep.shape[1]
    use_f = mode == 2 or mode == 3
    grouped = comp_lo.shape[0] > 0
    topD = np.empty(K)
    topJ = np.empty(K, np.int64)
    topE = np.empty(K)
    seedD = np.empty(K)
    seedJ = np.empty(K, np.int64)
    seedE = np.empty(K)
    seedP = np.empty(K, np.int64)
    xi64 = np.empty(d)
    xa = np.empty(m)
    fg = np.empty(m)
    lbm = np.empty(m)
    dfv = np.empty(m)
    cand = np.empty(m, np.int64)
    n_exact = 0
    for i in range(n):
        low[i] = -np.inf
        if skip[i]:
            for k in range(L):
                idx[i, k] = -1
                dist[i, k] = np.inf
                de[i, k] = np.inf
            for k in range(K):
                keep[i, k] = -1
            continue
        for k in range(K):
            topD[k] = np.inf
            topJ[k] = m
            topE[k] = np.inf
        for k in range(d):
            xi64[k] = X[i, k]
        ci = pcomp[i]
        pi = pinv[i]
        f2i = f2[i]
        xi = xtn[i] - margin * xn2[i]
        xp = xperp[i]
        # Which exact distances, in order (one call site for _sqdist below):
        #   reference: every prototype;
        #   pruned (Algorithm 3): K seeds (the given ones, else the K smallest
        #   bounds); then nothing more if the previous pass's bound on D_E outside
        #   the seeds exceeds their (l+1)-th D; else each prototype whose bound is
        #   <= the current K-th D -- with components (grouped): the point's own
        #   component first, then the others only if β·(the least D_F to them)
        #   exceeds the K-th D (dqkm's additions; D_E >= 0, D_F >= 0).
        n_seed = 0
        scanned_all = True
        # stage of the list in cand: 0 = the given seeds (then the own component),
        # 1 = the first pass's seeds (then all bounds), 2 = the own component (then the
        # rest), 3 = the last list
        if not pruned:
            if use_f:
                _row_dot(F, i, GT, fg, 0, m)
            _df_range(mode, beta, ci, pi, f2i, qcomp, qinv, fg, g2, dfv, 0, m)
            for j in range(m):
                cand[j] = j
            n_cand = m
            stage = 3
        else:
            given = seeds.shape[1] == K
            if given:
                for k in range(K):
                    if seeds[i, k] < 0 or seeds[i, k] >= m:
                        given = False
            if given:  # e.g. the previous pass's K nearest: no scan of the m bounds
                stage = 0
                for k in range(K):
                    seedP[k] = seeds[i, k]
            else:  # the K smallest bounds, from all m
                stage = 1
                for k in range(K):
                    seedP[k] = m
                _list_range(i, F, GT, use_f, mode, beta, ci, pi, f2i, qcomp, qinv, fg, g2,
                            dfv, xt, atT, xa, xi, xp, atn, aperp, an2, margin, lbm, seedP,
                            -np.inf, cand, 0, 0, m)
                for k in range(K):
                    seedD[k] = np.inf
                    seedJ[k] = m
                    seedE[k] = 0.0
                for j in range(m):
                    v = lbm[j]
                    if v < seedD[K - 1] or (v == seedD[K - 1] and j < seedJ[K - 1]):
                        _insert(seedD, seedJ, seedE, v, j, 0.0)
                for k in range(K):
                    seedP[k] = seedJ[k]
            for k in range(K):
                j = seedP[k]
                rep = j >= m
                for kk in range(k):
                    rep = rep or seedP[kk] == j
                if not rep:  # a repeated seed is computed once
                    if not given:
                        lbm[j] = np.nan  # listed below from lbm: not again
                    cand[n_seed] = j
                    n_seed += 1
                    if given:  # its D_F: the same operations as a range (same bits)
                        fgj = _dot_one(F, i, GT, j) if use_f else 0.0
                        dfv[j] = _df_one(mode, beta, ci, pi, f2i, qcomp, qinv, fgj, g2, j)
            n_cand = n_seed
        lo = 0
        hi = m
        if grouped and ci >= 0:
            lo = comp_lo[ci]
            hi = comp_hi[ci]
        t = 0
        thr = -np.inf  # the threshold the current list was made with (seeds: none)
        track = np.inf  # rows not scanned: their bound on D_E outside the kept ones
        no_scan = False
        while True:
            if t >= n_cand:  # the list is done: the next one, or stop
                if stage == 3:
                    break
                thr = topD[K - 1]
                n_cand = 0
                t = 0
                if stage == 1:  # bounds already computed for all m
                    for jj in range(m):
                        cand[n_cand] = jj
                        n_cand += lbm[jj] <= thr
                    stage = 3
                elif stage == 0:
                    # previous bound: every other prototype had D_E >= E; moved by δ_j it
                    # has √D_E >= √E − δ_j, so it can only be among the l + 1 nearest
                    # (D >= D_E <= the (l+1)-th D of the seeds) if δ_j >= √E − √thr_L:
                    # only those "movers" need a distance, and no scan
                    E = prev_low[i]
                    thr_l = topD[L - 1]
                    if E > 0.0 and E < np.inf and thr_l < np.inf:
                        g = np.sqrt(E) * (1.0 - margin) - np.sqrt(thr_l) * (1.0 + margin)
                        if g > 0.0:
                            n_mv = 0
                            while n_mv < m and mv_delta[n_mv] * (1.0 + margin) >= g:
                                n_mv += 1
                            if 4 * n_mv <= m:
                                d_rest = mv_delta[n_mv] * (1.0 + margin) if n_mv < m else 0.0
                                r = np.sqrt(E) * (1.0 - margin) - d_rest
                                track = r * r * (1.0 - margin)  # bound for the non-movers
                                scanned_all = False
                                no_scan = True
                                stage = 3
                                thr = -np.inf  # no bounds for this list: no re-filter
                                for u in range(n_mv):
                                    q = mv_order[u]
                                    rep = False
                                    for kk in range(K):
                                        rep = rep or seedP[kk] == q
                                    if not rep:
                                        fgj = _dot_one(F, i, GT, q) if use_f else 0.0
                                        dfv[q] = _df_one(mode, beta, ci, pi, f2i, qcomp, qinv,
                                                         fgj, g2, q)
                                        cand[n_cand] = q
                                        n_cand += 1
                                continue
                    n_cand = _list_range(i, F, GT, use_f, mode, beta, ci, pi, f2i, qcomp,
                                         qinv, fg, g2, dfv, xt, atT, xa, xi, xp, atn, aperp,
                                         an2, margin, lbm, seedP, thr, cand, 0, lo, hi)
                    stage = 2 if (lo > 0 or hi < m) else 3
                else:  # the other components: skipped when β·D_F alone exceeds thr
                    stage = 3
                    cross = beta * (0.5 * pi + cross_min[ci] + (f2i if mode == 2 else 0.0))
                    if cross * (1.0 - margin) > thr:
                        scanned_all = False
                        break
                    n_cand = _list_range(i, F, GT, use_f, mode, beta, ci, pi, f2i, qcomp,
                                         qinv, fg, g2, dfv, xt, atT, xa, xi, xp, atn, aperp,
                                         an2, margin, lbm, seedP, thr, cand, 0, 0, lo)
                    n_cand = _list_range(i, F, GT, use_f, mode, beta, ci, pi, f2i, qcomp,
                                         qinv, fg, g2, dfv, xt, atT, xa, xi, xp, atn, aperp,
                                         an2, margin, lbm, seedP, thr, cand, n_cand, hi, m)
                continue
            if pruned and t >= 32 and (t & (t - 1)) == 0 and topD[K - 1] < thr:
                # the K-th D has dropped since the list was made: drop the candidates
                # left whose bound now exceeds it (branch-free; any threshold >= the
                # final K-th D is safe)
                thr = topD[K - 1]
                kept = t
                for u in range(t, n_cand):
                    cand[kept] = cand[u]
                    kept += lbm[cand[u]] <= thr
                n_cand = kept
                if t >= n_cand:
                    continue
            p = cand[t]
            j = perm[p]
            e = _sqdist(xi64, A, p)
            n_exact += 1
            D = e + dfv[p]
            # the test of _insert, repeated here: calling it costs ~10x more
            if D < topD[K - 1] or (D == topD[K - 1] and j < topJ[K - 1]):
                if topJ[K - 1] < m:  # the K-th leaves the kept ones: the bound covers it
                    track = min(track, topE[K - 1] * (1.0 - margin))
                _insert(topD, topJ, topE, D, j, e)
            else:
                track = min(track, e * (1.0 - margin))
            t += 1
        if no_scan:
            low[i] = track
        if pruned and scanned_all and topD[K - 1] < np.inf:
            # every prototype outside the K nearest has D >= the K-th D, and
            # D_E = D − β·D_F >= the K-th D − max β·D_F (all m computed in this pass)
            mx = 0.0
            for j in range(m):
                mx = max(mx, dfv[j])
            h = topD[K - 1]
            low[i] = (h - mx) - margin * (abs(h) + mx)
        for k in range(L):
            idx[i, k] = topJ[k] if topJ[k] < m else -1
            dist[i, k] = topD[k]
            de[i, k] = topE[k]
        for k in range(K):
            keep[i, k] = topJ[k] if topJ[k] < m else -1
    return n_exact


def nearest_prototypes(X, A, n_neighbors, term, *, skip=None, pruned=False, lb=None,
                       seeds=None, n_keep=None, bound=None, moves=None):
    """The ``l + 1`` nearest prototypes of every row under eq. (32).

    Parameters
    ----------
    X : ndarray of shape (n_rows, n_features), float32 or float64
    A : ndarray of shape (m, n_features)
        Prototypes (used in float64).
    n_neighbors : int
        l; ``l + 1 ≤ m``.
    term : SpectralTerm
        β and the D_F rule.
    skip : ndarray of shape (n_rows,), bool, optional
        Rows to leave out (outliers): their indices are −1.
    pruned : bool
        Algorithm 3: exact D_E only where the lower bound cannot prune.
    lb : tuple ``(xt, xperp, xn2, at, aperp, an2)``, required when pruned
        From :func:`project` for the rows and for the prototypes.
    seeds : ndarray of shape (n_rows, K), int, optional
        Used when pruned: prototypes whose exact distances are computed first
        for each row (e.g. the previous pass's ``keep``), in place of the K
        smallest bounds; a row with an index outside [0, m) falls back to
        those.  The result does not depend on the seeds (only the number of
        exact distances does).
    n_keep : int, optional
        K, in [l + 1, m] (default l + 1): how many nearest prototypes a
        scanned row keeps for the next pass (``keep``, ``low``).
    bound : ndarray of shape (n_rows,), optional
        Used with ``seeds``: the previous pass's ``low`` for exactly these
        seeds, computed with the prototypes before they moved by ``moves``.
        A row is then not scanned: only the prototypes that moved enough to
        possibly come within its seeds' (l+1)-th D get a distance (none when
        nothing moved).  Wrong bounds give wrong neighbours; None: every row
        scans.
    moves : ndarray of shape (m,), optional
        Euclidean move of each prototype since ``bound`` was computed (None: 0).

    Returns
    -------
    NeighborResult
    """
    X = np.ascontiguousarray(X)
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    A = np.ascontiguousarray(A, dtype=np.float64)
    n, m = X.shape[0], A.shape[0]
    L = int(n_neighbors) + 1
    if L > m:
        raise ValueError(f"n_neighbors + 1 = {L} must be at most the number of prototypes {m}.")
    skip = np.zeros(n, np.bool_) if skip is None else np.ascontiguousarray(skip, dtype=np.bool_)
    F = np.ascontiguousarray(term.point_f, dtype=np.float64)
    G = np.ascontiguousarray(term.proto_g, dtype=np.float64)
    f2 = np.einsum("ij,ij->i", F, F) if F.size else np.zeros(n)
    g2 = np.einsum("ij,ij->i", G, G) if G.size else np.zeros(m)
    pcomp = np.ascontiguousarray(term.point_comp, np.int64)
    pinv = np.ascontiguousarray(term.point_inv_n, np.float64)
    qcomp = np.ascontiguousarray(term.proto_comp, np.int64)
    qinv = np.ascontiguousarray(term.proto_inv_n, np.float64)
    idx = np.empty((n, L), np.int32)
    dist = np.empty((n, L))
    de = np.empty((n, L))
    low = np.empty(n)
    if pruned:
        xt, xperp, xn2, at, aperp, an2 = (np.ascontiguousarray(a, dtype=np.float64) for a in lb)
        xtn = np.einsum("ij,ij->i", xt, xt)
        atn = np.einsum("ij,ij->i", at, at)
    else:
        xt = np.zeros((n, 0))
        at = np.zeros((m, 0))
        xperp = xn2 = xtn = np.zeros(n)
        aperp = an2 = atn = np.zeros(m)
    K = L if n_keep is None or not pruned else int(n_keep)
    if not L <= K <= m:
        raise ValueError(f"n_keep must be in [n_neighbors + 1, m] = [{L}, {m}]. Got {K}.")
    if pruned and seeds is not None:
        seeds = np.ascontiguousarray(seeds, dtype=np.int64)
        if seeds.shape != (n, K):
            raise ValueError(f"seeds must have shape (n_rows, n_keep) = ({n}, {K}). "
                             f"Got {seeds.shape} instead.")
    else:
        seeds = np.zeros((n, 0), np.int64)
    keep = np.empty((n, K), np.int64)
    prev_low = np.full(n, -np.inf)
    moves = np.zeros(m) if moves is None else np.asarray(moves, dtype=np.float64)
    if moves.shape != (m,) or not (np.isfinite(moves).all() and (moves >= 0).all()):
        raise ValueError(f"moves must be {m} finite numbers >= 0 (one per prototype). "
                         f"Got shape {moves.shape}.")
    if pruned and seeds.shape[1] and bound is not None:
        b = np.asarray(bound, dtype=np.float64)
        if b.shape != (n,):
            raise ValueError(f"bound must have shape (n_rows,) = ({n},). Got {b.shape}.")
        prev_low = np.where(np.isnan(b), -np.inf, b)
    if term.mode not in (MODE_EXTRA, MODE_FULL):
        F = np.zeros((n, 0))
        G = np.zeros((m, 0))
    # F-KMM with components (eqs. 50, 56): prototypes grouped by component, so a
    # point's own component is one range and the others can be skipped at once
    grouped = bool(pruned) and term.mode in (MODE_COMPONENTS, MODE_EXTRA) and m > 0
    if grouped:
        key = np.where(qcomp >= 0, qcomp, np.iinfo(np.int64).max)
        perm = np.argsort(key, kind="stable").astype(np.int64)
        n_comp = int(qcomp.max()) + 1 if (qcomp >= 0).any() else 0
        sq = qcomp[perm]
        comp_lo = np.searchsorted(sq, np.arange(n_comp), side="left").astype(np.int64)
        comp_hi = np.searchsorted(sq, np.arange(n_comp), side="right").astype(np.int64)
        # the least point-independent part of D_F to a prototype outside component k:
        # ½·min 1/n_j (eq. 56) plus, for eq. (50), min ‖g_j‖²
        cross_min = np.full(n_comp, np.inf)
        for k in range(n_comp):
            other = qcomp != k
            if other.any():
                cross_min[k] = 0.5 * qinv[other].min() + (
                    g2[other].min() if term.mode == MODE_EXTRA else 0.0)
        if seeds.shape[1]:
            inv = np.empty(m, np.int64)
            inv[perm] = np.arange(m)
            seeds = np.where((seeds >= 0) & (seeds < m), inv[np.clip(seeds, 0, m - 1)], -1)
    else:
        perm = np.arange(m, dtype=np.int64)
        comp_lo = comp_hi = np.zeros(0, np.int64)
        cross_min = np.zeros(0)

    def order(a):
        return np.ascontiguousarray(a[perm]) if grouped else a

    mv = order(moves)
    mv_order = np.argsort(-mv, kind="stable").astype(np.int64)
    mv_delta = np.ascontiguousarray(mv[mv_order])

    n_exact = _neighbors_kernel(
        X, order(A), skip, int(term.mode), float(term.beta), pcomp, pinv, order(qcomp),
        order(qinv), F, np.ascontiguousarray(order(G).T), f2, order(g2), bool(pruned), xt,
        np.ascontiguousarray(order(at).T), xtn, order(atn), xperp, order(aperp), xn2, order(an2),
        LB_MARGIN, seeds, prev_low, mv_order, mv_delta, perm, comp_lo, comp_hi, cross_min, idx, dist, de, keep, low)
    return NeighborResult(idx, dist, de, int(n_exact), int((n - int(skip.sum())) * m),
                          keep.astype(np.int32), low)


def can_weights(distances):
    """CAN closed form of eq. (10) and the α_i of the text below eq. (12).

    Parameters
    ----------
    distances : ndarray of shape (n_rows, l + 1)
        Sorted distances to the l+1 nearest prototypes (rows of +inf are
        skipped rows).

    Returns
    -------
    weights : ndarray of shape (n_rows, l)
        ``s_ij = (d_(l+1) − d_ij) / (l·d_(l+1) − Σ_{k≤l} d_ik)``; when the
        denominator is 0 (all l+1 distances equal) every weight is 1/l.  Rows
        sum to 1 (eq. 12); skipped rows are 0.
    alpha : ndarray of shape (n_rows,)
        ``α_i = (l/2)·d_(l+1) − ½ Σ_{k≤l} d_ik`` (0 for skipped rows).
    """
    D = np.ascontiguousarray(distances, dtype=np.float64)
    n, L = D.shape
    W = np.zeros((n, L - 1))
    alpha = np.zeros(n)
    _can_kernel(D, W, alpha)
    return W, alpha


@njit(cache=True, nogil=True)
def _can_kernel(D, W, alpha):  # OUT W, alpha
    """:func:`can_weights` row by row (the sum of the l nearest in column order)."""
    n, L = D.shape
    ell = L - 1
    for i in range(n):
        if not np.isfinite(D[i, 0]):
            continue
        top = D[i, ell]
        s = 0.0
        for k in range(ell):
            s += D[i, k]
        denom = ell * top - s
        if denom > 0:
            for k in range(ell):
                W[i, k] = (top - D[i, k]) / denom
        else:  # all l + 1 equal (or NaN): equal weights
            for k in range(ell):
                W[i, k] = 1.0 / ell
        alpha[i] = 0.5 * max(denom, 0.0)


@njit(cache=True, nogil=True)
def spectral_rows(idx, w, Wmap):
    """``F[i] = Σ_k s_ik·Wmap[idx[i, k]]`` over the row's neighbours (idx ≥ 0):
    the data rows of F from the prototype side (Lemma 4.1), in neighbour order."""
    n, ell = idx.shape
    c = Wmap.shape[1]
    F = np.zeros((n, c))
    for i in range(n):
        for k in range(ell):
            j = idx[i, k]
            if j >= 0:
                v = w[i, k]
                for t in range(c):
                    F[i, t] += v * Wmap[j, t]
    return F
