"""Empty clusters relocated to the farthest rows (scikit-learn's rule), out of core.

``KMeans(empty_clusters='relocate')`` hands :func:`relocate_empty_clusters`
to the Lloyd and bound-pruned steps (:func:`dqkm.parallel.lloyd.lloyd_step`,
:meth:`dqkm.parallel.bounds.BoundedPasses.step`), which call it only when
their pass left a cluster with weight 0.  It then makes one more pass over X
(every chunk returns its top ``m`` rows by squared distance to their
assigned center, ``m`` the number of empty clusters, as (distance, global
row, label); the tree reduction keeps the top ``m``), reads those ``m`` rows
(and their weights), and applies :func:`dqkm.kernels.relocate.relocate_partials`
on the driver.  A fit whose passes leave no cluster empty makes no extra pass.

The bounds of 'hamerly' and 'elkan' stay valid: they are moved by the exact
shift of every center between two passes, a relocated center's included.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import scipy.sparse as sp

from ..kernels.relocate import average_centers, farthest_rows, merge_farthest, relocate_partials
from .engine import broadcast, compute, map_blocks_reduce
from .lloyd import _assign

__all__ = ["farthest_rows_pass", "relocate_empty_clusters"]


def _farthest_chunk(block, centers, n, index, offset):
    labels, mind = _assign(block, centers)
    return farthest_rows(mind, labels, n, offset)


def farthest_rows_pass(X, centers, n, *, split_every=None):
    """The ``n`` rows of X farthest from their nearest center (one pass).

    Returns ``(distances, rows, labels)``: squared distances in decreasing
    order (ties by increasing row), global row indices and the rows' labels.
    """
    c = broadcast(np.ascontiguousarray(centers, dtype=X.dtype), "centers")
    d = map_blocks_reduce(X, _farthest_chunk, partial(merge_farthest, n=n), args=(c, int(n)),
                          split_every=split_every, with_offsets=True, name="farthest-rows")
    (res,) = compute(d)
    return res


def _rows(X, sample_weight, rows):
    """X's rows ``rows`` (dense float64, in that order) and their weights."""
    order = np.argsort(rows, kind="stable")
    idx = rows[order]
    if sample_weight is None:
        (got,) = compute(X[idx])
        w = np.ones(len(idx))
    else:
        got, w = compute(X[idx], sample_weight[idx])
    got = got.toarray() if sp.issparse(got) else np.asarray(got)
    out, wout = np.empty(got.shape, dtype=np.float64), np.empty(len(idx))
    out[order], wout[order] = got, np.asarray(w, dtype=np.float64)
    return out, wout


def relocate_empty_clusters(X, centers, sums, weights, *, sample_weight=None,
                            split_every=None):
    """The new centers of a pass that left clusters empty, by scikit-learn's rule.

    Parameters
    ----------
    X : dask.array.Array of shape (n_samples, n_features), dense or CSR chunks
    centers : ndarray of shape (n_clusters, n_features)
        The centers the pass assigned the rows to.
    sums, weights : ndarray
        The pass's weighted per-cluster sums (float64) and weights (counts
        without ``sample_weight``); the empty clusters are those of weight 0.
    sample_weight : dask.array.Array of shape (n_samples,) or None
        The fit's weights, with X's row chunks.
    split_every : int or None
        Fan-in of the tree reduction.

    Returns
    -------
    new_centers : ndarray of shape (n_clusters, n_features), float64
    info : dict
        ``relocated``: the clusters that received a row (empty when every row
        sits on its center); ``empty_after_relocation``: the clusters of
        weight 0 afterwards, placed at the center of the heaviest cluster.
    """
    weights = np.asarray(weights, dtype=np.float64)
    n_empty = int(np.count_nonzero(weights == 0))
    relocated = []
    if n_empty:
        dist, rows, labels = farthest_rows_pass(X, centers, n_empty, split_every=split_every)
        if dist.size and dist[0] > 0:  # else every row sits on its center: nothing to move
            far, far_w = _rows(X, sample_weight, rows)
            sums, weights, relocated = relocate_partials(sums, weights, far, far_w, labels)
    new = average_centers(sums, weights)
    return new, {"relocated": relocated,
                 "empty_after_relocation": np.flatnonzero(weights <= 0).tolist()}
