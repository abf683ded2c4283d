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

from ._split import run_split


@njit(nogil=True, cache=True)
def _sampled_rows(indptr, indices, L, R, i0, i1, out):  # OUT out (the entries of rows i0 … i1)
    """``out[e] = L[i] · R[j]`` for the entries ``e = (i, j)`` of a CSR support."""
    p = L.shape[1]
    for i in range(i0, i1):
        for e in range(indptr[i], indptr[i + 1]):
            j = indices[e]
            s = 0.0
            for k in range(p):
                s += L[i, k] * R[j, k]
            out[e] = s


@njit(nogil=True, cache=True)
def _support_apply(indptr, indices, x, GR, GL, GLd, diag, col_ptr, col_entry, rows, j0, j1,
                   out):  # OUT out (the entries of columns j0 … j1)
    """The entries on Ω of ``GL·X·GR`` (``GLd``: GL's diagonal when ``diag``) for X
    with values ``x`` on Ω, column by column of Ω: ``w = (X·GR)[:, j]`` from row j
    of the symmetric ``GR`` (``nnz`` multiply-adds), then each entry (i, j) of the
    column is ``GL[i]·w`` (``r`` each) — no r × c buffer, no transpose."""
    r = indptr.size - 1
    w = np.empty(r)
    for j in range(j0, j1):
        if col_ptr[j] == col_ptr[j + 1]:
            continue
        g = GR[j]
        for i in range(r):
            s = 0.0
            for e in range(indptr[i], indptr[i + 1]):
                s += x[e] * g[indices[e]]
            w[i] = s
        for t in range(col_ptr[j], col_ptr[j + 1]):
            e = col_entry[t]
            i = rows[e]
            if diag:
                out[e] = GLd[i] * w[i]
            else:
                h = GL[i]
                s = 0.0
                for k in range(r):
                    s += h[k] * w[k]
                out[e] = s


def _sampled_dot(indptr, indices, L, R, out):  # OUT out
    """:func:`_sampled_rows` over every row, split over the driver's threads."""
    run_split(lambda i0, i1: _sampled_rows(indptr, indices, L, R, i0, i1, out),
              indptr.size - 1, work=indices.size * L.shape[1])


def rows_of(indptr):
    """The row of every entry of a CSR support."""
    return np.repeat(np.arange(indptr.size - 1), np.diff(indptr))


class _SupportQuadratic:
    """``P_Ω(GL·X·GR)`` and ``C`` on the support Ω of a CSR pattern (see the module
    notes); ``GL`` may be a diagonal (1-D), ``GR`` None (the identity), ``Lt`` a
    diagonal (1-D: the fixed left factor alone)."""

    def __init__(self, indptr, indices, shape, GL, GR, Lt, Rt):
        self.indptr, self.indices, self.shape = indptr, indices, shape
        self.rows = rows_of(indptr)
        self.GL, self.GR = GL, GR
        nnz = indices.size
        self.C = np.empty(nnz)
        if Lt.ndim == 1:
            self.C[:] = Lt[self.rows] * Rt[indices, self.rows]
        else:
            _sampled_dot(indptr, indices, np.ascontiguousarray(Lt), np.ascontiguousarray(Rt),
                         self.C)
        if GR is not None:  # Ω by columns: the entries of each column j, in row order
            order = np.argsort(indices, kind="stable")
            self.col_entry = order.astype(np.int64)
            self.col_ptr = np.concatenate([[0], np.cumsum(np.bincount(indices,
                                                                      minlength=shape[1]))])
            self.GR = np.ascontiguousarray(GR)
            diag = GL.ndim == 1
            self.GLs = (np.empty((0, 0)), np.ascontiguousarray(GL), True) if diag else \
                (np.ascontiguousarray(GL), np.empty(0), False)

    def apply(self, x):
        """The entries on Ω of ``GL·X·GR`` for ``X`` with values ``x`` on Ω."""
        if self.GR is None:
            if self.GL.ndim == 1:
                return self.GL[self.rows] * x
            W = np.zeros(self.shape)
            W[self.rows, self.indices] = x
            out = np.empty(x.size)
            # (GL·X)_ij = GL[i]·X[:, j] = GL[i]·Xᵀ[j] (GL symmetric)
            _sampled_dot(self.indptr, self.indices, self.GL, np.ascontiguousarray(W.T), out)
            return out
        out = np.empty(x.size)
        args = (self.indptr, self.indices, x, self.GR, *self.GLs, self.col_ptr,
                self.col_entry, self.rows)
        # columns split over the driver's threads (each entry summed the same way)
        run_split(lambda j0, j1: _support_apply(*args, j0, j1, out), self.shape[1],
                  work=self.shape[1] * x.size)
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
