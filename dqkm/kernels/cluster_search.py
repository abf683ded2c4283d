"""Exact k-NN inside one tile of one cluster: candidate selection, exact
distances and the running top-k merge, for every query of a group at once.

:func:`dqkm.parallel.neighbors.search_block` computes, per (cluster tile,
group of queries probing that cluster), one GEMM ``G = Q[grp] @ Xtᵀ`` in the
data's dtype and hands it to :func:`tile_topk`, which for each query of the
group

1. scores every row of the tile by ``s_j = ‖x_j‖² − 2·G[r, j]`` (the same
   operations, in the same dtypes, as NumPy's ``sq_norms[None, :] − 2.0 * G``),
2. keeps as candidates every row whose exact score may be among the
   ``kk`` smallest (``kk = min(k, rows)``; every row of a tile with at most
   ``k`` rows): the ``kk`` rows of smallest computed score, and every row
   whose computed score, less a rounding-error bound, is at most the largest
   of theirs plus its bound — so a float32 GEMM's rounding cannot drop a row
   that is in truth nearer (near-ties a few ulps apart),
3. skips a candidate whose exact distance provably exceeds the query's current
   k-th best (the same rounding-error bound on the score; it could not enter
   the top-k), and recomputes the others' squared distances ``‖q − x‖²``
   exactly in float64, summed in the order of NumPy's
   ``np.einsum('ijk,ijk->ij', diff, diff)`` on the x86-64 baseline (see
   :func:`sq_distance`),
4. merges them into the query's running top-k, kept sorted by the pair
   ``(distance², id)`` (ascending distance, ties by the lower id), in place.

The result is therefore the k-NN by these float64 distances of the stored
values (ties by the lower id) among the rows searched, whatever the GEMM's
summation order: the same for every query block size, BLAS and thread count.
The NumPy implementation it replaced (``_search_block_numpy``) picks exactly
the ``kk`` smallest computed scores and so may miss such a near-tie in float32
(26 of 100,000 queries at D = 2000 in ``benchmarks/bench_cluster_search.py``);
elsewhere the two agree.

All kernels are pure functions on NumPy arrays; inputs are never mutated and
buffers written in place are marked ``# OUT``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["sq_distance", "tile_topk", "insert_topk", "pruning_gammas"]


@njit(cache=True, nogil=True, inline="always")
def _sq_distance_at(Q, qi, X, j):
    """``‖Q[qi] − X[j]‖²`` in float64, in :func:`sq_distance`'s order."""
    n = Q.shape[1]
    a0 = 0.0
    a1 = 0.0
    i = 0
    while n - i >= 8:
        d6 = np.float64(Q[qi, i + 6]) - np.float64(X[j, i + 6])
        d7 = np.float64(Q[qi, i + 7]) - np.float64(X[j, i + 7])
        d4 = np.float64(Q[qi, i + 4]) - np.float64(X[j, i + 4])
        d5 = np.float64(Q[qi, i + 5]) - np.float64(X[j, i + 5])
        d2 = np.float64(Q[qi, i + 2]) - np.float64(X[j, i + 2])
        d3 = np.float64(Q[qi, i + 3]) - np.float64(X[j, i + 3])
        d0 = np.float64(Q[qi, i]) - np.float64(X[j, i])
        d1 = np.float64(Q[qi, i + 1]) - np.float64(X[j, i + 1])
        a0 = d6 * d6 + a0
        a1 = d7 * d7 + a1
        a0 = d4 * d4 + a0
        a1 = d5 * d5 + a1
        a0 = d2 * d2 + a0
        a1 = d3 * d3 + a1
        a0 = d0 * d0 + a0
        a1 = d1 * d1 + a1
        i += 8
    while i < n:
        d0 = np.float64(Q[qi, i]) - np.float64(X[j, i])
        a0 = d0 * d0 + a0
        if i + 1 < n:
            d1 = np.float64(Q[qi, i + 1]) - np.float64(X[j, i + 1])
            a1 = d1 * d1 + a1
        i += 2
    return a0 + a1


