"""The bounds of a row block as float32 rows, every bound rounded outward.

A bound-pruned pass over data re-read every pass (:mod:`dqkm.parallel.bounds`)
keeps each block's labels and bounds in a sidecar file
(:mod:`dqkm.data.row_state`) at 4 bytes a number: :func:`pack_state` rounds
the float64 upper bounds up and the lower bounds down to float32, so that a
bound read back is still a bound (the kernels of :mod:`dqkm.kernels.bounds`
take it as their float64 state).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["pack_state"]


@njit(nogil=True, cache=True, inline="always")
def _outward(b, v, x, up):
    """Bits of ``x`` (float64) rounded to float32 ``v`` (bits ``b``) outward: ``b``, or
    where ``v`` is on the wrong side of ``x``, ``np.nextafter(v, ±inf)`` (selects:
    half the values move, unpredictably, and a branch per value cost twice)."""
    nxt = b + (np.int32(1) if (v > 0) == up else np.int32(-1))
    nxt = (np.int32(1) if up else np.int32(-2147483647)) if v == 0 else nxt
    wrong = v < x if up else v > x
    return nxt if wrong else b


@njit(nogil=True, cache=True)
def _round_outward(x, out, up):  # OUT out
    """``x`` (float64, 1-D) in float32, each value moved one step outward where
    rounding put it on the wrong side; two loops over contiguous arrays, which
    vectorise (one loop over the interleaved rows cost 2.5 times as much)."""
    bits = out.view(np.int32)
    for r in range(x.shape[0]):
        out[r] = np.float32(x[r])
    for r in range(x.shape[0]):
        bits[r] = _outward(bits[r], out[r], x[r], up)


@njit(nogil=True, cache=True)
def _pack_rows(labels, upper, lower, out):  # OUT out
    n, w = lower.shape
    up = np.empty(n, dtype=np.float32)
    lo = np.empty(n * w, dtype=np.float32)
    _round_outward(upper, up, True)
    _round_outward(lower.reshape(n * w), lo, False)
    if w == 1:  # Hamerly: one pass over the rows
        for r in range(n):
            out[r, 0] = np.float32(labels[r])
            out[r, 1] = up[r]
            out[r, 2] = lo[r]
        return
    for r in range(n):
        out[r, 0] = np.float32(labels[r])
        out[r, 1] = up[r]
        for j in range(w):
            out[r, 2 + j] = lo[r * w + j]


def pack_state(labels, upper, lower):
    """A chunk's bounds as one float32 row per row: ``(label, upper, lower…)``; the
    label exact (below 2²⁴ clusters), the upper bound rounded up and the lower
    bound(s) down, so that every bound stays a bound (NaN stays NaN).

    Parameters
    ----------
    labels : ndarray of shape (n_rows,), integer
    upper : ndarray of shape (n_rows,), float64
    lower : ndarray of shape (n_rows,) or (n_rows, n_clusters), float64

    Returns
    -------
    ndarray of shape (n_rows, 2 + lower's columns), float32
    """
    lower = np.ascontiguousarray(lower, dtype=np.float64).reshape(labels.shape[0], -1)
    out = np.empty((labels.shape[0], 2 + lower.shape[1]), dtype=np.float32)
    _pack_rows(np.ascontiguousarray(labels), np.ascontiguousarray(upper, dtype=np.float64),
               lower, out)
    return out
