"""numba kernels that apply a chain of CSR factors to tiles of rows.

``Y = X · Vᵀ`` with ``V = S1 S2 ··· SQ`` (λ already folded into S1's values)
is computed tile by tile: a tile of ``t`` rows of X is transposed into a
``(D, t)`` buffer ``Z``, then ``Z ← SQ Z``, ``Z ← S(Q-1) Z``, …, ``Z ← S1 Z``,
and the final ``(K, t)`` buffer is transposed into ``t`` rows of Y.  In this
layout every stored value ``S[i, j]`` of a factor is one scaled row-add of
width ``t`` (``dst[i, :] += S[i, j] · src[j, :]``): contiguous, SIMD-friendly,
and a gather (each output row is written by one loop, no scatter conflicts),
using each factor's own CSR arrays — no transposed copy is ever made.  The
two ``(max dim, ld)`` buffers stay in cache through the whole chain (in the
L2 up to dimensions of about 500 with float32, in the L3 beyond).

The factors are passed flattened (one array of values, one of column indices,
one of row pointers, plus offsets per factor) so that one compiled kernel
serves any number of factors.

All kernels release the GIL; ``apply_rows_parallel`` splits the tiles over
numba threads (``prange`` over workers, each with its own buffers).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit, prange

from ._gemm import _argmin_columns

# below this many rows per tile the row-add loops are too short to vectorise
_NARROW = 8

__all__ = ["apply_rows_serial", "apply_rows_parallel", "choose_tile"]


def choose_tile(max_dim, itemsize, n_rows):
    """Rows per tile and the padded row stride of the ``(max_dim, ld)`` buffers.

    A tile is 512 bytes of each intermediate row (128 float32 / 64 float64
    values): LLVM vectorises the width-``t`` loops 4 × 64 bytes at a time,
    128-byte tiles ran at about half the speed, and 512 bytes measured best
    on the development machine (AVX-512).  It is halved while the two buffers would exceed 16 MiB.
    The stride ``ld`` is the tile rounded up to an odd number of 64-byte
    cache lines: a power-of-two stride (e.g. 128 float32) made the kernel
    up to 1.6x slower through cache-set and 4K-aliasing conflicts between
    the rows it reads and the row it writes.  With fewer than ``tile`` rows
    the tile is ``n_rows``, unpadded below ``_NARROW`` rows (a single vector
    then lies contiguous in L1, as in a plain CSR mat-vec).
    """
    itemsize = int(itemsize)
    per_line = 64 // itemsize
    tile = 512 // itemsize
    while tile > per_line and 2 * max(int(max_dim), 1) * (tile + 2 * per_line) * itemsize \
            > 16 * 1024 * 1024:
        tile //= 2
    # fewer rows than a tile (a single vector, say): buffers only as wide as needed
    tile = max(1, min(tile, int(n_rows)))
    if tile < _NARROW:
        return int(tile), int(tile)  # dense columns: a single vector is contiguous
    lines = -(-tile // per_line)
    if lines % 2 == 0:
        lines += 1
    return int(tile), int(lines * per_line)


@njit(nogil=True, cache=True, inline="always")
def _csr_rows_times_narrow(dst, src, t, indptr, indices, data, poff, ioff, m):  # OUT dst
    # a plain CSR product, one column at a time with the sum in a register; it adds the
    # terms in the same order as _csr_rows_times, so a row's result does not depend on
    # the tile width
    for c in range(t):
        for i in range(m):
            acc = dst.dtype.type(0.0)
            for p in range(ioff + indptr[poff + i], ioff + indptr[poff + i + 1]):
                acc += data[p] * src[indices[p], c]
            dst[i, c] = acc


@njit(nogil=True, cache=True, inline="always")
def _csr_rows_times(dst, src, t, indptr, indices, data, poff, ioff, m):  # OUT dst
    # dst[:m, :t] = S @ src[:, :t] for the CSR factor S stored at (poff, ioff)
    if t < _NARROW:
        _csr_rows_times_narrow(dst, src, t, indptr, indices, data, poff, ioff, m)
        return
    for i in range(m):
        p0 = ioff + indptr[poff + i]
        p1 = ioff + indptr[poff + i + 1]
        d = dst[i]
        if p1 - p0 == 0:
            for c in range(t):
                d[c] = 0.0
            continue
        # first (up to) four entries initialise the row, then groups of four
        # accumulate: one load/store of dst per four multiply-adds.  The terms are
        # added strictly left to right (((d + x0) + x1) + ...), as in a plain loop
        k = p1 - p0
        if k >= 4:
            a0 = src[indices[p0]]
            a1 = src[indices[p0 + 1]]
            a2 = src[indices[p0 + 2]]
            a3 = src[indices[p0 + 3]]
            v0 = data[p0]
            v1 = data[p0 + 1]
            v2 = data[p0 + 2]
            v3 = data[p0 + 3]
            for c in range(t):
                d[c] = v0 * a0[c] + v1 * a1[c] + v2 * a2[c] + v3 * a3[c]
            p = p0 + 4
        elif k == 3:
            a0 = src[indices[p0]]
            a1 = src[indices[p0 + 1]]
            a2 = src[indices[p0 + 2]]
            v0 = data[p0]
            v1 = data[p0 + 1]
            v2 = data[p0 + 2]
            for c in range(t):
                d[c] = v0 * a0[c] + v1 * a1[c] + v2 * a2[c]
            p = p1
        elif k == 2:
            a0 = src[indices[p0]]
            a1 = src[indices[p0 + 1]]
            v0 = data[p0]
            v1 = data[p0 + 1]
            for c in range(t):
                d[c] = v0 * a0[c] + v1 * a1[c]
            p = p1
        else:
            a0 = src[indices[p0]]
            v0 = data[p0]
            for c in range(t):
                d[c] = v0 * a0[c]
            p = p1
        while p + 4 <= p1:
            a0 = src[indices[p]]
            a1 = src[indices[p + 1]]
            a2 = src[indices[p + 2]]
            a3 = src[indices[p + 3]]
            v0 = data[p]
            v1 = data[p + 1]
            v2 = data[p + 2]
            v3 = data[p + 3]
            for c in range(t):
                d[c] = d[c] + v0 * a0[c] + v1 * a1[c] + v2 * a2[c] + v3 * a3[c]
            p += 4
        while p < p1:
            a0 = src[indices[p]]
            v0 = data[p]
            for c in range(t):
                d[c] += v0 * a0[c]
            p += 1


@njit(nogil=True, cache=True)
def _apply_tile(X, r0, t, out, bufa, bufb, shapes, indptr, indices, data, poffs, ioffs):
    # OUT out (rows r0 .. r0+t), bufa, bufb (scratch)
    src = _chain_tile(X, r0, t, bufa, bufb, shapes, indptr, indices, data, poffs, ioffs)
    k_out = shapes[0, 0]
    for c in range(t):
        orow = out[r0 + c]
        for i in range(k_out):
            orow[i] = src[i, c]


@njit(nogil=True, cache=True)
def _chain_tile(X, r0, t, bufa, bufb, shapes, indptr, indices, data, poffs, ioffs):
    # OUT bufa, bufb (scratch); returns the buffer holding (X[r0:r0+t] @ Vᵀ)ᵀ, K × t
    n_factors = shapes.shape[0]
    d_in = X.shape[1]
    for c in range(t):
        row = X[r0 + c]
        for j in range(d_in):
            bufa[j, c] = row[j]
    src = bufa
    dst = bufb
    for q in range(n_factors - 1, -1, -1):
        _csr_rows_times(dst, src, t, indptr, indices, data, poffs[q], ioffs[q], shapes[q, 0])
        tmp = src
        src = dst
        dst = tmp
    return src


@njit(nogil=True, cache=True)
def _argmin_tile(X, r0, t, labels, best, half, bufa, bufb, shapes, indptr, indices, data,
                 poffs, ioffs):
    # OUT labels (rows r0 .. r0+t), best, bufa, bufb (scratch)
    src = _chain_tile(X, r0, t, bufa, bufb, shapes, indptr, indices, data, poffs, ioffs)
    _argmin_columns(src, shapes[0, 0], t, half, best, labels, r0)  # K × t products


@njit(nogil=True, cache=True)
def argmin_rows_serial(X, labels, half, tile, ld, shapes, indptr, indices, data, poffs,
                       ioffs):  # OUT labels
    """``labels[r] = argmin_k half[k] − (X @ Vᵀ)[r, k]`` tile by tile: the products of a
    tile stay in cache, the n × K matrix is never formed."""
    n = X.shape[0]
    maxdim = max(X.shape[1], shapes.max())
    bufa = np.empty((maxdim, ld), dtype=half.dtype)
    bufb = np.empty((maxdim, ld), dtype=half.dtype)
    best = np.empty(ld, dtype=half.dtype)
    for r0 in range(0, n, tile):
        t = min(tile, n - r0)
        _argmin_tile(X, r0, t, labels, best, half, bufa, bufb, shapes, indptr, indices, data,
                     poffs, ioffs)


@njit(nogil=True, cache=True, parallel=True)
def argmin_rows_parallel(X, labels, half, tile, ld, n_workers, shapes, indptr, indices, data,
                         poffs, ioffs):  # OUT labels
    """:func:`argmin_rows_serial` with the tiles dealt round-robin to ``n_workers`` threads."""
    n = X.shape[0]
    n_tiles = (n + tile - 1) // tile
    maxdim = max(X.shape[1], shapes.max())
    for w in prange(n_workers):
        bufa = np.empty((maxdim, ld), dtype=half.dtype)
        bufb = np.empty((maxdim, ld), dtype=half.dtype)
        best = np.empty(ld, dtype=half.dtype)
        for k in range(w, n_tiles, n_workers):
            r0 = k * tile
            t = min(tile, n - r0)
            _argmin_tile(X, r0, t, labels, best, half, bufa, bufb, shapes, indptr, indices,
                         data, poffs, ioffs)


@njit(nogil=True, cache=True)
def apply_rows_serial(X, out, tile, ld, shapes, indptr, indices, data, poffs, ioffs):  # OUT out
    """``out[:] = X @ Vᵀ`` on the calling thread, tile by tile."""
    n = X.shape[0]
    maxdim = max(X.shape[1], shapes.max())
    bufa = np.empty((maxdim, ld), dtype=out.dtype)
    bufb = np.empty((maxdim, ld), dtype=out.dtype)
    for r0 in range(0, n, tile):
        t = min(tile, n - r0)
        _apply_tile(X, r0, t, out, bufa, bufb, shapes, indptr, indices, data, poffs, ioffs)


@njit(nogil=True, cache=True, parallel=True)
def apply_rows_parallel(X, out, tile, ld, n_workers, shapes, indptr, indices, data, poffs,
                        ioffs):  # OUT out
    """``out[:] = X @ Vᵀ`` with the tiles dealt round-robin to ``n_workers`` threads."""
    n = X.shape[0]
    n_tiles = (n + tile - 1) // tile
    maxdim = max(X.shape[1], shapes.max())
    for w in prange(n_workers):
        bufa = np.empty((maxdim, ld), dtype=out.dtype)
        bufb = np.empty((maxdim, ld), dtype=out.dtype)
        for k in range(w, n_tiles, n_workers):
            r0 = k * tile
            t = min(tile, n - r0)
            _apply_tile(X, r0, t, out, bufa, bufb, shapes, indptr, indices, data, poffs, ioffs)


# ------------------------------------------------ palm4MSA's products with one factor


@njit(cache=True, nogil=True, fastmath=True)
def _csr_mm(indptr, indices, data, X):
    """``S @ X`` for CSR ``S`` (r × c) and dense C-ordered ``X`` (c × p)."""
    r = indptr.size - 1
    p = X.shape[1]
    out = np.zeros((r, p))
    for i in range(r):
        for k in range(indptr[i], indptr[i + 1]):
            v = data[k]
            j = indices[k]
            for t in range(p):
                out[i, t] += v * X[j, t]
    return out


@njit(cache=True, nogil=True, fastmath=True)
def _csr_tmm(indptr, indices, data, X, c):
    """``Sᵀ @ X`` for CSR ``S`` (r × c) and dense C-ordered ``X`` (r × p)."""
    r = indptr.size - 1
    p = X.shape[1]
    out = np.zeros((c, p))
    for i in range(r):
        for k in range(indptr[i], indptr[i + 1]):
            v = data[k]
            j = indices[k]
            for t in range(p):
                out[j, t] += v * X[i, t]
    return out


@njit(cache=True, nogil=True, fastmath=True)
def _support_dot(indptr, indices, data, Lt, Rt):
    """``⟨Ltᵀ Rt… , S⟩``: ``Σ_(i,j) S_ij · (Lt[i] · Rt[j])`` over the non-zeros of CSR ``S``."""
    r = indptr.size - 1
    p = Lt.shape[1]
    tot = 0.0
    for i in range(r):
        for k in range(indptr[i], indptr[i + 1]):
            j = indices[k]
            acc = 0.0
            for t in range(p):
                acc += Lt[i, t] * Rt[j, t]
            tot += data[k] * acc
    return tot


@njit(cache=True, nogil=True)
def _dense_to_csr(M):
    r, c = M.shape
    nnz = 0
    for i in range(r):
        for j in range(c):
            if M[i, j] != 0.0:
                nnz += 1
    indptr = np.zeros(r + 1, dtype=np.int64)
    indices = np.empty(nnz, dtype=np.int64)
    data = np.empty(nnz)
    k = 0
    for i in range(r):
        for j in range(c):
            if M[i, j] != 0.0:
                indices[k] = j
                data[k] = M[i, j]
                k += 1
        indptr[i + 1] = k
    return indptr, indices, data


@njit(cache=True, nogil=True)
def _chain_mv(indptr, indices, data, poffs, ioffs, shapes, j, x, transpose):
    """``F_j x`` (or ``F_jᵀ x``) for factor ``j`` of a flattened CSR chain."""
    r, c = shapes[j, 0], shapes[j, 1]
    p0, i0 = poffs[j], ioffs[j]
    out = np.zeros(c if transpose else r)
    for i in range(r):
        if transpose:
            xi = x[i]
            for k in range(i0 + indptr[p0 + i], i0 + indptr[p0 + i + 1]):
                out[indices[k]] += data[k] * xi
        else:
            acc = 0.0
            for k in range(i0 + indptr[p0 + i], i0 + indptr[p0 + i + 1]):
                acc += data[k] * x[indices[k]]
            out[i] = acc
    return out


@njit(cache=True, nogil=True)
def chain_gram_top_eig(indptr, indices, data, poffs, ioffs, shapes, d2, v, left, max_iter, rtol):
    """Largest eigenvalue of the Gram matrix of a chain ``M = F_0···F_{m-1}`` by
    warm-started power iteration through the factors (never forming ``M``).

    ``left``: ``MᵀD²M`` (``d2`` the squared diagonal on the left of ``M``), else
    ``M Mᵀ``.  Stops when the Rayleigh quotient changes by at most ``rtol``
    relatively, after at most ``max_iter`` products.  Returns the quotient (a
    lower bound) and the last unit vector.
    """
    m = shapes.shape[0]
    rho = 0.0
    for _ in range(max_iter):
        x = v
        if left:
            for j in range(m - 1, -1, -1):
                x = _chain_mv(indptr, indices, data, poffs, ioffs, shapes, j, x, False)
            x = x * d2
            for j in range(m):
                x = _chain_mv(indptr, indices, data, poffs, ioffs, shapes, j, x, True)
        else:
            for j in range(m):
                x = _chain_mv(indptr, indices, data, poffs, ioffs, shapes, j, x, True)
            for j in range(m - 1, -1, -1):
                x = _chain_mv(indptr, indices, data, poffs, ioffs, shapes, j, x, False)
        new = 0.0
        nw = 0.0
        for i in range(x.size):
            new += v[i] * x[i]
            nw += x[i] * x[i]
        nw = np.sqrt(nw)
        if nw == 0.0:
            return 0.0, v
        v = x / nw
        if abs(new - rho) <= rtol * new:
            return max(new, rho), v
        rho = new
    return rho, v


# ------------------------------------------------ palm4MSA's factors and spectral norms

_DENSE_ABOVE = 0.25  # nnz / size above which a factor is multiplied with BLAS


class _Factor:
    """One factor as a dense float64 array plus CSR arrays when sparse enough."""

    __slots__ = ("dense", "csr", "cost", "_all", "_t")

    def __init__(self, dense):
        self.dense = np.ascontiguousarray(dense, dtype=np.float64)
        nnz = np.count_nonzero(self.dense)
        self.csr = _dense_to_csr(self.dense) if nnz <= _DENSE_ABOVE * self.dense.size else None
        self.cost = float(nnz if self.csr is not None else self.dense.size)  # multiply-adds per column
        self._all = self.csr
        self._t = None

    @classmethod
    def from_parts(cls, dense, csr):
        """A factor from its dense array and its CSR arrays (already consistent)."""
        self = cls.__new__(cls)
        self.dense = dense
        nnz = csr[2].size
        self.csr = csr if nnz <= _DENSE_ABOVE * dense.size else None
        self.cost = float(nnz if self.csr is not None else dense.size)
        self._all = csr
        self._t = None
        return self

    def csr_all(self):
        """CSR arrays also for a dense factor (for the power iterations through the chain)."""
        if self._all is None:
            self._all = _dense_to_csr(self.dense)
        return self._all

    def mul(self, X):
        """``S @ X``, X (c × p) C-ordered."""
        if self.csr is None:
            return self.dense @ X
        return _csr_mm(*self.csr, np.ascontiguousarray(X))

    def times_t(self, X):
        """``X @ Sᵀ`` (X of shape p × c) by the tiled row kernel (the transposes stay
        inside cache-sized tiles; no transposed copy of X is made)."""
        if self.csr is None:
            return X @ self.dense.T
        return _rows_times(_contig(X), *self.csr, self.dense.shape)

    def times(self, X):
        """``X @ S`` (X of shape p × r), as :meth:`times_t` with ``Sᵀ``'s CSR arrays."""
        if self.csr is None:
            return X @ self.dense
        if self._t is None:
            self._t = _csr_transpose(*self.csr, self.dense.shape[1])
        return _rows_times(_contig(X), *self._t, self.dense.shape[::-1])

    def tmul(self, X):
        """``Sᵀ @ X``, X (r × p) C-ordered."""
        if self.csr is None:
            return self.dense.T @ X
        return _csr_tmm(*self.csr, np.ascontiguousarray(X), self.dense.shape[1])