@njit(cache=True, nogil=True)
def sq_distance(q, x):
    """``‖q − x‖²`` in float64, bit-identical to NumPy's
    ``np.einsum('ijk,ijk->ij', diff, diff)`` with ``diff = q64 − x`` on x86-64.

    Parameters
    ----------
    q, x : ndarray of shape (n_features,), float32 or float64

    Returns
    -------
    float

    NumPy's einsum reduces a contiguous axis with its baseline SIMD kernel
    (``sum_of_products_contig_contig_outstride0_two``; SSE on x86-64: two
    float64 lanes, no fused multiply-add): lane ``l`` takes elements
    ``l, l+2, …``; per block of eight it adds the products of the block's
    last pair first, ``p0 + (p2 + (p4 + (p6 + acc)))``; past the blocks one
    pair at a time; then ``lane0 + lane1``.  A NumPy built with another
    baseline (FMA, wider lanes) sums in another order, so
    ``tests/kernels/test_cluster_search.py`` asks only for agreement to
    rounding; nothing in dqkm depends on the bits.
    """
    return _sq_distance_at(np.ascontiguousarray(q).reshape(1, -1), 0,
                           np.ascontiguousarray(x).reshape(1, -1), 0)


@njit(cache=True, nogil=True, inline="always")
def insert_topk(best_d, best_i, r, d, idx):  # OUT best_d[r], best_i[r]
    """Insert ``(d, idx)`` into row ``r`` of the running top-k.

    ``best_d[r]``/``best_i[r]`` are sorted ascending by the pair
    ``(distance², id)``; unused slots hold ``(inf, −1)``.  The pair enters when
    it is smaller than the last entry; an entry equal to it (the same row
    reached twice: a cluster probed twice by one query) is not added again.
    """
    k = best_d.shape[1]
    last = k - 1
    if d > best_d[r, last] or (d == best_d[r, last] and idx >= best_i[r, last]):
        return
    p = last
    while p > 0 and (best_d[r, p - 1] > d or (best_d[r, p - 1] == d and best_i[r, p - 1] > idx)):
        p -= 1
    if p > 0 and best_d[r, p - 1] == d and best_i[r, p - 1] == idx:
        return
    for t in range(last, p, -1):
        best_d[r, t] = best_d[r, t - 1]
        best_i[r, t] = best_i[r, t - 1]
    best_d[r, p] = d
    best_i[r, p] = idx


def pruning_gammas(n_features, gemm_dtype, sq_dtype):
    """``(γ_G, γ_S)`` for :func:`tile_topk`'s lower bound: ``γ_n = n·u/(1 − n·u)``
    with ``u`` the unit roundoff of the GEMM's dtype (``n = n_features``) and of
    the squared norms' dtype (``n = n_features + 2``: their sum and the score's
    two roundings).  ``inf`` (no pruning) when ``n·u ≥ 1/2``."""

    def gamma(n, dtype):
        u = float(np.finfo(dtype).eps) / 2.0
        return n * u / (1.0 - n * u) if n * u < 0.5 else np.inf

    return gamma(n_features, gemm_dtype), gamma(n_features + 2, sq_dtype)


