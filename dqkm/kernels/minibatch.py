"""One mini-batch K-means step on a batch of rows (Sculley's update).

"Web-scale k-means clustering", D. Sculley, WWW 2010: every center moves
towards the mean of the batch rows assigned to it with a per-center learning
rate of one over the weight the center has seen, so a center is the running
(weighted) mean of every row ever assigned to it. Rarely hit centers are moved
to random batch rows (scikit-learn's ``reassignment_ratio`` rule).

Pure NumPy/SciPy on one batch (dense, or a ``scipy.sparse`` CSR batch): no
Dask, no state kept here.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .lloyd import assign_labels, weighted_cluster_sums
from .lloyd_sparse import as_csr, assign_labels_csr

__all__ = ["minibatch_step"]


def _assign(X, centers):
    if sp.issparse(X):
        return assign_labels_csr(as_csr(X, "MiniBatchKMeans"), centers)
    return assign_labels(X, centers)


def minibatch_step(X, weights, centers, weight_sums, *, rng=None, reassign=False,
                   reassignment_ratio=0.01):
    """Update ``centers`` with the batch ``X`` (rows weighted by ``weights``).

    Parameters
    ----------
    X : ndarray or scipy.sparse CSR matrix of shape (n, n_features), float32 or float64
    weights : ndarray of shape (n,), float64, non-negative
    centers : ndarray of shape (n_clusters, n_features), float64
    weight_sums : ndarray of shape (n_clusters,), float64
        Weight each center has seen so far (not modified).
    rng : numpy Generator, used only when ``reassign`` is True
    reassign : bool
        Move the centers whose weight is below ``reassignment_ratio`` times the
        largest to random rows of the batch (drawn by weight, without
        replacement; at most half the batch).
    reassignment_ratio : float

    Returns
    -------
    centers : ndarray (n_clusters, n_features), float64, the updated centers
    weight_sums : ndarray (n_clusters,), float64
    inertia : float, the batch's weighted sum of squared distances to the
        centers *before* the update
    labels : ndarray (n,), int64, the batch rows' centers before the update
    n_reassigned : int
    """
    K = centers.shape[0]
    labels, mind = _assign(X, centers.astype(X.dtype))
    labels = labels.astype(np.int64, copy=False)
    inertia = float(np.dot(weights, mind))
    sums, bw = weighted_cluster_sums(X, labels, weights, K)
    new = np.array(centers, dtype=np.float64, copy=True)
    ws = weight_sums + bw
    hit = bw > 0
    new[hit] = (centers[hit] * weight_sums[hit, None] + sums[hit]) / ws[hit, None]
    n_reassigned = 0
    if reassign and reassignment_ratio > 0:
        low = ws < reassignment_ratio * ws.max()
        if low.sum() > 0.5 * X.shape[0]:  # at most half the batch becomes centers
            keep = np.argsort(ws, kind="stable")[int(0.5 * X.shape[0]):]
            low[keep] = False
        n_reassigned = int(low.sum())
        positive = np.flatnonzero(weights > 0)
        if n_reassigned and positive.size >= n_reassigned:
            p = weights[positive] / weights[positive].sum()
            rows = rng.choice(positive, size=n_reassigned, replace=False, p=p)
            new[low] = X[rows].toarray() if sp.issparse(X) else X[rows]
            # not so small that they are reassigned again at once
            ws[low] = ws[~low].min() if (~low).any() else 0.0
        else:
            n_reassigned = 0
    return new, ws, inertia, labels, n_reassigned
