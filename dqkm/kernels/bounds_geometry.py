"""The centers' side of the bounds: how far each center moved, how far apart they are.

Used by Hamerly's and Elkan's steps (:mod:`dqkm.kernels.bounds`).  Every value is
float64 and rounded outward by the relative margin ``_EPS`` (moves up,
separations down), so that a bound moved or compared with them stays a bound for
the exact distances.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["center_geometry", "center_separations"]

# Relative outward rounding of every bound: float64 distances of up to ~10⁵
# features are accurate to far better than this, and it costs no pruning.
_EPS = 1e-9


def center_geometry(centers, previous=None):
    """Half the distance of each center to its nearest other center, and each
    center's move since ``previous`` (float64, rounded outward).

    Parameters
    ----------
    centers : ndarray of shape (n_clusters, n_features)
        The centers of the coming step, in the dtype the step uses them.
    previous : ndarray of shape (n_clusters, n_features), optional
        The centers the bounds were last valid for; ``None`` for no move.

    Returns
    -------
    half_sep : ndarray of shape (n_clusters,), float64
        ``½ min_{j'≠j} ‖c_j − c_j'‖`` rounded down (+inf when K = 1).
    shift : ndarray of shape (n_clusters,), float64
        ``‖c_j − previous_j‖`` rounded up (zeros when ``previous`` is None).
    """
    c = np.ascontiguousarray(centers, dtype=np.float64)
    k = c.shape[0]
    d2 = _pair_sq_dists(c)
    np.fill_diagonal(d2, np.inf)
    half_sep = 0.5 * np.sqrt(d2.min(axis=1)) * (1.0 - _EPS) if k > 1 else np.full(k, np.inf)
    if previous is None:
        shift = np.zeros(k)
    else:
        p = np.asarray(previous, dtype=np.float64)
        if p.shape != c.shape:
            raise ValueError(f"previous centers of shape {p.shape} do not match centers of "
                             f"shape {c.shape}; pass the centers of the previous step.")
        shift = np.sqrt(np.sum((c - p) ** 2, axis=1)) * (1.0 + _EPS)
    return half_sep, shift


def center_separations(centers):
    """Half the distance between every two centers, rounded down (float64, K × K).

    The diagonal is 0.  Used by :func:`elkan_partials`.
    """
    half = np.sqrt(_pair_sq_dists(np.ascontiguousarray(centers, dtype=np.float64)))
    return 0.5 * half * (1.0 - _EPS)


@njit(nogil=True, cache=True)
def _pair_sq_dists(c):
    """Squared distances between every two rows of ``c`` (float64, K × K), each
    summed from the differences in feature order (not ‖a‖² + ‖b‖² − 2a·b, which
    cancels for nearby centers)."""
    k = c.shape[0]
    out = np.zeros((k, k))
    for i in range(k):
        for j in range(i + 1, k):
            acc = 0.0
            for f in range(c.shape[1]):
                u = c[i, f] - c[j, f]
                acc += u * u
            out[i, j] = acc
            out[j, i] = acc
    return out
