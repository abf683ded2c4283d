"""Nearest center of a tile of rows by direct distances (no GEMM), for low dimension.

The tile is stored transposed (``XT`` of shape ``(d_padded, tile)``): one
feature of all the tile's rows is contiguous, so every loop below runs across
the rows in SIMD lanes, with one center's coordinates held in registers.  The
features are taken four at a time (two for the first block when the padded
dimension is not a multiple of four): ``dist`` is read and written once per
four features, and the last block is fused with the compare-and-select, so at
``d ≤ 4`` a center costs a single pass over the tile and the distances never
leave registers.  Two centers share each pass (each loaded feature serves
both), which halves the loads and stores per center.  The padding (features of ``XT`` and of the centers set to
zero) adds exact zeros.

The distances ``Σ_f (x_f − c_f)²`` are formed in the tile's dtype; unlike the
expansion ``‖x‖² − 2x·c + ‖c‖²`` they lose no precision on data far from the
origin.  Ties go to the lowest index (strict ``<`` with the centers scanned in
increasing order) and a NaN distance never wins.  The second smallest distance
is kept beside the smallest, so that the caller can tell a near-tie, where
this rounding could decide, from a clear nearest center.

Pure: ``best``, ``dist`` and ``lab`` are the caller's scratch buffers.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["argmin_direct", "transpose_tile"]

# as in .lloyd: reassociation lets LLVM vectorise; nothing assumes finite values
_FASTMATH = {"reassoc", "contract", "nsz"}


@njit(nogil=True, cache=True)
def transpose_tile(X, start, t, XT):  # OUT XT
    """``XT[f, i] = X[start + i, f]`` for the tile's ``t`` rows (the padding stays zero).

    Written out for two to four features (a loop per column over the rows, each
    feature's row of ``XT`` its own stream): the loop over the features inside the
    loop over the rows took three times as long at two features, where the
    transpose cost as much as the distances (1M rows, K = 16)."""
    d = X.shape[1]
    if d == 2:
        x0, x1 = XT[0], XT[1]
        for i in range(t):
            x0[i] = X[start + i, 0]
            x1[i] = X[start + i, 1]
    elif d == 3:
        x0, x1, x2 = XT[0], XT[1], XT[2]
        for i in range(t):
            x0[i] = X[start + i, 0]
            x1[i] = X[start + i, 1]
            x2[i] = X[start + i, 2]
    elif d == 4:
        x0, x1, x2, x3 = XT[0], XT[1], XT[2], XT[3]
        for i in range(t):
            x0[i] = X[start + i, 0]
            x1[i] = X[start + i, 1]
            x2[i] = X[start + i, 2]
            x3[i] = X[start + i, 3]
    else:
        for i in range(t):
            for f in range(d):
                XT[f, i] = X[start + i, f]


@njit(nogil=True, cache=True, fastmath=_FASTMATH)
def _first2(XT, c, t, dist):  # OUT dist
    x0, x1 = XT[0], XT[1]
    c0, c1 = c[0], c[1]
    for i in range(t):
        u0 = x0[i] - c0
        u1 = x1[i] - c1
        dist[i] = u0 * u0 + u1 * u1


@njit(nogil=True, cache=True, fastmath=_FASTMATH)
def _first4(XT, c, t, dist):  # OUT dist
    x0, x1, x2, x3 = XT[0], XT[1], XT[2], XT[3]
    c0, c1, c2, c3 = c[0], c[1], c[2], c[3]
    for i in range(t):
        u0 = x0[i] - c0
        u1 = x1[i] - c1
        u2 = x2[i] - c2
        u3 = x3[i] - c3
        dist[i] = (u0 * u0 + u1 * u1) + (u2 * u2 + u3 * u3)


@njit(nogil=True, cache=True, fastmath=_FASTMATH)
def _add4(XT, f, c, t, dist):  # OUT dist
    x0, x1, x2, x3 = XT[f], XT[f + 1], XT[f + 2], XT[f + 3]
    c0, c1, c2, c3 = c[f], c[f + 1], c[f + 2], c[f + 3]
    for i in range(t):
        u0 = x0[i] - c0
        u1 = x1[i] - c1
        u2 = x2[i] - c2
        u3 = x3[i] - c3
        dist[i] += (u0 * u0 + u1 * u1) + (u2 * u2 + u3 * u3)


@njit(nogil=True, cache=True, fastmath=_FASTMATH, inline="always")
def _select1(v, i, j, best, sec, lab):  # OUT best, sec, lab
    """Center ``j`` at distance ``v`` against row i's best and second best."""
    b = best[i]
    s = sec[i]
    old = lab[i]
    m = v < b
    sec[i] = b if m else (v if v < s else s)
    best[i] = v if m else b
    lab[i] = j if m else old


@njit(nogil=True, cache=True, fastmath=_FASTMATH)
def _only2(XT, c, t, j, best, sec, lab):  # OUT best, sec, lab
    x0, x1 = XT[0], XT[1]
    c0, c1 = c[0], c[1]
    for i in range(t):
        u0 = x0[i] - c0
        u1 = x1[i] - c1
        _select1(u0 * u0 + u1 * u1, i, j, best, sec, lab)


@njit(nogil=True, cache=True, fastmath=_FASTMATH)
def _last4(XT, f, c, t, j, dist, best, sec, lab):  # OUT best, sec, lab
    """Features ``f … f+3`` added to ``dist`` (``dist`` unused when ``f`` is 0)."""
    x0, x1, x2, x3 = XT[f], XT[f + 1], XT[f + 2], XT[f + 3]
    c0, c1, c2, c3 = c[f], c[f + 1], c[f + 2], c[f + 3]
    if f == 0:
        for i in range(t):
            u0 = x0[i] - c0
            u1 = x1[i] - c1
            u2 = x2[i] - c2
            u3 = x3[i] - c3
            _select1((u0 * u0 + u1 * u1) + (u2 * u2 + u3 * u3), i, j, best, sec, lab)
    else:
        for i in range(t):
            u0 = x0[i] - c0
            u1 = x1[i] - c1
            u2 = x2[i] - c2
            u3 = x3[i] - c3
            _select1(dist[i] + ((u0 * u0 + u1 * u1) + (u2 * u2 + u3 * u3)), i, j, best, sec,
                     lab)


# Two centers per pass: each feature of the tile is loaded once for both, and
# ``best``/``lab`` are read and written once per pair (half the memory traffic of
# one center per pass, which made the loop load-bound).  Center ``a`` is compared
# before ``b = a + 1``, so the lower index still wins ties.


@njit(nogil=True, cache=True, fastmath=_FASTMATH, inline="always")
def _select2(va, vb, i, ja, jb, best, sec, lab):  # OUT best, sec, lab
    b = best[i]
    s = sec[i]
    old = lab[i]
    m = va < b
    s = b if m else (va if va < s else s)
    b = va if m else b
    old = ja if m else old
    m2 = vb < b
    sec[i] = b if m2 else (vb if vb < s else s)
    best[i] = vb if m2 else b
    lab[i] = jb if m2 else old


@njit(nogil=True, cache=True, fastmath=_FASTMATH)
def _pair_only2(XT, ca, cb, t, ja, jb, best, sec, lab):  # OUT best, sec, lab
    x0, x1 = XT[0], XT[1]
    a0, a1, b0, b1 = ca[0], ca[1], cb[0], cb[1]
    for i in range(t):
        y0 = x0[i]
        y1 = x1[i]
        u0 = y0 - a0
        u1 = y1 - a1
        w0 = y0 - b0
        w1 = y1 - b1
        _select2(u0 * u0 + u1 * u1, w0 * w0 + w1 * w1, i, ja, jb, best, sec, lab)


@njit(nogil=True, cache=True, fastmath=_FASTMATH)
def _pair_first2(XT, ca, cb, t, da, db):  # OUT da, db
    x0, x1 = XT[0], XT[1]
    a0, a1, b0, b1 = ca[0], ca[1], cb[0], cb[1]
    for i in range(t):
        y0 = x0[i]
        y1 = x1[i]
        u0 = y0 - a0
        u1 = y1 - a1
        w0 = y0 - b0
        w1 = y1 - b1
        da[i] = u0 * u0 + u1 * u1
        db[i] = w0 * w0 + w1 * w1


@njit(nogil=True, cache=True, fastmath=_FASTMATH)
def _pair_block4(XT, f, ca, cb, t, da, db, first):  # OUT da, db
    """Features ``f … f+3`` of both centers: stored (``first``) or added."""
    x0, x1, x2, x3 = XT[f], XT[f + 1], XT[f + 2], XT[f + 3]
    a0, a1, a2, a3 = ca[f], ca[f + 1], ca[f + 2], ca[f + 3]
    b0, b1, b2, b3 = cb[f], cb[f + 1], cb[f + 2], cb[f + 3]
    if first:
        for i in range(t):
            y0, y1, y2, y3 = x0[i], x1[i], x2[i], x3[i]
            u0, u1, u2, u3 = y0 - a0, y1 - a1, y2 - a2, y3 - a3
            w0, w1, w2, w3 = y0 - b0, y1 - b1, y2 - b2, y3 - b3
            da[i] = (u0 * u0 + u1 * u1) + (u2 * u2 + u3 * u3)
            db[i] = (w0 * w0 + w1 * w1) + (w2 * w2 + w3 * w3)
    else:
        for i in range(t):
            y0, y1, y2, y3 = x0[i], x1[i], x2[i], x3[i]
            u0, u1, u2, u3 = y0 - a0, y1 - a1, y2 - a2, y3 - a3
            w0, w1, w2, w3 = y0 - b0, y1 - b1, y2 - b2, y3 - b3
            da[i] += (u0 * u0 + u1 * u1) + (u2 * u2 + u3 * u3)
            db[i] += (w0 * w0 + w1 * w1) + (w2 * w2 + w3 * w3)


@njit(nogil=True, cache=True, fastmath=_FASTMATH)
def _pair_last4(XT, f, ca, cb, t, ja, jb, da, db, best, sec, lab):  # OUT best, sec, lab
    """Features ``f … f+3`` of both centers and the select (``da``/``db`` unused at ``f`` = 0)."""
    x0, x1, x2, x3 = XT[f], XT[f + 1], XT[f + 2], XT[f + 3]
    a0, a1, a2, a3 = ca[f], ca[f + 1], ca[f + 2], ca[f + 3]
    b0, b1, b2, b3 = cb[f], cb[f + 1], cb[f + 2], cb[f + 3]
    if f == 0:
        for i in range(t):
            y0, y1, y2, y3 = x0[i], x1[i], x2[i], x3[i]
            u0, u1, u2, u3 = y0 - a0, y1 - a1, y2 - a2, y3 - a3
            w0, w1, w2, w3 = y0 - b0, y1 - b1, y2 - b2, y3 - b3
            _select2((u0 * u0 + u1 * u1) + (u2 * u2 + u3 * u3),
                     (w0 * w0 + w1 * w1) + (w2 * w2 + w3 * w3), i, ja, jb, best, sec, lab)
    else:
        for i in range(t):
            y0, y1, y2, y3 = x0[i], x1[i], x2[i], x3[i]
            u0, u1, u2, u3 = y0 - a0, y1 - a1, y2 - a2, y3 - a3
            w0, w1, w2, w3 = y0 - b0, y1 - b1, y2 - b2, y3 - b3
            _select2(da[i] + ((u0 * u0 + u1 * u1) + (u2 * u2 + u3 * u3)),
                     db[i] + ((w0 * w0 + w1 * w1) + (w2 * w2 + w3 * w3)), i, ja, jb,
                     best, sec, lab)


@njit(nogil=True, cache=True)
def _one_center(XT, t, c, jj, best, sec, dist, lab):  # OUT best, sec, dist, lab
    """Center ``c`` (index ``jj``) against the tile, one center per pass."""
    dp = XT.shape[0]
    if dp == 2:
        _only2(XT, c, t, jj, best, sec, lab)
        return
    f = 0
    if dp > 4:
        if dp % 4 == 2:
            _first2(XT, c, t, dist)
            f = 2
        else:
            _first4(XT, c, t, dist)
            f = 4
        while f + 4 < dp:
            _add4(XT, f, c, t, dist)
            f += 4
    _last4(XT, f, c, t, jj, dist, best, sec, lab)


@njit(nogil=True, cache=True)
def argmin_direct(XT, t, centers, best, sec, dist, dist2, lab):  # OUT best, sec, dist, dist2, lab
    """``lab[i] = argmin_j ‖XT[:, i] − centers[j]‖²``, ``best[i]`` its value and
    ``sec[i]`` the second smallest value (over the other centers), ``i < t``.

    ``XT`` has shape ``(dp, tile)`` and ``centers`` ``(k, dp)``, ``dp`` even
    and ≥ 2 (pad both with zero features); ``best``, ``sec``, ``dist`` and ``dist2``
    (X's dtype) and ``lab`` (int32) hold at least ``t`` entries.  ``best`` is +inf and
    ``lab`` 0 for a row whose distances are all NaN or +inf; ``sec`` is +inf when K = 1.
    The second smallest value lets the caller certify the label against the
    kernel's rounding (:func:`dqkm.kernels.lloyd._certify_direct`).
    """
    dp = XT.shape[0]
    k = centers.shape[0]
    for i in range(t):
        best[i] = np.inf
        sec[i] = np.inf
        lab[i] = 0
    for j in range(0, k - 1, 2):
        ca, cb = centers[j], centers[j + 1]
        ja, jb = np.int32(j), np.int32(j + 1)
        if dp == 2:
            _pair_only2(XT, ca, cb, t, ja, jb, best, sec, lab)
            continue
        f = 0
        if dp > 4:
            if dp % 4 == 2:
                _pair_first2(XT, ca, cb, t, dist, dist2)
                f = 2
            else:
                _pair_block4(XT, 0, ca, cb, t, dist, dist2, True)
                f = 4
            while f + 4 < dp:
                _pair_block4(XT, f, ca, cb, t, dist, dist2, False)
                f += 4
        _pair_last4(XT, f, ca, cb, t, ja, jb, dist, dist2, best, sec, lab)
    if k % 2:
        _one_center(XT, t, centers[k - 1], np.int32(k - 1), best, sec, dist, lab)
