"""Lloyd's K-means on one CSR chunk of rows, and per-cluster moments.

The same outputs as :func:`dqkm.kernels.lloyd.lloyd_partials` and
:func:`dqkm.kernels.lloyd.assign_labels`, for a ``scipy.sparse`` CSR chunk.
The squared distance is split as

    ‖x − c‖² = ‖x‖² − 2 x·c + ‖c‖²

and ``x·c`` only touches the non-zeros of x: with ``Cᵀ`` stored row-major
(d × K), a row with m non-zeros costs O(m·K) for all K products (accumulated
in float64), then O(K) for the argmin of ``‖c‖² − 2 x·c``.  The exact
objective uses the same split in float64, clipped at 0; the per-cluster sums
add the row's non-zeros into a dense K×d float64 buffer.

:func:`label_moments` gives, for rows with known labels (dense or CSR), the
per-cluster counts, means and within-cluster sums of squares that combine
across chunks by Chan et al.'s pairwise rule — one pass for the centers and
the exact cost of a partition.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit

from .lloyd import _DIRECT_MAX_D

__all__ = ["as_csr", "lloyd_partials_csr", "assign_labels_csr", "label_moments",
           "merge_label_moments", "csr_row_norms"]


@njit(nogil=True, cache=True)
def _exact_label_csr(data, indices, start, stop, centers64):
    """The lowest j with the smallest ``‖x − c_j‖²`` summed in float64 in feature
    order over every feature (zeros included) — the dense kernels' exact distance
    (:func:`dqkm.kernels.lloyd.exact_sq_dist`) of the CSR row ``data/indices[start:stop]``
    (canonical: sorted indices, no duplicates)."""
    best = np.inf
    arg = -1
    for j in range(centers64.shape[0]):
        cj = centers64[j]
        acc = 0.0
        p = start
        for f in range(cj.shape[0]):
            xf = 0.0
            if p < stop and indices[p] == f:
                xf = np.float64(data[p])
                p += 1
            u = xf - cj[f]
            acc += u * u
        if arg < 0 or acc < best:
            best = acc
            arg = j
    return arg


@njit(nogil=True, cache=True)
def _csr_lloyd_loop(data, indices, indptr, ct, center_norms, argmin_norms, row_norms, sums,
                    counts, labels, mind, with_sums, round32, centers64, scale, cmax):  # OUT sums, counts, labels, mind
    n = indptr.shape[0] - 1
    k = ct.shape[1]
    g = np.empty(k, dtype=np.float64)
    objective = 0.0
    for i in range(n):
        g[:] = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            v = np.float64(data[p])
            j = indices[p]
            for c in range(k):
                g[c] += v * ct[j, c]
        best = np.inf
        second = np.inf
        arg = 0
        for c in range(k):
            gc = np.float64(np.float32(g[c])) if round32 else g[c]
            val = argmin_norms[c] - 2.0 * gc
            if val < best:
                second = best
                best = val
                arg = c
            elif val < second:
                second = val
        if scale > 0.0 and np.isfinite(best) and second - best <= scale * (row_norms[i] + cmax):
            # a near-tie: decided by the exact distance, as the dense kernels decide it
            arg = _exact_label_csr(data, indices, indptr[i], indptr[i + 1], centers64)
        if round32 and not np.isfinite(best):
            # a product overflowed float32: this row's argmin in float64
            best = np.inf
            arg = 0
            for c in range(k):
                val = center_norms[c] - 2.0 * g[c]
                if val < best:
                    best = val
                    arg = c
        labels[i] = arg
        dist = row_norms[i] + center_norms[arg] - 2.0 * g[arg]
        if dist < 0.0:
            dist = 0.0
        if not np.isfinite(best):
            dist = np.inf  # overflows float64, or NaN/inf in the row: the callers refuse it
        mind[i] = dist
        objective += dist
        if with_sums:
            counts[arg] += 1
            for p in range(indptr[i], indptr[i + 1]):
                sums[arg, indices[p]] += data[p]
    return objective


def as_csr(block, owner="dqkm"):
    """One chunk as CSR: dense and CSR chunks as they are, COO converted.

    Any other sparse format raises a ``TypeError`` that says how to convert.
    """
    if not sp.issparse(block) or block.format == "csr":
        return block
    if block.format == "coo":
        return block.tocsr()
    raise TypeError(f"{owner} accepts scipy.sparse data in CSR format (COO is converted); got "
                    f"format {block.format!r}. Convert it with X.tocsr() (for a Dask array: "
                    "X.map_blocks(lambda b: b.tocsr())).")


def csr_row_norms(X):
    """Squared row norms of a CSR matrix, float64."""
    return _row_norms_from(X.data, X.indptr, X.shape[0])


def _prepare(X, centers):
    if not sp.issparse(X) or X.format != "csr":
        fmt = X.format if sp.issparse(X) else type(X).__name__
        raise TypeError(f"X must be a scipy.sparse CSR matrix; got {fmt!r}. Convert it with "
                        ".tocsr().")
    dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.dtype(np.float64)
    centers = np.asarray(centers)
    if X.ndim != 2 or centers.ndim != 2 or X.shape[1] != centers.shape[1]:
        raise ValueError(f"X of shape {X.shape} and centers of shape {centers.shape} do not "
                         "share a number of features.")
    if not X.has_canonical_format:  # the exact distances walk sorted, unique indices
        X = X.copy()
        X.sum_duplicates()
    data = X.data if X.data.dtype == dtype else X.data.astype(dtype)
    centers = centers.astype(dtype, copy=False)
    ct = np.ascontiguousarray(centers.T, dtype=np.float64)
    c_norms = np.einsum("ij,ij->i", centers, centers, dtype=np.float64)
    return data, X.indices, X.indptr, ct, c_norms


def _run(X, centers, with_sums):
    data, indices, indptr, ct, c_norms = _prepare(X, centers)
    n, d = X.shape
    k = ct.shape[1]
    sums = np.zeros((k, d) if with_sums else (k, 0), dtype=np.float64)
    counts = np.zeros(k, dtype=np.int64)
    labels = np.empty(n, dtype=np.int32)
    mind = np.empty(n, dtype=np.float64)
    if n == 0:
        return np.zeros((k, d)), counts, 0.0, labels, mind
    rn = _row_norms_from(data, indptr, n)
    # The argmin uses ‖c‖² and x·c rounded to X's dtype, as the dense kernel's
    # GEMM does, so that ties (frequent with disjoint sparse supports, where
    # x·c = 0 exactly) break the same way; the objective uses float64.
    round32 = data.dtype == np.float32
    with np.errstate(over="ignore"):
        argmin_norms = c_norms.astype(data.dtype).astype(np.float64)
    if round32 and not np.isfinite(argmin_norms).all():
        # ‖c‖² overflows float32 (centers beyond ~1e19): the argmin in float64
        round32, argmin_norms = False, c_norms
    # Labels exact where the dense kernels' are (float64 X; float32 X up to the direct
    # kernel's dimension): a row whose two best values are within the rounding bound
    # of ‖c‖² − 2x·c (both in X's dtype) is decided by the feature-order float64
    # distance, so CSR and dense chunks give the same labels on near-ties.
    scale = 0.0
    if data.dtype == np.float64 or d <= _DIRECT_MAX_D:
        scale = 16.0 * (d + 4) * np.finfo(data.dtype).eps
    centers64 = np.ascontiguousarray(centers, dtype=data.dtype).astype(np.float64)
    cmax = float(c_norms.max()) if c_norms.size else 0.0
    obj = _csr_lloyd_loop(data, indices, indptr, ct, c_norms, argmin_norms, rn, sums, counts,
                          labels, mind, with_sums, round32, centers64, scale, cmax)
    return sums, counts, float(obj), labels, mind


def _row_norms_from(data, indptr, n):
    out = np.zeros(n, dtype=np.float64)
    sq = data.astype(np.float64) ** 2
    lengths = np.diff(indptr)
    nz = lengths > 0
    if sq.size:
        out[nz] = np.add.reduceat(sq, indptr[:-1][nz])
    return out


def lloyd_partials_csr(X, centers):
    """One Lloyd step on a CSR chunk: labels and the statistics the driver needs.

    Parameters
    ----------
    X : scipy.sparse CSR matrix of shape (n_rows, n_features)
    centers : ndarray of shape (n_clusters, n_features)

    Returns
    -------
    sums : ndarray of shape (n_clusters, n_features), float64
    counts : ndarray of shape (n_clusters,), int64
    objective : float
        ``Σ (‖x‖² − 2 x·c + ‖c‖²)`` over the chunk for the nearest c, in
        float64, each term clipped at 0.
    labels : ndarray of shape (n_rows,), int32
    min_sq_dist : ndarray of shape (n_rows,), float64

    References
    ----------
    Lloyd (1982); the split of the distance is scikit-learn's (``_k_means_lloyd``).
    """
    return _run(X, centers, True)


def assign_labels_csr(X, centers):
    """Nearest center of every row of a CSR chunk and its squared distance.

    Returns
    -------
    labels : ndarray of shape (n_rows,), int32
    min_sq_dist : ndarray of shape (n_rows,), float64
    """
    _, _, _, labels, mind = _run(X, centers, False)
    return labels, mind


# ----------------------------------------------------------------------------- moments
def label_moments(X, labels, n_clusters, weights=None):
    """Per-cluster count, mean and within-cluster sum of squares of one chunk.

    Parameters
    ----------
    X : ndarray or CSR matrix of shape (n_rows, n_features)
    labels : ndarray of shape (n_rows,), ints in ``[0, n_clusters)``
    n_clusters : int
    weights : ndarray of shape (n_rows,), optional
        Row weights: the counts become total weights (float64), the means
        and sums of squares weighted ones.

    Returns
    -------
    counts : ndarray of shape (n_clusters,), int64 (float64 with ``weights``)
    means : ndarray of shape (n_clusters, n_features), float64
        Zero for clusters without rows in the chunk.
    m2 : ndarray of shape (n_clusters,), float64
        ``Σ_{x in cluster} ‖x − mean‖²``: computed as ``Σ (x − mean)²`` for
        dense rows, as ``Σ ‖x‖² − n‖mean‖²`` (clipped at 0) for CSR rows.
    """
    labels = np.asarray(labels, dtype=np.intp)
    n, d = X.shape
    if weights is None:
        w = np.ones(n)
        counts = np.bincount(labels, minlength=n_clusters).astype(np.int64)
    else:
        w = np.asarray(weights, dtype=np.float64)
        counts = np.bincount(labels, weights=w, minlength=n_clusters)
    means = np.zeros((n_clusters, d), dtype=np.float64)
    m2 = np.zeros(n_clusters, dtype=np.float64)
    if n == 0:
        return counts, means, m2
    nz = counts > 0
    ind = sp.csr_matrix((w, (labels, np.arange(n))), shape=(n_clusters, n))
    if sp.issparse(X):
        X = X.tocsr()
        means[:] = (ind @ X.astype(np.float64)).toarray()
        means[nz] /= counts[nz, None]
        rn = _row_norms_from(X.data, X.indptr, n)
        sq = np.bincount(labels, weights=rn * w, minlength=n_clusters)
        m2 = np.maximum(sq - counts * np.einsum("ij,ij->i", means, means), 0.0)
    else:
        A = np.asarray(X, dtype=np.float64)
        means[:] = ind @ A
        means[nz] /= counts[nz, None]
        diff = A - means[labels]
        m2 = np.bincount(labels, weights=np.einsum("ij,ij->i", diff, diff) * w,
                         minlength=n_clusters)
    return counts, means, m2


def merge_label_moments(a, b):
    """Combine two :func:`label_moments` results (Chan et al.'s pairwise update)."""
    na, ma, sa = a
    nb, mb, sb = b
    n = na + nb
    w = np.divide(nb, n, out=np.zeros(n.shape), where=n > 0)
    delta = mb - ma
    means = ma + delta * w[:, None]
    cross = np.divide(na * nb, n, out=np.zeros(n.shape), where=n > 0)
    m2 = sa + sb + np.einsum("ij,ij->i", delta, delta) * cross
    return n, means, m2