@njit(cache=True, nogil=True)
def transpose(X):
    """``X.T`` as a new C-ordered array, copied in 32 × 32 blocks (cache friendly)."""
    m, n = X.shape
    out = np.empty((n, m), dtype=X.dtype)
    for i0 in range(0, m, 32):
        i1 = min(i0 + 32, m)
        for j0 in range(0, n, 32):
            j1 = min(j0 + 32, n)
            for j in range(j0, j1):
                for i in range(i0, i1):
                    out[j, i] = X[i, j]
    return out


@njit(cache=True, nogil=True)
def tdot(Y, Z):
    """``⟨Yᵀ, Z⟩ = Σ_ij Y[j, i]·Z[i, j]`` in 32 × 32 blocks (no transposed copy)."""
    m, n = Z.shape
    tot = 0.0
    for i0 in range(0, m, 32):
        i1 = min(i0 + 32, m)
        for j0 in range(0, n, 32):
            j1 = min(j0 + 32, n)
            for j in range(j0, j1):
                for i in range(i0, i1):
                    tot += Y[j, i] * Z[i, j]
    return tot


def _contig(X):
    """C-ordered ``X``: a transposed view is copied blockwise (:func:`transpose`)."""
    if X.flags.c_contiguous:
        return X
    if X.ndim == 2 and X.T.flags.c_contiguous:
        return transpose(X.T)
    return np.ascontiguousarray(X)


