"""Exact labels for the dense K-means kernels: a reference distance and certified argmins.

Every dense kernel's labels are defined by :func:`exact_sq_dist`, the float64
distance summed in feature order, the lowest index winning ties.  The fast
kernels (direct distances in X's dtype, GEMM products) keep the second
smallest value beside the smallest and bound their own rounding; a row whose
two values are closer than that bound (a near-tie) is decided by the
reference.  So the Lloyd kernels (:mod:`dqkm.kernels.lloyd`) and the
bound-pruned ones (:mod:`dqkm.kernels.bounds`) give the same labels whatever
the order of their sums.

Pure functions; the ``OUT`` arguments are the caller's buffers.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._direct import _select1, argmin_direct

__all__ = ["exact_sq_dist", "bound_sq_dist"]

# as in .lloyd: reassociation lets LLVM vectorise
_FASTMATH = {"reassoc", "contract", "nsz"}


@njit(nogil=True, cache=True)  # no fastmath: the one reference sum, in feature order
def exact_sq_dist(X, r, centers, j):
    """``‖X[r] − centers[j]‖²`` summed in float64 in feature order: the distance
    every dense kernel's labels are defined by (lowest index on ties)."""
    acc = 0.0
    for f in range(X.shape[1]):
        u = np.float64(X[r, f]) - np.float64(centers[j, f])
        acc += u * u
    return acc


@njit(nogil=True, cache=True, fastmath=_FASTMATH)
def bound_sq_dist(X, r, centers, j):
    """``‖X[r] − centers[j]‖²`` in float64 in any order of summation (vectorised):
    for bounds only, never for labels.  Its terms are non-negative, so it is within
    a relative ``2·D·u`` (u = 2⁻⁵³) of :func:`exact_sq_dist` — below 1e-10 up to
    ~10⁵ features, far inside the bounds' outward rounding
    (:data:`dqkm.kernels.bounds_geometry._EPS`)."""
    acc = 0.0
    for f in range(X.shape[1]):
        u = np.float64(X[r, f]) - np.float64(centers[j, f])
        acc += u * u
    return acc


@njit(nogil=True, cache=True)
def _exact_label(X, r, centers):
    """The lowest j with the smallest :func:`exact_sq_dist` of row r."""
    return _exact_label_second(X, r, centers)[0]


def _direct_rounding(dtype, dp):
    """``(margin, tiny)`` of :func:`_certify_direct` for direct distances over
    ``dp`` features in ``dtype``: each computed distance is within
    ``γ·d + dp·s`` of the exact one (γ ≈ (dp + 2)·u for any order of the
    additions, FMA or not, u the dtype's unit roundoff; ``s`` its smallest
    subnormal covers underflow), the exact float64 reference within far less;
    the margin holds both with a factor above 2."""
    fi = np.finfo(dtype)
    return float(8 * (dp + 4) * fi.eps / 2), float(4 * dp * fi.smallest_subnormal)


@njit(nogil=True, cache=True)
def _exact_label_second(X, r, centers):
    """:func:`_exact_label` of row r and the smallest :func:`exact_sq_dist` of the
    other centers (+inf when K = 1)."""
    best = np.inf
    second = np.inf
    arg = -1
    for j in range(centers.shape[0]):
        e = exact_sq_dist(X, r, centers, j)
        if arg < 0 or e < best:
            second = best
            best = e
            arg = j
        elif e < second:
            second = e
    return arg, second


