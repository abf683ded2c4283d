"""Nearest center of a tile of rows by direct distances (no GEMM), for low dimension.

The tile is stored transposed (``XT`` of shape ``(d_padded, tile)``): one
feature of all the tile's rows is contiguous, so every loop below runs across
the rows in SIMD lanes, with one center's coordinates held in registers.  The
features are taken four at a time (two for the first block when the padded
dimension is not a multiple of four): ``dist`` is read and written once per
four features, and the last block is fused with the compare-and-select, so at
``d ≤ 4`` a center costs a single pass over the tile and the distances never
leave registers.  The padding (features of ``XT`` and of the centers set to
zero) adds exact zeros.

The distances ``Σ_f (x_f − c_f)²`` are formed in the tile's dtype; unlike the
expansion ``‖x‖² − 2x·c + ‖c‖²`` they lose no precision on data far from the
origin.  Ties go to the lowest index (strict ``<`` with the centers scanned in
increasing order) and a NaN distance never wins.

Pure: ``best``, ``dist`` and ``lab`` are the caller's scratch buffers.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["argmin_direct"]

# as in .lloyd: reassociation lets LLVM vectorise; nothing assumes finite values
_FASTMATH = {"reassoc", "contract", "nsz"}


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


@njit(nogil=True, cache=True, fastmath=_FASTMATH)
def _only2(XT, c, t, j, best, lab):  # OUT best, lab
    x0, x1 = XT[0], XT[1]
    c0, c1 = c[0], c[1]
    for i in range(t):
        u0 = x0[i] - c0
        u1 = x1[i] - c1
        v = u0 * u0 + u1 * u1
        b = best[i]
        old = lab[i]
        m = v < b
        best[i] = v if m else b
        lab[i] = j if m else old


@njit(nogil=True, cache=True, fastmath=_FASTMATH)
def _last4(XT, f, c, t, j, dist, best, lab):  # OUT best, lab
    """Features ``f … f+3`` added to ``dist`` (``dist`` unused when ``f`` is 0)."""
    x0, x1, x2, x3 = XT[f], XT[f + 1], XT[f + 2], XT[f + 3]
    c0, c1, c2, c3 = c[f], c[f + 1], c[f + 2], c[f + 3]
    if f == 0:
        for i in range(t):
            u0 = x0[i] - c0
            u1 = x1[i] - c1
            u2 = x2[i] - c2
            u3 = x3[i] - c3
            v = (u0 * u0 + u1 * u1) + (u2 * u2 + u3 * u3)
            b = best[i]
            old = lab[i]
            m = v < b
            best[i] = v if m else b
            lab[i] = j if m else old
    else:
        for i in range(t):
            u0 = x0[i] - c0
            u1 = x1[i] - c1
            u2 = x2[i] - c2
            u3 = x3[i] - c3
            v = dist[i] + ((u0 * u0 + u1 * u1) + (u2 * u2 + u3 * u3))
            b = best[i]
            old = lab[i]
            m = v < b
            best[i] = v if m else b
            lab[i] = j if m else old


@njit(nogil=True, cache=True)
def argmin_direct(XT, t, centers, best, dist, lab):  # OUT best, dist, lab
    """``lab[i] = argmin_j ‖XT[:, i] − centers[j]‖²`` and ``best[i]`` its value, ``i < t``.

    ``XT`` has shape ``(dp, tile)`` and ``centers`` ``(k, dp)``, ``dp`` even
    and ≥ 2 (pad both with zero features); ``best`` and ``dist`` (X's dtype)
    and ``lab`` (int32) hold at least ``t`` entries.  ``best`` is +inf and
    ``lab`` 0 for a row whose distances are all NaN or +inf.
    """
    dp = XT.shape[0]
    first = 2 if dp % 4 == 2 else 4
    for i in range(t):
        best[i] = np.inf
        lab[i] = 0
    for j in range(centers.shape[0]):
        jj = np.int32(j)
        c = centers[j]
        if dp == 2:
            _only2(XT, c, t, jj, best, lab)
            continue
        f = 0
        if dp > 4:
            if first == 2:
                _first2(XT, c, t, dist)
            else:
                _first4(XT, c, t, dist)
            f = first
            while f + 4 < dp:
                _add4(XT, f, c, t, dist)
                f += 4
        _last4(XT, f, c, t, jj, dist, best, lab)