def _csr_transpose(indptr, indices, data, c):
    """CSR arrays of ``Sᵀ`` (c × r) from those of ``S``."""
    r = indptr.size - 1
    T = sp.csr_matrix((data, indices, indptr), shape=(r, c)).T.tocsr()
    return T.indptr.astype(np.int64), T.indices.astype(np.int64), T.data


def _rows_times(X, indptr, indices, data, shape):
    """``X @ Sᵀ`` for one CSR factor ``S`` of the given shape: :func:`apply_rows_serial`."""
    out = np.empty((X.shape[0], shape[0]))
    tile, ld = choose_tile(max(shape), 8, X.shape[0])
    apply_rows_serial(X, out, tile, ld, np.array([shape], dtype=np.int64), indptr, indices,
                      data, np.zeros(1, np.int64), np.zeros(1, np.int64))
    return out


def _lmul(G, X):
    """``G @ X`` where G is a dense matrix or a diagonal given as a vector."""
    return G[:, None] * X if G.ndim == 1 else G @ X


# power iterations for ‖L‖₂², ‖R‖₂²: (at most, relative-change stopping rule).  Safeguarded
# updates use a few (an underestimate only costs a backtrack); unguarded (plain PALM) ones
# iterate to 1e-6, as the descent proof needs c above the Lipschitz constant
_EIG_RULES = {True: (8, 1e-4), False: (100, 1e-6)}


