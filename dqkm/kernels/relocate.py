"""Relocation of empty clusters (scikit-learn's rule), on one chunk or on the driver.

scikit-learn's Lloyd and Elkan iterations move every cluster that received
no weight in a pass to one of the points farthest from the center they were
assigned to: the ``m`` empty clusters (in increasing index) take the ``m``
rows with the largest squared distance to their assigned center (in
decreasing distance), each row's weighted contribution is taken out of its
old cluster's sum and weight and becomes the empty cluster's sum and
weight.  Nothing moves when every row sits on its center (distance 0: more
clusters than distinct points).  A cluster left with weight 0 afterwards is
placed at the center of the cluster of largest weight.

These kernels hold that rule; :mod:`dqkm.parallel.relocate` finds the rows
out of core (one pass over X, only when a pass left a cluster empty).
No dask, no I/O; inputs are never mutated.
"""

from __future__ import annotations

import numpy as np

__all__ = ["farthest_rows", "merge_farthest", "relocate_partials", "average_centers"]


def _order(distances, rows):
    """Indices sorting by decreasing distance, ties by increasing row."""
    return np.lexsort((rows, -distances))


def farthest_rows(min_sq_dist, labels, n, offset=0):
    """The ``n`` rows of a chunk farthest from their assigned centers.

    Parameters
    ----------
    min_sq_dist : ndarray of shape (n_rows,)
        Squared distance of every row to its assigned center.
    labels : ndarray of shape (n_rows,)
        The assigned center of every row.
    n : int
        How many rows to keep (fewer when the chunk has fewer rows).
    offset : int
        Global index of the chunk's first row.

    Returns
    -------
    (distances, rows, labels) : tuple of ndarray
        float64 distances in decreasing order (ties by increasing row), the
        rows' global indices (int64) and their labels (int32).

    Examples
    --------
    >>> import numpy as np
    >>> d, rows, lab = farthest_rows(np.array([1.0, 4.0, 4.0, 0.5]), np.array([0, 1, 0, 1]), 2, 10)
    >>> d.tolist(), rows.tolist(), lab.tolist()
    ([4.0, 4.0], [11, 12], [1, 0])
    """
    d = np.asarray(min_sq_dist, dtype=np.float64)
    n = min(int(n), d.shape[0])
    if n < d.shape[0]:
        # every row tied with the n-th largest distance stays a candidate (rows break ties)
        cut = np.partition(d, d.shape[0] - n)[d.shape[0] - n]
        cand = np.flatnonzero(d >= cut)
    else:
        cand = np.arange(d.shape[0])
    rows = cand.astype(np.int64) + int(offset)
    sel = _order(d[cand], rows)[:n]
    return d[cand][sel], rows[sel], np.asarray(labels, dtype=np.int32)[cand][sel]


def merge_farthest(parts, n):
    """The ``n`` farthest rows of several :func:`farthest_rows` results (same order)."""
    d = np.concatenate([p[0] for p in parts])
    rows = np.concatenate([p[1] for p in parts])
    labels = np.concatenate([p[2] for p in parts])
    sel = _order(d, rows)[:int(n)]
    return d[sel], rows[sel], labels[sel]


def relocate_partials(sums, weights, far_rows, far_weights, far_labels):
    """Move the farthest rows to the empty clusters: new ``(sums, weights, relocated)``.

    Parameters
    ----------
    sums : ndarray of shape (n_clusters, n_features)
        Weighted per-cluster sums of a pass (float64).
    weights : ndarray of shape (n_clusters,)
        Per-cluster weight (or count) of the same pass; the empty clusters
        are those of weight 0.
    far_rows : ndarray of shape (m, n_features)
        The rows farthest from their assigned centers, farthest first, at
        least as many as there are empty clusters (the extra are unused).
    far_weights : ndarray of shape (m,)
        Their sample weights.
    far_labels : ndarray of shape (m,)
        Their assigned clusters.

    Returns
    -------
    sums, weights : ndarray
        Copies, with each row's weighted values taken out of its old cluster
        and made the sum and weight of the empty cluster it moves to.
    relocated : list of int
        The clusters that received a row (the empty ones in increasing order).
    """
    sums = np.array(sums, dtype=np.float64)
    weights = np.array(weights, dtype=np.float64)
    empty = np.flatnonzero(weights == 0)
    if far_rows.shape[0] < empty.size:
        raise ValueError(f"{empty.size} empty clusters need as many rows; got "
                         f"{far_rows.shape[0]}.")
    for j, x, w, old in zip(empty, far_rows, far_weights, far_labels):
        wx = np.asarray(x, dtype=np.float64) * float(w)
        sums[old] -= wx
        sums[j] = wx
        weights[j] = float(w)
        weights[old] -= float(w)
    return sums, weights, [int(j) for j in empty]


def average_centers(sums, weights):
    """Centers from weighted sums: ``sums / weights``; a cluster of weight 0 (or
    less, by rounding) gets the center of the cluster of largest weight.

    Examples
    --------
    >>> import numpy as np
    >>> average_centers(np.array([[2.0], [0.0], [9.0]]), np.array([2.0, 0.0, 3.0])).ravel().tolist()
    [1.0, 3.0, 3.0]
    """
    weights = np.asarray(weights, dtype=np.float64)
    centers = np.zeros(np.shape(sums), dtype=np.float64)
    pos = weights > 0
    centers[pos] = np.asarray(sums, dtype=np.float64)[pos] / weights[pos, None]
    if not pos.all():
        centers[~pos] = centers[int(np.argmax(weights))]
    return centers