@njit(nogil=True, cache=True)
def _certify_direct(X, start, t, centers, best, sec, lab, margin, tiny, low):  # OUT lab, low
    """Make the tile's labels those of :func:`exact_sq_dist` (lowest index on ties).

    Direct distances are sums of non-negative terms, so the rounding of each is
    relative: when the second smallest exceeds the smallest by more than
    ``margin·best + tiny`` no other center can be as near in exact arithmetic,
    and the label stands.  The rare rows within that margin (near-ties) are
    decided by the exact float64 distances of every center.  Rows whose best
    is not finite are left (the callers refuse them).

    ``low`` (float64, one entry per row of X, or empty: not wanted) receives a
    lower bound of the exact squared distance of each row to every center but
    its label — the second smallest lowered by the margin, or the exact second
    of a near-tie; 0 where the best is not finite — for Hamerly's bounds
    (:mod:`dqkm.kernels.bounds`).
    """
    want = low.shape[0] > 0
    if not want:  # most tiles have no near-tie: one branch-free pass tells
        near = 0
        for i in range(t):
            b = np.float64(best[i])
            near += not (np.float64(sec[i]) - b > margin * b + tiny)
        if near == 0:
            return
    for i in range(t):
        b = np.float64(best[i])
        if not np.isfinite(b):
            if want:
                low[start + i] = 0.0
            continue
        s = np.float64(sec[i])
        if s - b > margin * b + tiny:
            if want:
                low[start + i] = max(s * (1.0 - margin) - tiny, 0.0)
            continue
        if want:
            lab[i], low[start + i] = _exact_label_second(X, start + i, centers)
        else:
            lab[i] = _exact_label(X, start + i, centers)


@njit(nogil=True, cache=True)
def _argmin2_columns(G, k, t, half_norms, best, sec, lab, labels, offset):  # OUT best, sec, lab, labels
    """:func:`_argmin_columns` that also keeps ``sec[i]``, the second smallest
    ``half_norms[j] − G[j, i]`` (+inf when K = 1), for :func:`_certify_gemm`;
    branch-free selects across the tile (``lab``: an int32 scratch buffer)."""
    for i in range(t):
        best[i] = np.inf
        sec[i] = np.inf
        lab[i] = 0
    for j in range(k):
        hj = half_norms[j]
        gj = G[j]
        jj = np.int32(j)
        for i in range(t):
            _select1(hj - gj[i], i, jj, best, sec, lab)
    for i in range(t):
        labels[offset + i] = lab[i]


@njit(nogil=True, cache=True, fastmath=_FASTMATH)
def _row_sq_norm(X, r):
    """‖X[r]‖² in float64, in any order (vectorised; only a scale of the rounding bound)."""
    xn = 0.0
    for f in range(X.shape[1]):
        v = np.float64(X[r, f])
        xn += v * v
    return xn


@njit(nogil=True, cache=True)
def _certify_gemm(X, start, t, centers, best, sec, labels, scale, cmax, low):  # OUT labels, low
    """Make the tile's labels (GEMM in X's dtype, ``best``/``sec`` the smallest and
    second smallest ``½‖c‖² − x·c``) those of :func:`exact_sq_dist`.

    Each computed value is within ``γ·(‖x‖² + ‖c‖²)`` of the exact one for any
    order of the GEMM's sums (γ ≈ (D + 2)·u, u X's unit roundoff; products that
    underflow add far less than ``scale·cmax`` when ``cmax ≥ 1e-30``); when the second smallest exceeds
    the smallest by more than ``scale·(‖x‖² + max ‖c‖²)`` (``scale`` holds both
    values' errors and the float64 reference's with a margin) the label stands;
    a row within it (a near-tie) is decided by the exact distances to every
    center.  Rows whose best is not finite are left (the callers refuse them).

    ``low`` as in :func:`_certify_direct`: ``‖x‖² + 2·sec`` lowered by
    ``scale·(‖x‖² + max ‖c‖²)`` (over four times the error of the two values and
    of ``‖x‖²``), or the exact second of a near-tie.
    """
    want = low.shape[0] > 0
    for i in range(t):
        b = best[i]
        r = start + i
        if not np.isfinite(b):
            if want:
                low[r] = 0.0
            continue
        xn = _row_sq_norm(X, r)
        err = scale * (xn + cmax)
        if sec[i] - b > err:
            if want:
                low[r] = max(xn + 2.0 * np.float64(sec[i]) - err, 0.0)
            continue
        if want:
            labels[r], low[r] = _exact_label_second(X, r, centers)
        else:
            labels[r] = _exact_label(X, r, centers)


@njit(nogil=True, cache=True)
def _exact_labels_of_finite(X, start, t, centers, best, labels):  # OUT labels
    """The :func:`exact_sq_dist` label of each of the tile's rows whose ``best`` is
    finite (a tile assigned again in float64 after its float32 products overflowed)."""
    for i in range(t):
        if np.isfinite(best[i]):
            labels[start + i] = _exact_label(X, start + i, centers)