@njit(cache=True, nogil=True)
def tile_topk(G, sq_norms, Q, q_rows, q_sq, Xt, ids, kk, gamma_g, gamma_s,
              best_d, best_i, max_candidates):  # OUT best_d, best_i
    """Merge one cluster tile into the running top-k of a group of queries.

    Parameters
    ----------
    G : ndarray of shape (g, n)
        ``Q[q_rows] @ Xt.T`` in the data's dtype (one GEMM per tile and group).
    sq_norms : ndarray of shape (n,)
        ``‖x‖²`` of the tile's rows (float64 in an index built by dqkm).
    Q : ndarray of shape (m, n_features)
        All queries of the block.
    q_rows : ndarray of shape (g,), int64
        Row in ``Q`` (and in ``q_sq``, ``best_d``, ``best_i``) of each row of ``G``.
    q_sq : ndarray of shape (m,), float64
        ``‖q‖²`` of the queries (any summation order).
    Xt : ndarray of shape (n, n_features)
        The tile's rows.
    ids : ndarray of shape (n,), int64
        Their original row ids.
    kk : int
        Candidates by score, ``min(k, n)``; every row is a candidate when
        ``kk >= n``.
    gamma_g, gamma_s : float
        Rounding-error factors of the GEMM and of the squared norms
        (:func:`pruning_gammas`); ``inf``: every row is a candidate, none skipped.
    best_d : ndarray of shape (m, k), float64 — OUT
        Running top-k squared distances per query row, ascending; ``inf`` when
        unused.
    best_i : ndarray of shape (m, k), int64 — OUT
        Their ids, ties by the lower id; ``−1`` when unused.
    max_candidates : int
        Give up (return −1) as soon as a query has more candidates than this:
        the GEMM's dtype is too coarse for these rows (see below).  Queries
        already merged stay merged; merging the tile again (e.g. from a float64
        GEMM) adds nothing twice, as :func:`insert_topk` skips a pair it holds.
        ``n`` or more: never give up.

    Returns
    -------
    int
        The number of (query, row) pairs whose exact distance was computed, or
        −1 when it gave up.

    Scores ``s_j = sq_norms[j] − (G[r, j] + G[r, j])`` (the dtypes and
    roundings of NumPy's ``sq_norms[None, :] − 2.0 * G``).  With
    ``ν = ‖q‖·‖x_j‖``, ``E_j = 2γ_G·ν + γ_S·(‖x‖² + |s_j| + 2ν) + ρ·(‖q‖² + ‖x‖² +
    |s_j| + 2ν)`` bounds the score's error — the GEMM's
    (``|fl(q·x) − q·x| ≤ γ_G·‖q‖‖x‖`` in any summation order), the squared
    norms' and the float64 roundings (``ρ = 4·(n_features + 8)·2⁻⁵³``).
    Candidates: the ``kk`` rows of smallest score (any row tying with the
    last of them too) and every row with ``s_j − E_j ≤ U``, ``U`` the largest
    ``s + E`` of those ``kk`` — at least ``kk`` rows have an exact score
    ``≤ U``, so no other row can be among the nearest ``kk`` of the tile.
    They are taken in ascending score order; a candidate is skipped when
    ``(‖q‖² + s_j − E_j)·(1 − ρ)`` — a lower bound on its exact distance —
    exceeds the query's current k-th best, so the computed float64 distance
    would exceed it too.  The result is that of computing every row's exact
    distance.  With ``γ = inf`` (no bound) every row is a candidate.
    """
    g, n = G.shape
    k = best_d.shape[1]
    n_feat = Q.shape[1]
    rho = 4.0 * (n_feat + 8) * 2.0 ** -53
    bounded = gamma_g < np.inf and gamma_s < np.inf
    scores = np.empty(n, dtype=np.float64)
    errs = np.empty(n, dtype=np.float64)
    norms = np.empty(n, dtype=np.float64)
    for j in range(n):
        norms[j] = np.sqrt(max(np.float64(sq_norms[j]), 0.0))
    cand = np.empty(n, dtype=np.int64)
    top = np.empty(max(kk, 1), dtype=np.float64)
    computed = 0
    for r in range(g):
        qi = q_rows[r]
        qq = q_sq[qi]
        nq = np.sqrt(qq)
        nc = 0
        for j in range(n):
            s = sq_norms[j] - (G[r, j] + G[r, j])
            scores[j] = s
            if bounded:
                xx = np.float64(sq_norms[j])
                nu = nq * norms[j]
                errs[j] = (2.0 * gamma_g * nu + gamma_s * (xx + abs(s) + 2.0 * nu)
                           + rho * (qq + xx + abs(s) + 2.0 * nu))
        if kk >= n or not bounded:
            for j in range(n):
                cand[j] = j
            nc = n
        else:
            for t in range(kk):
                top[t] = np.inf
            last = kk - 1
            for j in range(n):
                s = scores[j]
                if s < top[last]:
                    p = last
                    while p > 0 and top[p - 1] > s:
                        top[p] = top[p - 1]
                        p -= 1
                    top[p] = s
            thr = top[last]
            # at least kk rows (those scoring <= thr) have an exact score <= upper;
            # a row whose exact score may be <= upper is a candidate
            upper = -np.inf
            for j in range(n):
                if scores[j] <= thr:
                    upper = max(upper, scores[j] + errs[j])
            for j in range(n):
                if scores[j] <= thr or scores[j] - errs[j] <= upper:
                    cand[nc] = j
                    nc += 1
            if nc > max_candidates:
                return -1
        if bounded and nc <= 64:  # ascending score: the best first tighten the bound
            for t in range(1, nc):
                j = cand[t]
                p = t
                while p > 0 and scores[cand[p - 1]] > scores[j]:
                    cand[p] = cand[p - 1]
                    p -= 1
                cand[p] = j
        for t in range(nc):
            j = cand[t]
            if bounded and (qq + scores[j] - errs[j]) * (1.0 - rho) > best_d[qi, k - 1]:
                continue
            d = _sq_distance_at(Q, qi, Xt, j)
            insert_topk(best_d, best_i, qi, d, ids[j])
            computed += 1
    return computed
