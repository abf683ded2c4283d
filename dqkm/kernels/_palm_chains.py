"""palm4MSA's gradient through the sparse factor chains (private to ``palm4msa``).

For factor ``S`` (r × c) with left part ``L = diag(d)·S_0···S_{q-1}`` and right
part ``R = S_{q+1}···S_{Q-1}`` the half gradient is

    ½∇f(S) = λ·Lᵀ(λ·L·(S·GR) − A·Rᵀ)        (2q sparse products per column)

with the dense Gram ``GR = R Rᵀ`` and ``A·Rᵀ`` the sweep keeps (folded one factor
at a time).  It is one call of :func:`left_chain_gradient`: column tiles of
``S·GR`` go through ``L``, the subtraction and ``Lᵀ`` inside two cache-resident
buffers, so no K × c intermediate is written.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from numba import njit

from ._factor_apply import _csr_rows_times, choose_tile

# dtype of the products through the chains: float32, as the reference's gradient GEMMs
# (the gradient only sets the step; every objective is evaluated in float64)
_GRAD_DTYPE = np.float32



@njit(cache=True, nogil=True)
def _chain_steps(a, b, t, order, indptr, indices, data, poffs, ioffs, shapes):  # OUT a, b
    # applies the factors ``order[0]``, ``order[1]``, … (in that order) to the (·, t) tile
    # in ``a``, ping-ponging with ``b``: the result is in ``a`` for an even number of
    # factors, in ``b`` for an odd one
    for k in range(order.size):
        f = order[k]
        if k % 2 == 0:
            _csr_rows_times(b, a, t, indptr, indices, data, poffs[f], ioffs[f], shapes[f, 0])
        else:
            _csr_rows_times(a, b, t, indptr, indices, data, poffs[f], ioffs[f], shapes[f, 0])


@njit(cache=True, nogil=True)
def left_chain_gradient(X, Tt, d, lam, out, tile, ld, fwd, bwd, indptr, indices, data,
                        poffs, ioffs, shapes):  # OUT out
    """``out = λ·Lᵀ(λ·L·X − Ttᵀ)`` with ``L = diag(d)·F_a···F_b`` applied as sparse
    operators, tile by tile of ``t`` columns of ``X`` (r × c): each tile goes through
    the chain ``L`` (factors ``fwd``, last first), the scaling and subtraction, and
    the chain ``Lᵀ`` (transposed factors ``bwd``) inside two ``(max dim, ld)``
    buffers, so no K × c intermediate is written.  ``Tt`` is c × K (``(A Rᵀ)ᵀ``).
    The tiles are computed in ``data``'s dtype (X, Tt and out are read and written
    in theirs: no converted copy is made).
    """
    r, c = X.shape
    K = d.size
    maxdim = max(K, r)
    for k in range(fwd.size):
        maxdim = max(maxdim, shapes[fwd[k], 0])
    for k in range(bwd.size):
        maxdim = max(maxdim, shapes[bwd[k], 0])
    bufa = np.empty((maxdim, ld), dtype=data.dtype)
    bufb = np.empty((maxdim, ld), dtype=data.dtype)
    for j0 in range(0, c, tile):
        t = min(tile, c - j0)
        for i in range(r):
            xr = X[i]
            br = bufa[i]
            for k in range(t):
                br[k] = xr[j0 + k]
        _chain_steps(bufa, bufb, t, fwd, indptr, indices, data, poffs, ioffs, shapes)
        mid, other = (bufa, bufb) if fwd.size % 2 == 0 else (bufb, bufa)
        for k in range(t):
            trow = Tt[j0 + k]
            for i in range(K):
                mid[i, k] = d[i] * (lam * d[i] * mid[i, k] - trow[i])
        _chain_steps(mid, other, t, bwd, indptr, indices, data, poffs, ioffs, shapes)
        src = mid if bwd.size % 2 == 0 else other
        for i in range(r):
            orow = out[i]
            sr = src[i]
            for k in range(t):
                orow[j0 + k] = lam * sr[k]


class _Chains:
    """Factors flattened for :func:`left_chain_gradient`: ``F_j`` is id ``j``,
    ``F_jᵀ`` id ``n + j``."""

    def __init__(self, facs):
        n = len(facs)
        mats = [f.csr_all() for f in facs]
        shapes = [f.dense.shape for f in facs]
        for (ip, ix, dv), (r, c) in zip(list(mats), list(shapes)):
            T = sp.csr_matrix((dv, ix, ip), shape=(r, c)).T.tocsr()
            mats.append((T.indptr, T.indices, T.data))
            shapes.append((c, r))
        self.n = n
        self.shapes = np.array(shapes, dtype=np.int64).reshape(-1, 2)
        self.poffs = np.zeros(2 * n, dtype=np.int64)
        self.ioffs = np.zeros(2 * n, dtype=np.int64)
        p = i = 0
        for j, (ip, ix, _) in enumerate(mats):
            self.poffs[j], self.ioffs[j] = p, i
            p += ip.size
            i += ix.size
        if n == 0:
            mats = [(np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0))]
        self.indptr = np.concatenate([m[0].astype(np.int64) for m in mats])
        self.indices = np.concatenate([m[1].astype(np.int64) for m in mats])
        self.data = np.concatenate([m[2] for m in mats]).astype(_GRAD_DTYPE)

    def gradient(self, fwd, bwd, X, Tt, d, lam):
        """``λ·Mᵀ(λ·diag(d)·M·X − Ttᵀ)``-shaped product of :func:`left_chain_gradient`:
        factors ``fwd`` applied to ``X`` (in order), then ``diag(d)``, the subtraction
        of ``Ttᵀ``, ``diag(d)``, the factors ``bwd``."""
        X = np.ascontiguousarray(X)
        out = np.empty(X.shape)  # the chains map X's rows to d's and back
        used = np.concatenate([fwd, bwd]).astype(np.int64)
        maxdim = max(d.size, X.shape[0], int(self.shapes[used].max()) if used.size else 0)
        tile, ld = choose_tile(maxdim, np.dtype(_GRAD_DTYPE).itemsize, X.shape[1])
        left_chain_gradient(X, np.ascontiguousarray(Tt), d, float(lam), out, tile, ld,
                            np.asarray(fwd, dtype=np.int64), np.asarray(bwd, dtype=np.int64),
                            self.indptr, self.indices, self.data, self.poffs, self.ioffs,
                            self.shapes)
        return out
