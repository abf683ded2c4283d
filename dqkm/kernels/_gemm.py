"""The GEMM kernel of the Lloyd pass: one ``C·X_tileᵀ`` product per tile of rows.

Each tile's products are formed, their column-wise argmin taken
(:func:`_argmin_columns`; with the second smallest and a certification of
near-ties on certified passes, :mod:`._exact`), a tile whose products
overflowed is assigned again in float64, and the tile is finished while in
cache (:func:`~dqkm.kernels._finish._finish_tile`: exact float64 distances,
sums, counts).  The GEMM is numba's ``np.dot`` inside :func:`_tiled`, or,
where the labels are not certified (float32 X above the direct kernel's
dimension) and ``lloyd._BLAS_TILES`` is set, NumPy's (``numpy.dot``) from a
Python loop over larger tiles in :func:`_tiled_blas`.  Which one is faster
depends on the machine's BLAS builds and caches: one 2-core machine measured
NumPy's tiles 12–22 % faster at 48–256 features, another (AVX-512, 1 MB L2)
numba's 13–26 % faster (``benchmarks/bench_lloyd_kernel.py`` times both; the
flag follows the latest run).  Both finish alike:
for the same labels the same sums, distances and objective; a near-tie's
uncertified float32 label follows the rounding of the BLAS that formed it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._exact import _argmin2_columns, _certify_gemm, _exact_labels_of_finite
from ._finish import _finish_tile

_TILE = 256


@njit(nogil=True, cache=True)
def _argmin_columns(G, k, t, half_norms, best, labels, offset):  # OUT best, labels
    """``labels[offset + i] = argmin_{j<k} half_norms[j] − G[j, i]`` for ``i < t``.

    The products are scanned one center (one contiguous row of ``G``) at a
    time, so the compare-and-select runs across the tile's rows in SIMD lanes;
    a row-by-row scan over K is a chain of dependent branches (at K = 64 it
    cost a third as much as the GEMM).  Strict ``<`` with j increasing: the
    lower index wins ties, and a NaN product never wins.  Shared with the
    sparse-factor kernels (``_factor_apply``), whose buffers are wider than
    ``t`` and taller than ``k``.
    """
    # The labels through a view indexed from 0 and the center index as the
    # labels' int32: with ``labels[offset + i]`` and an int64 ``j`` LLVM left
    # the loop scalar (the selects alone did not vectorise it).
    lab = labels[offset:offset + t]
    h0 = half_norms[0]
    g0 = G[0]
    for i in range(t):
        best[i] = h0 - g0[i]
        lab[i] = 0
    for j in range(1, k):
        hj = half_norms[j]
        gj = G[j]
        jj = np.int32(j)
        for i in range(t):
            # Selects, not a branch: vector compares and blends.
            v = hj - gj[i]
            b = best[i]
            lt = v < b
            best[i] = v if lt else b
            lab[i] = jj if lt else lab[i]


@njit(nogil=True, cache=True)
def _argmin_tile64(X, start, stop, centers64, half64, best64, labels):  # OUT best64, labels
    """:func:`_argmin_columns` for rows ``start … stop`` of X, in float64."""
    gT = np.dot(centers64, X[start:stop].astype(np.float64).T)
    _argmin_columns(gT, gT.shape[0], stop - start, half64, best64, labels, start)


@njit(nogil=True, cache=True)
def _mark_overflow(best64, t, mind, start):  # OUT mind
    """``mind = +inf`` for the tile's rows whose float64 best is not finite; whether any.

    A function of its own: the same test inline in :func:`_tiled`'s row loop
    slowed that loop by a third (D = 16, K = 8).
    """
    found = False
    for i in range(t):
        if not np.isfinite(best64[i]):
            mind[start + i] = np.inf
            found = True
    return found


@njit(nogil=True, cache=True, inline="always")  # in _tiled's loop as it was written there
def _after_gemm(X, start, stop, gT, again, centers, half_norms, centers64, half64, exact, scale,
                cmax, sums, counts, labels, mind, with_sums, low, best, sec, lab, best64,
                objective):  # OUT sums, counts, labels, mind, low, best, sec, lab, best64
    """:func:`_tiled`'s work on rows ``start … stop`` once their products ``gT``
    (K × t) are formed (``again``: none, assign in float64): the argmin, the
    float64 fallback or the certification, and the finishing pass; the objective
    so far plus the tile's."""
    t = stop - start
    if not again:
        if exact:
            _argmin2_columns(gT, gT.shape[0], t, half_norms, best, sec, lab, labels, start)
        else:
            _argmin_columns(gT, gT.shape[0], t, half_norms, best, labels, start)
        for i in range(t):
            if not np.isfinite(best[i]):
                again = True
                break
    if again:
        _argmin_tile64(X, start, stop, centers64, half64, best64, labels)
        if exact:  # float32 X whose products overflowed float32: exact labels
            _exact_labels_of_finite(X, start, t, centers, best64, labels)
        if low.shape[0] > 0:
            low[start:stop] = 0.0
    elif exact:
        _certify_gemm(X, start, t, centers, best, sec, labels, scale, cmax, low)
    objective = _finish_tile(X, start, stop, centers, sums, counts, labels, mind,
                             with_sums, objective)
    if again and _mark_overflow(best64, t, mind, start):
        objective = np.inf
    return objective


