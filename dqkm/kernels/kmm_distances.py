"""K-Multiple-Means distances, element by element: D_E, β·D_F and the SVD lower bound.

Each data point x_i is connected to its ``l`` nearest prototypes under

    D[i, j] = D_E[i, j] + β·D_F[i, j]                        (Fujiwara et al., eq. 32)

with ``D_E = ‖x_i − a_j‖²`` (eq. 33) and ``D_F`` the spectral term of eq. (34),
computed by one of four rules (``mode``):

* ``MODE_NONE``  β = 0: ``D_F`` is not used (Algorithm 4, line 8);
* ``MODE_COMPONENTS``  b ≥ c: eq. (56), 0 inside a connected component,
  ½(1/n_i + 1/n_j) across components;
* ``MODE_EXTRA``  b < c, F-KMM: eq. (50) (Lemma 4.8), the first b columns of F
  in closed form, only the c − b extra columns read;
* ``MODE_FULL``  b < c, reference: eq. (11) on all c columns of F.

The routines here compute one prototype or one range of prototypes for one
row; every one is element-wise, so a pair's value does not depend on the range
it was computed in (the rule that makes the pruned search of
:mod:`dqkm.kernels.kmm_neighbors` give the reference's bits).

All kernels are pure: inputs are never mutated; buffers written in place are
marked ``# OUT``.

References
----------
Y. Fujiwara et al., *Efficient Algorithm for K-Multiple-Means*, SIGMOD 2024
(eqs. 11, 32–34, 50, 56, 57; Definition 4.9; Lemma 4.10).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

__all__ = ["MODE_NONE", "MODE_COMPONENTS", "MODE_EXTRA", "MODE_FULL", "LB_MARGIN",
           "SpectralTerm", "project"]

MODE_NONE = 0
MODE_COMPONENTS = 1
MODE_EXTRA = 2
MODE_FULL = 3

#: relative floating-point slack of the lower bound: a pair is pruned only when
#: ``lb − LB_MARGIN·(‖x − μ‖² + ‖a − μ‖²) > current (l+1)-th distance``.
LB_MARGIN = 1e-9


@dataclass(frozen=True)
class SpectralTerm:
    """What a chunk needs to evaluate β·D_F[i, j] (eq. 34) for its rows.

    Attributes
    ----------
    mode : int
        One of ``MODE_NONE``, ``MODE_COMPONENTS``, ``MODE_EXTRA``, ``MODE_FULL``.
    beta : float
    point_comp : ndarray of shape (n_rows,), int64
        Connected component of each row (−1: none / outlier).
    point_inv_n : ndarray of shape (n_rows,)
        1/n_k of the row's component (n_k = data points in component k).
    proto_comp : ndarray of shape (m,), int64
        Component of each prototype (−1: prototype with no data point).
    proto_inv_n : ndarray of shape (m,)
        1/n_k of the prototype's component (0 for an empty prototype).
    point_f : ndarray of shape (n_rows, k)
        ``f_i/√d[i]``: the c − b extra columns (MODE_EXTRA) or all c columns
        (MODE_FULL) of F's data rows; shape (n_rows, 0) otherwise.
    proto_g : ndarray of shape (m, k)
        ``f_{n+j}/√d[n+j]`` for the same columns.
    """

    mode: int
    beta: float
    point_comp: np.ndarray
    point_inv_n: np.ndarray
    proto_comp: np.ndarray
    proto_inv_n: np.ndarray
    point_f: np.ndarray
    proto_g: np.ndarray

    @classmethod
    def none(cls, n_rows, m):
        """β = 0: the plain Euclidean neighbours (Algorithm 4, line 8)."""
        return cls(MODE_NONE, 0.0, np.full(n_rows, -1, np.int64), np.zeros(n_rows),
                   np.full(m, -1, np.int64), np.zeros(m), np.zeros((n_rows, 0)),
                   np.zeros((m, 0)))



def project(X, mu, V):
    """Rank-d′ coordinates and residual norms of Definition 4.9.

    Parameters
    ----------
    X : ndarray of shape (n, d)
    mu : ndarray of shape (d,)
        Centre subtracted first (distances are shift invariant; centring keeps
        the norms, hence the rounding error of the bound, small).
    V : ndarray of shape (d, d′), orthonormal columns

    Returns
    -------
    xt : ndarray of shape (n, d′)
        ``(x − μ)·V``.
    xperp : ndarray of shape (n,)
        ``x′ = ‖(x − μ) − (x − μ)·V·Vᵀ‖`` — the residual norm computed
        directly, not as √(‖x‖² − ‖x̃‖²), so it has no cancellation.
    norm2 : ndarray of shape (n,)
        ``‖x − μ‖²`` (scales the floating-point margin).
    """
    Xc = np.asarray(X, dtype=np.float64) - np.asarray(mu, dtype=np.float64)
    xt = Xc @ V
    r = Xc - xt @ V.T
    return xt, np.sqrt(np.einsum("ij,ij->i", r, r)), np.einsum("ij,ij->i", Xc, Xc)


@njit(cache=True, nogil=True, fastmath={"reassoc", "nsz"})
def _sqdist(xi, A, j):
    """‖xi − A[j]‖² in float64 (``xi``: the row already in float64).

    Reassociation lets LLVM vectorise the sum.  The summation order is then
    whatever the compiled loop does, so the search (:mod:`dqkm.kernels.kmm_search`)
    calls this from exactly one place: both solvers run the same machine code
    and a pair computed by both gets the same bits.
    """
    s = 0.0
    for k in range(xi.shape[0]):
        t = xi[k] - A[j, k]
        s += t * t
    return s


@njit(cache=True, nogil=True, inline="always")
def _insert(topD, topJ, topE, D, j, E):  # OUT topD, topJ, topE
    """Insert (D, j) into the ascending list if it beats its last entry."""
    L = topD.shape[0]
    last = L - 1
    if D > topD[last] or (D == topD[last] and j > topJ[last]):
        return
    k = last
    while k > 0 and (topD[k - 1] > D or (topD[k - 1] == D and topJ[k - 1] > j)):
        topD[k] = topD[k - 1]
        topJ[k] = topJ[k - 1]
        topE[k] = topE[k - 1]
        k -= 1
    topD[k] = D
    topJ[k] = j
    topE[k] = E


@njit(cache=True, nogil=True, inline="always")
def _row_dot(P, i, QT, out, lo, hi):  # OUT out[lo:hi]
    """``out[j] = Σ_k P[i, k]·QT[k, j]`` for j in [lo, hi), summed in k order
    (k outer, four at a time, so the j loop vectorises without reassociation:
    every j gets the same bits whatever the range)."""
    kk = P.shape[1]
    for j in range(np.uint64(lo), np.uint64(hi)):
        out[j] = 0.0
    k = 0
    while k + 4 <= kk:
        p0 = P[i, k]
        p1 = P[i, k + 1]
        p2 = P[i, k + 2]
        p3 = P[i, k + 3]
        for j in range(np.uint64(lo), np.uint64(hi)):
            out[j] = out[j] + p0 * QT[k, j] + p1 * QT[k + 1, j] + p2 * QT[k + 2, j] \
                + p3 * QT[k + 3, j]
        k += 4
    while k < kk:
        p0 = P[i, k]
        for j in range(np.uint64(lo), np.uint64(hi)):
            out[j] = out[j] + p0 * QT[k, j]
        k += 1


@njit(cache=True, nogil=True, inline="always")
def _df_range(mode, beta, ci, pi, f2i, qcomp, qinv, fg, g2, out, lo, hi):  # OUT out[lo:hi]
    """β·D_F[i, j] for the prototypes j in [lo, hi) (eqs. 11, 50, 56).

    ``‖f − g‖²`` is taken as ``‖f‖² + ‖g‖² − 2 f·g`` (``fg[j] = f·g_j``),
    clamped at 0.  Element-wise (one loop per rule), so a prototype's value
    does not depend on the range it is computed in.
    """
    if mode == 0:
        for j in range(np.uint64(lo), np.uint64(hi)):
            out[j] = 0.0
    elif mode == 1:  # eq. (56)
        for j in range(np.uint64(lo), np.uint64(hi)):
            same = ci >= 0 and qcomp[j] == ci
            out[j] = beta * (0.0 if same else 0.5 * (pi + qinv[j]))
    elif mode == 3:  # eq. (11) on all columns
        for j in range(np.uint64(lo), np.uint64(hi)):
            out[j] = beta * max(f2i + g2[j] - 2.0 * fg[j], 0.0)
    else:  # eq. (50): same component / different components
        for j in range(np.uint64(lo), np.uint64(hi)):
            same = ci >= 0 and qcomp[j] == ci
            v_same = max(f2i + g2[j] - 2.0 * fg[j], 0.0)
            v_diff = 0.5 * (pi + qinv[j]) + f2i + g2[j]
            out[j] = beta * (v_same if same else v_diff)


@njit(cache=True, nogil=True, inline="always")
def _dot_one(P, i, QT, j):
    """``Σ_k P[i, k]·QT[k, j]`` for one j, in the order of :func:`_row_dot`
    (same operations, so the same bits)."""
    kk = P.shape[1]
    s = 0.0
    k = 0
    while k + 4 <= kk:
        s = s + P[i, k] * QT[k, j] + P[i, k + 1] * QT[k + 1, j] + P[i, k + 2] * QT[k + 2, j] \
            + P[i, k + 3] * QT[k + 3, j]
        k += 4
    while k < kk:
        s = s + P[i, k] * QT[k, j]
        k += 1
    return s


@njit(cache=True, nogil=True, inline="always")
def _df_one(mode, beta, ci, pi, f2i, qcomp, qinv, fgj, g2, j):
    """β·D_F[i, j] for one prototype: the expressions of :func:`_df_range`."""
    return _df_scalar(mode, beta, ci, pi, f2i, qcomp[j], qinv[j], fgj, g2[j])


@njit(cache=True, nogil=True, inline="always")
def _df_scalar(mode, beta, ci, pi, f2i, qc, qi, fgj, g2j):
    """:func:`_df_one` on the prototype's values (component ``qc``, 1/n_k ``qi``,
    ‖g‖² ``g2j``): scalars only, so an inlined call costs no reference counts."""
    if mode == 0:
        return 0.0
    same = ci >= 0 and qc == ci
    if mode == 1:
        return beta * (0.0 if same else 0.5 * (pi + qi))
    if mode == 3:
        return beta * max(f2i + g2j - 2.0 * fgj, 0.0)
    v_same = max(f2i + g2j - 2.0 * fgj, 0.0)
    v_diff = 0.5 * (pi + qi) + f2i + g2j
    return beta * (v_same if same else v_diff)


@njit(cache=True, nogil=True, inline="always")
def _bounds_range(xtn_i, xperp_i, xa, atn, aperp, an2, dfv, margin, out, lo, hi):  # OUT out
    """Lemma 4.10 lower bound (eq. 57) plus β·D_F, less the slack; branch-free."""
    for j in range(np.uint64(lo), np.uint64(hi)):
        t = xperp_i - aperp[j]
        out[j] = xtn_i + atn[j] - 2.0 * xa[j] + t * t + dfv[j] - margin * an2[j]