def _certifies_cheaply(X, c64, half64, scale, cmax, n_probe):
    """Whether the GEMM kernel's certification would rescan few of X's rows.

    A row is rescanned when its two smallest ``½‖c‖² − x·c`` are closer than
    ``scale·(‖x‖² + max ‖c‖²)``: rare on data near the origin, most rows on
    data whose spread is small beside its distance from the origin (there the
    direct kernel is exact at no extra cost).  Measured on ``n_probe`` rows
    spread over X, in float64: at most one in 32 of them may be near-ties.
    """
    n, k = X.shape[0], c64.shape[0]
    if n < 8 * n_probe or not cmax >= 1e-30:  # a small block; or centers so small
        return False  # that underflowing products would not be covered by the bound
    if k < 2:
        return True
    rows = X[np.linspace(0, n - 1, n_probe).astype(np.intp)].astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        two = np.partition(half64[None, :] - rows @ c64.T, 1, axis=1)[:, :2]
        bound = scale * (np.einsum("ij,ij->i", rows, rows) + cmax)
        near = np.count_nonzero(~(two[:, 1] - two[:, 0] > bound))  # NaN counts as near
    return near <= n_probe // 32


@njit(nogil=True, cache=True)
def _scan(X, r, CT, d2):  # OUT d2
    """Nearest center of row r, its squared distance and the second smallest.

    ``CT`` is the centers transposed (float64, ``n_features × K``): each
    feature updates all K distances at once (SIMD across the centers), every
    distance still summed in feature order as :func:`exact_sq_dist` sums it.
    """
    k = CT.shape[1]
    for j in range(k):
        d2[j] = 0.0
    for f in range(CT.shape[0]):
        xf = np.float64(X[r, f])
        cf = CT[f]
        for j in range(k):
            u = xf - cf[j]
            d2[j] += u * u
    best = np.inf
    second = np.inf
    arg = 0
    for j in range(k):
        v = d2[j]
        if v < best:
            second = best
            best = v
            arg = j
        elif v < second:
            second = v
    return arg, best, second


@njit(nogil=True, cache=True)
def _rescan_direct(X, rows, centers, cpad, CT, tile, margin, tiny, labels, upper, lower, eps):  # OUT labels, upper, lower
    """Hamerly's full scans of the rows ``rows`` by the Lloyd pass's direct
    kernel (n_features ≤ ``_DIRECT_MAX_D``), ``tile`` rows at a time.

    The kernel gives each row's smallest and second smallest distance in X's
    dtype, each within a relative ``margin/2`` (plus ``tiny``) of the exact one
    (:func:`dqkm.kernels.lloyd._direct_rounding`).  Where the second exceeds
    the smallest by more than that, the label is the exact one, the upper bound
    is its distance (:func:`bound_sq_dist`, rounded outward) and the second,
    lowered by the margin, bounds every other center's distance from below; a
    near-tie (or a row whose distances overflow or hold NaN) is scanned exactly
    (:func:`_scan`).  The labels are those of :func:`_rescan`."""
    dp = cpad.shape[1]
    d = X.shape[1]
    k = centers.shape[0]
    XT = np.zeros((dp, tile), dtype=X.dtype)
    best = np.empty(tile, dtype=X.dtype)
    sec = np.empty(tile, dtype=X.dtype)
    dist = np.empty((2, tile), dtype=X.dtype)
    lab = np.empty(tile, dtype=np.int32)
    d2 = np.empty(k)
    m = rows.shape[0]
    for s in range(0, m, tile):
        t = min(tile, m - s)
        for i in range(t):
            r = rows[s + i]
            for f in range(d):
                XT[f, i] = X[r, f]
        argmin_direct(XT, t, cpad, best, sec, dist[0], dist[1], lab)
        for i in range(t):
            r = rows[s + i]
            b = np.float64(best[i])
            sv = np.float64(sec[i])
            if np.isfinite(b) and sv - b > margin * b + tiny:
                a = lab[i]
                e = bound_sq_dist(X, r, centers, a)  # the upper bound's distance only
                second = max(sv * (1.0 - margin) - tiny, 0.0)
            else:
                a, e, second = _scan(X, r, CT, d2)
            labels[r] = a
            upper[r] = np.sqrt(e) * (1.0 + eps)
            lower[r] = np.sqrt(second) * (1.0 - eps)