def _tile_buffers(k, tile, dtype):
    """``(products, best, second, labels, best64)``: one tile's buffers."""
    return (np.empty((k, tile), dtype=dtype), np.empty(tile, dtype=dtype),
            np.empty(tile, dtype=dtype), np.empty(tile, dtype=np.int32),
            np.empty(tile, dtype=np.float64))


@njit(nogil=True, cache=True)
def _tiled(X, centers, half_norms, centers64, half64, use64, exact, scale, cmax, sums, counts,
           labels, mind, with_sums, tile, low):  # OUT sums, counts, labels, mind, low
    """One GEMM per tile of ``tile`` rows (:func:`_gemm_tile`), finished while the tile
    is in cache (:func:`_after_gemm`).

    The products are formed as ``C·X_tileᵀ`` (K × tile) for the column-wise
    argmin of :func:`_argmin_columns`; then each row's exact distance and
    (``with_sums``) its share of the sums, in float64.

    The GEMM runs in X's dtype unless ``use64`` (the ½‖c‖² overflow it).  A
    tile whose best value ½‖c‖² − x·c is not finite (a product overflowed,
    or X holds NaN/inf) is assigned again in float64; a row whose float64
    best is still not finite gets distance +inf (its distances overflow
    float64, or it holds NaN/inf): the callers refuse it.  With ``exact``
    (float64 X) every label is certified to be that of :func:`exact_sq_dist`
    (:func:`_certify_gemm`), and ``low`` (if not empty; ``exact`` only) receives a
    lower bound of each row's squared distance to the other centers (0 in a tile
    assigned again in float64).
    """
    objective = 0.0
    best = np.empty(tile, dtype=X.dtype)
    sec = np.empty(tile, dtype=X.dtype)
    lab = np.empty(tile, dtype=np.int32)
    best64 = np.empty(tile, dtype=np.float64)
    gbuf = np.empty((centers.shape[0], tile), dtype=X.dtype)
    for start in range(0, X.shape[0], tile):
        stop = min(start + tile, X.shape[0])
        gT = gbuf
        if not use64:
            if stop - start == tile:  # into the one buffer: no allocation per tile
                np.dot(centers, X[start:stop].T, gbuf)
            else:
                gT = np.dot(centers, X[start:stop].T)
        objective = _after_gemm(X, start, stop, gT, use64, centers, half_norms, centers64,
                                half64, exact, scale, cmax, sums, counts, labels, mind,
                                with_sums, low, best, sec, lab, best64, objective)
    return objective


def _tiled_blas(X, centers, half_norms, centers64, half64, exact, scale, cmax, sums, counts,
                labels, mind, with_sums, tile, low):  # OUT sums, counts, labels, mind, low
    """:func:`_tiled` with each tile's GEMM by NumPy (``numpy.dot``), the rest by
    :func:`_after_gemm` (``use64`` False: the caller takes the float64 path itself).

    Used where ``lloyd._BLAS_TILES`` is set: NumPy's BLAS was the faster one on
    one machine (numba's ``np.dot`` calls SciPy's bundled OpenBLAS, another
    build; see the module docstring); the tiles are larger (:func:`_blas_tile`) so
    that a call from Python costs nothing beside its GEMM.
    """
    gbuf, best, sec, lab, best64 = _tile_buffers(centers.shape[0], tile, X.dtype)
    objective = 0.0
    for start in range(0, X.shape[0], tile):
        stop = min(start + tile, X.shape[0])
        if stop - start == tile:
            gT = np.dot(centers, X[start:stop].T, out=gbuf)
        else:
            gT = np.dot(centers, X[start:stop].T)
        objective = _after_gemm(X, start, stop, gT, False, centers, half_norms, centers64,
                                half64, exact, scale, cmax, sums, counts, labels, mind,
                                with_sums, low, best, sec, lab, best64, objective)
    return objective


def _gemm_tile(k, d, itemsize):
    """Rows per tile of :func:`_tiled`: ``_TILE``, or more where few centers make each
    GEMM call short (its fixed cost then counts), as long as the K × tile products
    stay within 128 kB and the tile's rows within 256 kB (L2) for the finishing loop
    (``itemsize``: bytes per value of X)."""
    tile = _TILE
    while (tile < 2048 and 2 * tile * k * itemsize <= 128 * 1024
           and 2 * tile * d * itemsize <= 256 * 1024):
        tile *= 2
    return tile


def _blas_tile(k, d, itemsize):
    """Rows per tile of :func:`_tiled_blas`: up to 2048, the tile's rows within 2 MB
    and its K × tile products within 1 MB (few calls from Python per chunk)."""
    tile = 2048
    while tile > _TILE and (tile * d * itemsize > 2 << 20 or tile * k * itemsize > 1 << 20):
        tile //= 2
    return tile