def _chain_top_eig(facs, d2, v, left, few):
    """:func:`_top_eig` of ``LᵀL`` (``left``, ``L = diag(√d2)·F…``) or ``R Rᵀ``
    through the factors ``facs`` (same rule, same iterates to rounding)."""
    ptrs, idxs, vals = [], [], []
    poffs = np.zeros(len(facs), dtype=np.int64)
    ioffs = np.zeros(len(facs), dtype=np.int64)
    p = i = 0
    for j, f in enumerate(facs):
        ip, ix, dv = f.csr_all()
        poffs[j], ioffs[j] = p, i
        ptrs.append(ip)
        idxs.append(ix)
        vals.append(dv)
        p += ip.size
        i += ix.size
    shapes = np.array([f.dense.shape for f in facs], dtype=np.int64)
    rho, v = chain_gram_top_eig(np.concatenate(ptrs), np.concatenate(idxs), np.concatenate(vals),
                                poffs, ioffs, shapes, d2, v, left, *_EIG_RULES[few])
    return float(rho), v


def _top_eig(G, v, few):
    """Largest eigenvalue of a symmetric PSD matrix by warm-started power iteration.

    Returns the Rayleigh quotient (a lower bound of λ_max) and the new vector.
    Stops by ``_EIG_RULES[few]``: for a safeguarded update (``few``) after at
    most 8 products or a relative change below 1e-4 (the backtracking in
    :func:`_guarded_update` makes an underestimate harmless), else at most
    100 products or 1e-6.
    """
    if G.ndim == 1:
        return float(G.max()) if G.size else 0.0, v
    rho = 0.0
    max_iter, rtol = _EIG_RULES[few]
    for _ in range(max_iter):
        w = G @ v
        new = float(v @ w)
        nw = np.linalg.norm(w)
        if nw == 0.0:
            return 0.0, v
        v = w / nw
        if abs(new - rho) <= rtol * new:
            return max(new, rho), v
        rho = new
    return rho, v
