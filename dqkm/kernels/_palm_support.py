"""Least squares on a factor's support: the ``support_cg`` refinement of palm4MSA
(private to :mod:`.palm4msa`).

With every other factor and the support Ω of factor ``S`` (r × c) fixed, the
objective is a convex quadratic in ``X = λ·S``:

    f(X) = ‖A‖² − 2⟨C, X⟩ + ⟨GL·X·GR, X⟩,   C = Lᵀ A Rᵀ

(the notation of :mod:`.palm4msa`).  Conjugate gradients on the entries of Ω
minimise it over the matrices with that support: each iteration applies
``X ↦ P_Ω(GL·X·GR)``, which costs ``nnz·c`` for ``X·GR`` (a CSR product) and
``nnz·r`` for the entries of ``GL·(X·GR)`` on Ω — never the dense ``r × r × c``
product — and ``C`` is needed on Ω only (``nnz·K``).  A projected gradient step
moves along the gradient only as far as the Lipschitz bound allows; on a fixed
support the conjugate directions reach the minimiser of the quadratic in far
fewer products (measured on QK-means refits: docs/algorithms/qkmeans.md).

The refined factor keeps the support of an accepted update, so it stays in the
factor's constraint set (``Splincol``: a support of at most ``s`` entries per row
or column, any values; the result is renormalised, λ absorbing its norm), and
palm4MSA keeps it only when the objective does not increase.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._factor_apply import _csr_mm


@njit(nogil=True, cache=True)
def _sampled_dot(indptr, indices, L, R, out):  # OUT out
    """``out[e] = L[i] · R[j]`` for the entries ``e = (i, j)`` of a CSR support."""
    p = L.shape[1]
    for i in range(indptr.size - 1):
        for e in range(indptr[i], indptr[i + 1]):
            j = indices[e]
            s = 0.0
            for k in range(p):
                s += L[i, k] * R[j, k]
            out[e] = s


def _rows_of(indptr):
    """The row of every entry of a CSR support."""
    return np.repeat(np.arange(indptr.size - 1), np.diff(indptr))


class _SupportQuadratic:
    """``P_Ω(GL·X·GR)`` and ``C`` on the support Ω of a CSR pattern (see the module
    notes); ``GL`` may be a diagonal (1-D), ``GR`` None (the identity), ``Lt`` a
    diagonal (1-D: the fixed left factor alone)."""

    def __init__(self, indptr, indices, shape, GL, GR, Lt, Rt):
        self.indptr, self.indices, self.shape = indptr, indices, shape
        self.rows = _rows_of(indptr)
        self.GL, self.GR = GL, GR
        nnz = indices.size
        self.C = np.empty(nnz)
        if Lt.ndim == 1:
            self.C[:] = Lt[self.rows] * Rt[indices, self.rows]
        else:
            _sampled_dot(indptr, indices, np.ascontiguousarray(Lt), np.ascontiguousarray(Rt),
                         self.C)

    def apply(self, x):
        """The entries on Ω of ``GL·X·GR`` for ``X`` with values ``x`` on Ω."""
        if self.GR is None:
            W = np.zeros(self.shape)
            W[self.rows, self.indices] = x
        else:
            W = _csr_mm(self.indptr, self.indices, x, self.GR)
        if self.GL.ndim == 1:
            return self.GL[self.rows] * W[self.rows, self.indices]
        out = np.empty(x.size)
        # (GL·W)_ij = GL[i]·W[:, j] = GL[i]·Wᵀ[j] (GL symmetric)
        _sampled_dot(self.indptr, self.indices, self.GL, np.ascontiguousarray(W.T), out)
        return out


def support_cg(indptr, indices, values, shape, GL, GR, Lt, Rt, lam, n_iter):
    """Values on the support (CSR ``indptr``, ``indices`` of an r × c factor whose
    entries are ``values``) of ``X = λ·S`` after ``n_iter`` conjugate-gradient
    iterations on f(X), started from ``λ·values``; the iterations stop early when
    the residual vanishes or a direction has no curvature."""
    quad = _SupportQuadratic(indptr, indices, shape, GL, GR, Lt, Rt)
    x = lam * np.asarray(values, dtype=np.float64)
    r = quad.C - quad.apply(x)
    p = r.copy()
    rr = float(r @ r)
    tiny = 1e-30 * max(float(quad.C @ quad.C), 1e-300)
    for _ in range(n_iter):
        if rr <= tiny:
            break
        Mp = quad.apply(p)
        curv = float(p @ Mp)
        if not curv > 0.0:
            break
        a = rr / curv
        x += a * p
        r -= a * Mp
        rn = float(r @ r)
        p = r + (rn / rr) * p
        rr = rn
    return x
