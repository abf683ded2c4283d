"""Lloyd's K-means on one chunk of rows: assignment, partial sums, objective.

The squared distance is split as ``‖x − c‖² = ‖x‖² − 2 x·c + ‖c‖²``.  Only the
last two terms decide the argmin, so the assignment is one GEMM ``X·Cᵀ`` per
tile of rows plus ``‖c‖²``.  The tile (``_TILE`` rows, up to 2048 for few
centers: :func:`_gemm_tile`) is small enough that the
``tile × K`` block of products stays in cache while the argmin, the per-cluster
sums and the exact objective are accumulated, so each row of X is read from
memory once per pass.

At low dimension the expansion loses the distances to cancellation on data
far from the origin, and below ``_GEMM_MIN_D`` features (``_GEMM_MIN_D_MANY`` from
``_MANY_CENTERS`` centers; float32 X with fewer centers up to ``_DIRECT_MAX_D``)
the GEMM is a poor use of the machine (its inner dimension is ``n_features``).  There the assignment
computes ``Σ_f (x_f − c_f)²`` directly, across a transposed tile of rows in SIMD
lanes (:mod:`dqkm.kernels._direct`).  From ``_GEMM_MIN_D`` to ``_DIRECT_MAX_D``
features a block goes to the GEMM kernel with certified labels (below) when a
probe of ``_PROBE_ROWS`` rows spread over it finds at most one in 32 of them
within the GEMM's rounding bound of a tie (data near the origin), else to the
direct kernel (data whose spread is small beside its distance from the origin,
where certifying would rescan most rows); the thresholds come from
``benchmarks/bench_lloyd_kernel.py``.  The choice is automatic and changes no result: every
kernel gives the lowest index on ties and the same float64 sums, counts and
per-row exact distances (the finishing pass is shared).

Labels are exact.  Each kernel keeps the second smallest value beside the
smallest and bounds its own rounding: where the two are closer than that bound
(a near-tie) the row is decided by :func:`exact_sq_dist`, the float64 distance
summed in feature order, lowest index on ties.  So the direct kernel (any
dtype), the GEMM kernel on float64 X and on float32 X up to ``_DIRECT_MAX_D``
features give the labels of exact float64 distances, the same as the
bound-pruned kernels (:mod:`dqkm.kernels.bounds`) whatever the order of their
sums.  The float32 GEMM kernel above ``_DIRECT_MAX_D`` features keeps its
float32 rounding: its error grows with the data's distance from the origin,
where certifying would rescan most rows.

All kernels here are pure: they never mutate their inputs and hold no state.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit

from ._direct import argmin_direct, transpose_tile
from ._finish import _FASTMATH, _finish_row, _finish_tile, _rows_given_labels
from ._exact import _certifies_cheaply, _certify_direct, _direct_rounding, exact_sq_dist
from ._gemm import _TILE, _blas_tile, _gemm_tile, _mark_overflow, _tiled, _tiled_blas

__all__ = ["lloyd_partials", "assign_labels", "squared_norms", "partials_from_products",
           "partials_from_labels", "weighted_cluster_sums", "lloyd_partials_weighted",
           "exact_sq_dist"]

# Up to this many features every label is certified exact (the direct kernel, module
# _direct, or the GEMM kernel with its certification); above it float32 X keeps the
# float32 GEMM's rounding.  Below _GEMM_MIN_D features (_GEMM_MIN_D_MANY with at least
# _MANY_CENTERS centers, where the direct kernel's compare-and-select per center costs
# more; _GEMM_MIN_D_F32 for float32 X with fewer centers) always the direct kernel;
# from there the GEMM kernel where a probe of _PROBE_ROWS rows finds its certification
# cheap (_gemm_min_d).  See the module docstring.
_DIRECT_MAX_D = 32
_GEMM_MIN_D = 20
_GEMM_MIN_D_F32 = _DIRECT_MAX_D + 1  # float32, K < 64: the direct kernel up to 32 features
_GEMM_MIN_D_MANY = 12
_MANY_CENTERS = 64
_NO_LOW = np.empty(0)  # no lower bounds wanted (the numba kernels' empty argument)
_PROBE_ROWS = 64
# True: the uncertified GEMM path forms its products by NumPy's BLAS from a Python loop
# over larger tiles (module _gemm); False: by numba's np.dot inside the compiled tile
# loop, as the certified path.  benchmarks/bench_lloyd_kernel.py times both: numba's
# tiles took 13-26 % less time per chunk at every D and K it measures above 32 features
# (on another machine, NumPy's 12-22 % less: see module _gemm).
_BLAS_TILES = False


@njit(nogil=True, cache=True, fastmath=_FASTMATH)
def _finish_rows(X, g, start, half_norms, centers, sums, counts, labels, mind, with_sums):  # OUT sums, counts, labels, mind
    """Rows ``start … start + len(g)`` of X, given their products ``g`` with the centers.

    label = argmin_k ½‖c_k‖² − g[i, k] in the dtype of ``g`` (half of
    ‖c_k‖² − 2·g[i, k], exactly: scaling by 2 does not round; the lower index
    wins ties); then, in one loop over the row, the exact ‖x − c_label‖² in
    float64 and (with ``with_sums``) the row added to its cluster's float64 sum.
    """
    k = g.shape[1]
    objective = 0.0
    for i in range(g.shape[0]):
        best = half_norms[0] - g[i, 0]
        arg = 0
        for j in range(1, k):
            v = half_norms[j] - g[i, j]
            if v < best:
                best = v
                arg = j
        r = start + i
        labels[r] = arg
        dist = _finish_row(X, r, arg, centers, sums, counts, with_sums)
        mind[r] = dist
        objective += dist
    return objective


@njit(nogil=True, cache=True)  # no fastmath here: it slowed the tile loop twofold at D = 2
def _direct(X, centers, cpad, cpad64, tile, margin, tiny, margin64, tiny64, sums, counts, labels,
            mind, with_sums, low):  # OUT sums, counts, labels, mind, low
    """:func:`_tiled` with direct distances (:func:`~dqkm.kernels._direct.argmin_direct`)
    in place of the GEMM, for ``n_features ≤ _DIRECT_MAX_D``; ``tile`` rows at a time.

    ``cpad``/``cpad64`` are the centers in X's dtype and in float64, padded
    with zero features to an even width.  Every label is certified exact
    (:func:`_certify_direct`, with the rounding bounds ``margin``/``tiny`` of
    X's dtype and ``margin64``/``tiny64`` of float64).  A tile whose best distance is not
    finite (the squares overflow X's dtype, or X holds NaN/inf) is assigned
    again in float64; a row whose float64 best is still not finite gets
    distance +inf, as in :func:`_tiled`.
    """
    n = X.shape[0]
    dp = cpad.shape[1]
    objective = 0.0
    XT = np.zeros((dp, tile), dtype=X.dtype)
    best = np.empty(tile, dtype=X.dtype)
    sec = np.empty(tile, dtype=X.dtype)
    dist = np.empty((2, tile), dtype=X.dtype)
    XT64 = np.zeros((dp, tile), dtype=np.float64)
    best64 = np.empty(tile, dtype=np.float64)
    sec64 = np.empty(tile, dtype=np.float64)
    dist64 = np.empty((2, tile), dtype=np.float64)
    for start in range(0, n, tile):
        stop = min(start + tile, n)
        t = stop - start
        lab = labels[start:stop]  # the kernel writes the tile's labels in place
        transpose_tile(X, start, t, XT)
        argmin_direct(XT, t, cpad, best, sec, dist[0], dist[1], lab)
        again = False
        for i in range(t):
            if not np.isfinite(best[i]):
                again = True
                break
        if again:
            transpose_tile(X, start, t, XT64)
            argmin_direct(XT64, t, cpad64, best64, sec64, dist64[0], dist64[1], lab)
            _certify_direct(X, start, t, centers, best64, sec64, lab, margin64, tiny64, low)
        else:
            _certify_direct(X, start, t, centers, best, sec, lab, margin, tiny, low)
        objective = _finish_tile(X, start, stop, centers, sums, counts, labels, mind,
                                 with_sums, objective)
        if again and _mark_overflow(best64, t, mind, start):
            objective = np.inf
    return objective


def _direct_tile(dp):
    """Rows per tile of :func:`_direct`: the transposed float32 tile fills ~16 kB (L1)."""
    return int(min(2048, max(_TILE, 4096 // dp)))


def _run_direct(X, centers, sums, counts, labels, mind, with_sums, tile=None, low=None):
    """:func:`_direct` with the zero-padded centers it needs."""
    k, d = centers.shape
    if tile is None:
        tile = _direct_tile(d + d % 2)
    cpad64 = np.zeros((k, d + d % 2), dtype=np.float64)
    cpad64[:, :d] = centers
    margin, tiny = _direct_rounding(X.dtype, d + d % 2)
    margin64, tiny64 = _direct_rounding(np.float64, d + d % 2)
    with np.errstate(over="ignore", invalid="ignore"):
        return _direct(X, centers, cpad64.astype(X.dtype), cpad64, tile, margin, tiny, margin64,
                       tiny64, sums, counts, labels, mind, with_sums,
                       _NO_LOW if low is None else low)


def _outputs(n, k, d, with_sums):
    """Zeroed sums/counts (empty when not accumulated), labels, distances."""
    shape = (k, d) if with_sums else (0, 0)
    return (np.zeros(shape, dtype=np.float64), np.zeros(shape[0], dtype=np.int64),
            np.empty(n, dtype=np.int32), np.empty(n, dtype=np.float64))


def squared_norms(A):
    """Row-wise squared norms of ``A``, in ``A``'s dtype (float64 accumulation).

    Parameters
    ----------
    A : array-like of shape (n_rows, n_features)
        Floating-point rows.

    Returns
    -------
    norms : ndarray of shape (n_rows,)
        ``‖a_i‖²`` of every row, accumulated in float64 and returned in
        ``A``'s dtype.

    Examples
    --------
    >>> import numpy as np
    >>> from dqkm.kernels import squared_norms
    >>> squared_norms(np.array([[3.0, 4.0], [1.0, 0.0]]))
    array([25.,  1.])
    """
    A = np.asarray(A)
    return np.einsum("ij,ij->i", A, A, dtype=np.float64).astype(A.dtype, copy=False)


def _gemm_min_d(k, dtype):
    """The fewest features from which the GEMM kernel may serve ``k`` centers."""
    if k >= _MANY_CENTERS:
        return _GEMM_MIN_D_MANY
    return _GEMM_MIN_D_F32 if dtype == np.float32 else _GEMM_MIN_D


def _run_tiled(X, centers, sums, counts, labels, mind, with_sums, low=None):
    """:func:`_direct` up to ``_DIRECT_MAX_D`` features, else :func:`_tiled` with
    the float64 centers and norms it falls back to; ``low`` (float64, one entry
    per row) receives the lower bounds of :func:`_certify_direct` /
    :func:`_certify_gemm` (certified kernels only: :func:`certified_pass`).

    The squared norms are accumulated in float64; when ½‖c‖² does not fit
    X's dtype (float32 centers beyond ~1e19) every tile is assigned in float64.
    """
    d = X.shape[1]
    if d < _gemm_min_d(centers.shape[0], X.dtype):
        return _run_direct(X, centers, sums, counts, labels, mind, with_sums, low=low)
    c64 = np.ascontiguousarray(centers, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        half64 = np.einsum("ij,ij->i", c64, c64) * 0.5
        half = half64.astype(X.dtype)
    use64 = bool(np.isfinite(half64).all() and not np.isfinite(half).all())
    # certified labels: float64 X always, float32 X up to _DIRECT_MAX_D features
    exact = certified_pass(X.dtype, d)
    if low is not None and not exact:
        raise ValueError("lower bounds need the certified kernels (certified_pass)")
    scale = 8.0 * (d + 4) * np.finfo(X.dtype).eps
    cmax = float(2.0 * half64.max()) if half64.size else 0.0
    if d <= _DIRECT_MAX_D and (use64 or not _certifies_cheaply(X, c64, half64, scale, cmax,
                                                                _PROBE_ROWS)):
        return _run_direct(X, centers, sums, counts, labels, mind, with_sums, low=low)
    low = _NO_LOW if low is None else low
    k = centers.shape[0]
    with np.errstate(over="ignore", invalid="ignore"):
        if _BLAS_TILES and not use64 and not exact:  # NumPy's BLAS: see _tiled_blas
            return _tiled_blas(X, centers, half, c64, half64, exact, scale, cmax, sums, counts,
                               labels, mind, with_sums, _blas_tile(k, d, X.dtype.itemsize), low)
        tile = _gemm_tile(k, d, X.dtype.itemsize)
        return _tiled(X, centers, half, c64, half64, use64, exact, scale, cmax, sums, counts,
                      labels, mind, with_sums, tile, low)


def certified_pass(dtype, n_features):
    """Whether the Lloyd pass certifies its labels exact (:mod:`._exact`) on X of
    ``dtype``: up to ``_DIRECT_MAX_D`` features, or any dtype but float32 (the
    kernels run every other dtype in float64)."""
    return np.dtype(dtype) != np.float32 or n_features <= _DIRECT_MAX_D


def _prepare(X, centers):
    X = np.ascontiguousarray(X)
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    centers = np.ascontiguousarray(centers, dtype=X.dtype)
    if X.ndim != 2 or centers.ndim != 2 or X.shape[1] != centers.shape[1]:
        raise ValueError(
            f"X of shape {X.shape} and centers of shape {centers.shape} do not "
            "share a number of features."
        )
    return X, centers


def lloyd_partials(X, centers):
    """One Lloyd step on a chunk: labels and the statistics the driver needs.

    Parameters
    ----------
    X : ndarray of shape (n_rows, n_features), float32 or float64
        One chunk of rows (another dtype is converted to float64).
    centers : ndarray of shape (n_clusters, n_features)
        The current centers, converted to ``X``'s dtype.

    Returns
    -------
    sums : ndarray of shape (n_clusters, n_features), float64
        Sum of the rows assigned to each center.
    counts : ndarray of shape (n_clusters,), int64
        Number of rows assigned to each center.
    objective : float
        ``Σ ‖x − c_label(x)‖²`` over the chunk, computed exactly in float64.
    labels : ndarray of shape (n_rows,), int32
        Index of the nearest center of every row.
    min_sq_dist : ndarray of shape (n_rows,), float64
        Squared distance of every row to its nearest center;
        +inf (and the objective +inf or NaN) for a row whose squared
        distances overflow float64 or that holds NaN/inf: its label is then
        meaningless, and the callers refuse the chunk.

    Notes
    -----
    The products ``X·Cᵀ`` are formed in X's dtype; a tile where they or
    ½‖c‖² overflow it (float32 data beyond ~1e19) is assigned again in
    float64, so the labels are those of the exact distances.

    Examples
    --------
    >>> import numpy as np
    >>> from dqkm.kernels import lloyd_partials
    >>> X = np.array([[0.0, 0.0], [0.0, 2.0], [10.0, 0.0]])
    >>> sums, counts, objective, labels, min_sq_dist = lloyd_partials(X, X[[0, 2]])
    >>> sums
    array([[ 0.,  2.],
           [10.,  0.]])
    >>> counts, objective, labels
    (array([2, 1]), 4.0, array([0, 0, 1], dtype=int32))
    """
    X, centers = _prepare(X, centers)
    sums, counts, labels, mind = _outputs(X.shape[0], centers.shape[0], X.shape[1], True)
    obj = 0.0
    if X.shape[0]:
        obj = _run_tiled(X, centers, sums, counts, labels, mind, True)
    return sums, counts, float(obj), labels, mind


def assign_labels(X, centers):
    """Nearest center of every row and its squared distance (float64).

    Parameters
    ----------
    X : ndarray of shape (n_rows, n_features), float32 or float64
        The rows to assign (another dtype is converted to float64).
    centers : ndarray of shape (n_clusters, n_features)
        The centers, converted to ``X``'s dtype.

    Returns
    -------
    labels : ndarray of shape (n_rows,), int32
        Index of the nearest center (the first one on a tie).
    min_sq_dist : ndarray of shape (n_rows,), float64
        +inf where the distances overflow float64, as in :func:`lloyd_partials`.

    Examples
    --------
    >>> import numpy as np
    >>> from dqkm.kernels import assign_labels
    >>> centers = np.array([[0.0, 0.0], [10.0, 0.0]])
    >>> labels, min_sq_dist = assign_labels(np.array([[1.0, 0.0], [9.0, 3.0]]), centers)
    >>> labels, min_sq_dist
    (array([0, 1], dtype=int32), array([ 1., 10.]))
    """
    X, centers = _prepare(X, centers)
    sums, counts, labels, mind = _outputs(X.shape[0], centers.shape[0], X.shape[1], False)
    if X.shape[0]:
        _run_tiled(X, centers, sums, counts, labels, mind, False)
    return labels, mind


def partials_from_products(X, G, center_norms, centers, *, with_sums=True):
    """Finish a Lloyd step from precomputed products ``G = X·Cᵀ``.

    Used when the centers are a fast operator (QK-means's sparse factors):
    the operator computes ``G`` cheaply, this kernel takes the argmin of
    ``‖c‖² − 2G`` and accumulates the sums, counts and the exact objective
    (``centers`` is the dense form of the operator, read once per row).

    Returns the same tuple as :func:`lloyd_partials`:
    ``(sums, counts, objective, labels, min_sq_dist)``; with
    ``with_sums=False`` the sums and counts are zero.
    """
    X, centers = _prepare(X, centers)
    G = np.ascontiguousarray(G)
    n, k = X.shape[0], centers.shape[0]
    if G.shape != (n, k):
        raise ValueError(f"G must have shape (n_rows, n_clusters) = {(n, k)}; got {G.shape}.")
    sums, counts, labels, mind = _outputs(n, k, X.shape[1], True)
    obj = 0.0
    if n:
        half = (np.asarray(center_norms, dtype=np.float64) * 0.5).astype(G.dtype)
        obj = _finish_rows(X, G, 0, half, centers, sums, counts, labels, mind, with_sums)
    return sums, counts, float(obj), labels, mind


def partials_from_labels(X, labels, centers):
    """Finish a Lloyd step whose assignment was made elsewhere.

    Used when the centers are a fast operator that also returns the argmin
    (QK-means's :meth:`SparseFactors.nearest_rows`): one pass over the rows
    accumulates the float64 sums, the counts and the exact float64 objective
    against ``centers`` (the dense form, one row read per sample).

    Returns the same tuple as :func:`lloyd_partials`:
    ``(sums, counts, objective, labels, min_sq_dist)``.
    """
    X, centers = _prepare(X, centers)
    labels = np.ascontiguousarray(labels)
    n, k = X.shape[0], centers.shape[0]
    if labels.shape != (n,) or labels.dtype.kind not in "iu":
        raise ValueError(f"labels must be integers of shape (n_rows,) = ({n},); got "
                         f"{labels.dtype} of shape {labels.shape}.")
    if n and (labels.min() < 0 or labels.max() >= k):
        raise ValueError(f"labels must lie in [0, {k}); got values in "
                         f"[{labels.min()}, {labels.max()}].")
    sums, counts, _, mind = _outputs(n, k, X.shape[1], True)
    obj = _rows_given_labels(X, labels, centers, sums, counts, mind) if n else 0.0
    return sums, counts, float(obj), labels, mind


@njit(nogil=True, cache=True)
def _weighted_sums(X, labels, weights, sums, totals):  # OUT sums, totals
    """``sums[k] += w_r · x_r`` and ``totals[k] += w_r`` for every row r of label k (float64)."""
    for r in range(X.shape[0]):
        k = labels[r]
        wr = weights[r]
        totals[k] += wr
        for f in range(X.shape[1]):
            sums[k, f] += wr * np.float64(X[r, f])


def weighted_cluster_sums(X, labels, weights, n_clusters):
    """Per-cluster weighted sums of the rows and of their weights, in float64.

    Parameters
    ----------
    X : ndarray or scipy.sparse CSR matrix of shape (n_rows, n_features)
    labels : ndarray of shape (n_rows,), int, in ``[0, n_clusters)``
    weights : ndarray of shape (n_rows,), float64
    n_clusters : int

    Returns
    -------
    sums : ndarray of shape (n_clusters, n_features), float64
        ``Σ_{label(x) = k} w·x`` for every cluster k.
    totals : ndarray of shape (n_clusters,), float64
        ``Σ_{label(x) = k} w``.
    """
    n, d = X.shape
    weights = np.ascontiguousarray(weights, dtype=np.float64)
    labels = np.ascontiguousarray(labels)
    if sp.issparse(X):
        ind = sp.csr_matrix((weights, (labels, np.arange(n))), shape=(n_clusters, n))
        sums = np.asarray((ind @ X.astype(np.float64)).todense())
        return sums, np.bincount(labels, weights=weights, minlength=n_clusters)
    sums = np.zeros((n_clusters, d), dtype=np.float64)
    totals = np.zeros(n_clusters, dtype=np.float64)
    if n:
        _weighted_sums(np.ascontiguousarray(X), labels, weights, sums, totals)
    return sums, totals


def lloyd_partials_weighted(X, weights, centers):
    """:func:`lloyd_partials` with a weight per row.

    The assignment is that of :func:`assign_labels`; the sums are
    ``Σ w·x``, the counts are the clusters' total weights (float64) and the
    objective is ``Σ w·‖x − c_label(x)‖²``.  A row of weight 0 counts nowhere
    (a cluster holding only such rows has total weight 0: it is empty), but a
    non-finite row still makes the objective non-finite, so that the callers
    refuse it.

    Returns
    -------
    sums, counts, objective, labels, min_sq_dist : as :func:`lloyd_partials`,
        with ``counts`` the float64 total weights.
    """
    X, centers = _prepare(X, centers)
    labels, mind = assign_labels(X, centers)
    sums, totals = weighted_cluster_sums(X, labels, weights, centers.shape[0])
    with np.errstate(invalid="ignore", over="ignore"):
        obj = float(np.dot(np.asarray(weights, dtype=np.float64), mind))
        if not np.isfinite(mind).all():
            obj = np.inf
    return sums, totals, obj, labels, mind
