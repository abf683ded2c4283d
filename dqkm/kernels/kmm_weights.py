"""K-Multiple-Means CAN weights (the rows of S) and the data rows of F from them.

The weights follow the closed form of eq. (10) with the (l+1)-th distance.

References
----------
Y. Fujiwara et al., *Efficient Algorithm for K-Multiple-Means*, SIGMOD 2024
(eqs. 10, 12; Lemma 4.1).
F. Nie, C.-L. Wang, X. Li, *K-Multiple-Means*, KDD 2019.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["can_weights", "spectral_rows"]


def can_weights(distances):
    """CAN closed form of eq. (10) and the α_i of the text below eq. (12).

    Parameters
    ----------
    distances : ndarray of shape (n_rows, l + 1)
        Sorted distances to the l+1 nearest prototypes (rows of +inf are
        skipped rows).

    Returns
    -------
    weights : ndarray of shape (n_rows, l)
        ``s_ij = (d_(l+1) − d_ij) / (l·d_(l+1) − Σ_{k≤l} d_ik)``; when the
        denominator is 0 (all l+1 distances equal) every weight is 1/l.  Rows
        sum to 1 (eq. 12); skipped rows are 0.
    alpha : ndarray of shape (n_rows,)
        ``α_i = (l/2)·d_(l+1) − ½ Σ_{k≤l} d_ik`` (0 for skipped rows).
    """
    D = np.ascontiguousarray(distances, dtype=np.float64)
    n, L = D.shape
    W = np.zeros((n, L - 1))
    alpha = np.zeros(n)
    _can_kernel(D, W, alpha)
    return W, alpha


@njit(cache=True, nogil=True)
def _can_kernel(D, W, alpha):  # OUT W, alpha
    """:func:`can_weights` row by row (the sum of the l nearest in column order)."""
    n, L = D.shape
    ell = L - 1
    for i in range(n):
        if not np.isfinite(D[i, 0]):
            continue
        top = D[i, ell]
        s = 0.0
        for k in range(ell):
            s += D[i, k]
        denom = ell * top - s
        if denom > 0:
            for k in range(ell):
                W[i, k] = (top - D[i, k]) / denom
        else:  # all l + 1 equal (or NaN): equal weights
            for k in range(ell):
                W[i, k] = 1.0 / ell
        alpha[i] = 0.5 * max(denom, 0.0)


@njit(cache=True, nogil=True)
def spectral_rows(idx, w, Wmap):
    """``F[i] = Σ_k s_ik·Wmap[idx[i, k]]`` over the row's neighbours (idx ≥ 0):
    the data rows of F from the prototype side (Lemma 4.1), in neighbour order."""
    n, ell = idx.shape
    c = Wmap.shape[1]
    F = np.zeros((n, c))
    for i in range(n):
        for k in range(ell):
            j = idx[i, k]
            if j >= 0:
                v = w[i, k]
                for t in range(c):
                    F[i, t] += v * Wmap[j, t]
    return F
