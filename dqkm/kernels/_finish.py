"""The finishing loop every dense Lloyd kernel shares: per row, the exact float64
squared distance to its assigned center and (optionally) the row added to its
cluster's float64 sum and count.

The GEMM, direct and bound-pruned kernels all finish through :func:`_finish_tile`
(and :func:`_finish_row`), so for the same labels their sums and objective are
bit-identical.  Also :func:`column_moments`, what the first pass of a fit adds per
chunk for scikit-learn's relative tolerance.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Reassociation lets LLVM vectorise the float64 distance sum of each row (the
# loop is otherwise scalar and costs as much as the GEMM at K = 64); the sum
# stays float64, only its order of additions changes.
_FASTMATH = {"reassoc", "contract", "nsz"}


@njit(nogil=True, cache=True, fastmath=_FASTMATH, inline="always")
def _finish_row(X, r, arg, centers, sums, counts, with_sums):  # OUT sums, counts
    """Row r assigned to ``arg``: the exact ‖x − c_arg‖² in float64 and (with
    ``with_sums``) the row added to its cluster's float64 sum and count."""
    d = X.shape[1]
    dist = 0.0
    if with_sums:
        counts[arg] += 1
        for f in range(d):
            xv = X[r, f]
            sums[arg, f] += xv
            diff = np.float64(xv) - np.float64(centers[arg, f])
            dist += diff * diff
    else:
        for f in range(d):
            diff = np.float64(X[r, f]) - np.float64(centers[arg, f])
            dist += diff * diff
    return dist


@njit(nogil=True, cache=True, fastmath=_FASTMATH)
def _rows_given_labels(X, labels, centers, sums, counts, mind):  # OUT sums, counts, mind
    """Per-cluster float64 sums and counts, and each row's exact ‖x − c_label‖² (float64)."""
    return _finish_tile(X, 0, X.shape[0], centers, sums, counts, labels, mind, True, 0.0)


@njit(nogil=True, cache=True, fastmath=_FASTMATH)
def _finish_tile(X, start, stop, centers, sums, counts, labels, mind, with_sums, objective):  # OUT sums, counts, mind
    """:func:`_finish_row` for rows ``start … stop``; ``objective`` plus their distances.

    The one finishing loop of every dense kernel (GEMM, direct, bound-pruned):
    the same rows in the same order give bit-identical sums and objective.
    """
    if X.shape[1] == 2 and with_sums:
        return _finish_tile_2d(X, start, stop, centers, sums, counts, labels, mind, objective)
    if X.shape[1] == 3 and with_sums:
        return _finish_tile_3d(X, start, stop, centers, sums, counts, labels, mind, objective)
    for r in range(start, stop):
        d2 = _finish_row(X, r, labels[r], centers, sums, counts, with_sums)
        mind[r] = d2
        objective += d2
    return objective


@njit(nogil=True, cache=True, fastmath=_FASTMATH)
def _finish_tile_2d(X, start, stop, centers, sums, counts, labels, mind, objective):  # OUT sums, counts, mind
    """:func:`_finish_tile` with sums for two features, written out: the loop over the
    features of :func:`_finish_row` made it cost twice as much (same additions, same
    order; three features: :func:`_finish_tile_3d`)."""
    for r in range(start, stop):
        a = labels[r]
        x0 = X[r, 0]
        x1 = X[r, 1]
        counts[a] += 1
        sums[a, 0] += x0
        sums[a, 1] += x1
        u0 = np.float64(x0) - np.float64(centers[a, 0])
        u1 = np.float64(x1) - np.float64(centers[a, 1])
        dist = 0.0
        dist += u0 * u0
        dist += u1 * u1
        mind[r] = dist
        objective += dist
    return objective


@njit(nogil=True, cache=True, fastmath=_FASTMATH)
def _finish_tile_3d(X, start, stop, centers, sums, counts, labels, mind, objective):  # OUT sums, counts, mind
    for r in range(start, stop):
        a = labels[r]
        x0 = X[r, 0]
        x1 = X[r, 1]
        x2 = X[r, 2]
        counts[a] += 1
        sums[a, 0] += x0
        sums[a, 1] += x1
        sums[a, 2] += x2
        u0 = np.float64(x0) - np.float64(centers[a, 0])
        u1 = np.float64(x1) - np.float64(centers[a, 1])
        u2 = np.float64(x2) - np.float64(centers[a, 2])
        dist = 0.0
        dist += u0 * u0
        dist += u1 * u1
        dist += u2 * u2
        mind[r] = dist
        objective += dist
    return objective


@njit(nogil=True, cache=True)
def column_moments(X):
    """Per column of ``X`` (float32 or float64), the float64 sum and sum of squares,
    in one pass over the rows (no float64 copy, no temporaries): what the tolerance of
    a fit needs (count, mean and Σx² − n·mean² per feature).  Each column's sums run in
    row order; a non-finite value makes its column's sums non-finite."""
    d = X.shape[1]
    s = np.zeros(d)
    q = np.zeros(d)
    for i in range(X.shape[0]):
        for j in range(d):
            v = np.float64(X[i, j])
            s[j] += v
            q[j] += v * v
    return s, q
