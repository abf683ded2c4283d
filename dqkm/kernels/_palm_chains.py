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

from ._factor_apply import _csr_rows_times, _csr_transpose, choose_tile
from ._split import n_threads, run_split, split_ranges

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
                        poffs, ioffs, shapes, c0, c1):  # OUT out
    """``out = λ·Lᵀ(λ·L·X − Ttᵀ)`` with ``L = diag(d)·F_a···F_b`` applied as sparse
    operators, for the columns ``c0 … c1`` of ``out`` (``c0`` a multiple of ``tile``),
    tile by tile of ``t`` columns of ``X`` (r × c): each tile goes through
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
    for j0 in range(c0, min(c1, c), tile):
        t = min(tile, c1 - j0)
        for i in range(r):
            xr = X[i]
            br = bufa[i]
            for k in range(t):
                br[k] = xr[j0 + k]
        _chain_steps(bufa, bufb, t, fwd, indptr, indices, data, poffs, ioffs, shapes)
        mid, other = (bufa, bufb) if fwd.size % 2 == 0 else (bufb, bufa)
        for i0 in range(0, K, 16):  # blocks of 16 rows: mid's column and Tt's rows in L1
            i1 = min(i0 + 16, K)
            for k in range(t):
                trow = Tt[j0 + k]
                for i in range(i0, i1):
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
        Tt = np.ascontiguousarray(Tt)
        fwd = np.asarray(fwd, dtype=np.int64)
        bwd = np.asarray(bwd, dtype=np.int64)
        args = (X, Tt, d, float(lam), out, tile, ld, fwd, bwd, self.indptr, self.indices,
                self.data, self.poffs, self.ioffs, self.shapes)
        if n_threads(out.size) == 1:  # small: no Python around the call
            left_chain_gradient(*args, 0, X.shape[1])
        else:
            run_split(lambda c0, c1: left_chain_gradient(*args, c0, c1), X.shape[1], out.size,
                      tile)
        return out


# ------------------------------------------- one-factor products of the through path


@njit(cache=True, nogil=True)
def _gather_mm(indptr, indices, data, X, out, r0, r1):  # OUT out
    # rows r0 … r1 of out = S @ X for CSR S: one row-add of X's rows per stored value (a
    # gather: each row of out is written by one loop, four values per pass)
    _csr_rows_times(out[r0:r1], X, X.shape[1], indptr, indices, data, r0, 0, r1 - r0)


def _gather(csr, X, out):
    """``out = S @ X`` by :func:`_gather_mm`, its rows split over threads (:mod:`._split`)."""
    X = np.ascontiguousarray(X)
    if n_threads(out.size) == 1:  # small: no Python around the call
        _gather_mm(*csr, X, out, 0, out.shape[0])
    else:
        run_split(lambda r0, r1: _gather_mm(*csr, X, out, r0, r1), out.shape[0], out.size)
    return out


def fmul(fac, X):
    """``S @ X`` (X of shape c × p) for a :class:`._factor_apply._Factor`."""
    if fac.csr is None:
        return fac.dense @ X
    return _gather(fac.csr, X, np.empty((fac.dense.shape[0], X.shape[1])))


def ftmul(fac, X):
    """``Sᵀ @ X`` (X of shape r × p), a gather with ``Sᵀ``'s CSR arrays (built once)."""
    if fac.csr is None:
        return fac.dense.T @ X
    if fac._t is None:
        fac._t = _csr_transpose(*fac.csr, fac.dense.shape[1])
    return _gather(fac._t, X, np.empty((fac.dense.shape[1], X.shape[1])))


@njit(cache=True, nogil=True)
def sandwich(indptr, indices, data, G, W, out, tile, ld, b0, b1, accs):  # OUT out, accs
    """Columns ``b0 … b1`` of ``out = S·G·Sᵀ`` (r × r) for CSR ``S`` (r × c) and a
    symmetric dense ``G`` (c × c) (``b0`` a multiple of ``tile``); with a ``W`` of
    shape r × r, ``accs[i0 // tile, k]`` is row k's share of ``⟨W, out⟩`` in the column
    block ``i0`` (:func:`_ordered_sum` adds them up in one order whatever the split) and
    the return value their sum over this call's blocks, in that order (0: no ``W``).

    Block by block of ``tile`` rows of ``S``: the rows of ``Y = S·G`` are gathered
    (row-adds of ``G``'s rows), transposed inside a cache-resident buffer, and
    ``S·Yᵀ`` (row-adds of width ``tile``) is the column block of ``out`` (``S·G·Sᵀ``
    is symmetric).  Neither ``S·G`` nor a transposed copy of it is written; the same
    sums in the same order as ``S·(S·G)ᵀ`` by two one-factor products.
    """
    r = indptr.size - 1
    c = G.shape[1]
    cpad = (c + 7) // 8
    cpad = 8 * (cpad + 1 - cpad % 2)  # an odd number of cache lines: no set conflicts
    ybuf = np.empty((tile, cpad))  # in the transpose, as for choose_tile's ld
    tbuf = np.empty((c, ld))
    mbuf = np.empty((r, ld))
    withw = W.shape[0] == r
    tot = 0.0
    for i0 in range(b0, min(b1, r), tile):
        t = min(tile, b1 - i0)
        _csr_rows_times(ybuf, G, c, indptr, indices, data, i0, 0, t)
        for j0 in range(0, c, 32):  # the block's transpose, 32 columns at a time
            for a in range(t):
                ya = ybuf[a]
                for j in range(j0, min(j0 + 32, c)):
                    tbuf[j, a] = ya[j]
        _csr_rows_times(mbuf, tbuf, t, indptr, indices, data, 0, 0, r)
        for k in range(r):
            mk = mbuf[k]
            ok = out[k]
            acc = 0.0
            if withw:
                wk = W[k]
                for a in range(t):
                    ok[i0 + a] = mk[a]
                    acc += wk[i0 + a] * mk[a]
                accs[i0 // tile, k] = acc
                tot += acc
            else:
                for a in range(t):
                    ok[i0 + a] = mk[a]
    return tot


@njit(cache=True, nogil=True)
def _ordered_sum(accs):
    # block by block, row by row: the order of the one-thread loop
    tot = 0.0
    for b in range(accs.shape[0]):
        for k in range(accs.shape[1]):
            tot += accs[b, k]
    return tot


def fsandwich(fac, G, W=None, transposed=False):
    """``(S·G·Sᵀ, ⟨W, S·G·Sᵀ⟩)`` by :func:`sandwich` (``transposed``: ``Sᵀ·G·S``
    through ``Sᵀ``'s CSR arrays) for a :class:`._factor_apply._Factor` with CSR arrays."""
    if transposed:
        if fac._t is None:
            fac._t = _csr_transpose(*fac.csr, fac.dense.shape[1])
        csr, r = fac._t, fac.dense.shape[1]
    else:
        csr, r = fac.csr, fac.dense.shape[0]
    out = np.empty((r, r))
    tile, ld = choose_tile(max(r, G.shape[0]), 8, r)
    G = np.ascontiguousarray(G)
    W = np.zeros((0, 0)) if W is None else W
    accs = np.zeros((-(-r // tile) if W.shape[0] == r else 0, r))
    if n_threads(out.size) == 1:  # one range: its own sum is the ordered one
        return out, float(sandwich(*csr, G, W, out, tile, ld, 0, r, accs))
    run_split(lambda b0, b1: sandwich(*csr, G, W, out, tile, ld, b0, b1, accs), r, out.size,
              tile)
    return out, float(_ordered_sum(accs))


# --------------------------------------- the Splincol step without dense intermediates


@njit(cache=True, nogil=True)
def _insert(bufv, bufi, row, n, s, v, idx):
    # the insertion buffer of projections._rows_topk_mask / _cols_topk_mask (same ties:
    # an equal magnitude arriving later never displaces a kept one); returns the new count
    if n == s:
        if v <= bufv[row, s - 1]:
            return n
        p = s - 1
    else:
        p = n
        n += 1
    while p > 0 and bufv[row, p - 1] < v:
        bufv[row, p] = bufv[row, p - 1]
        bufi[row, p] = bufi[row, p - 1]
        p -= 1
    bufv[row, p] = v
    bufi[row, p] = idx
    return n


@njit(cache=True, nogil=True)
def _row_picked(ri, rn, i, j):
    # whether column j is among the rn[i] picks of row i
    for u in range(rn[i]):
        if ri[i, u] == j:
            return True
    return False


@njit(cache=True, nogil=True)
def _splincol_rows(S, G, cm, s, lo, hi, ri, rn, cv, ci, cn):  # OUT ri, rn (rows lo … hi), cv, ci, cn
    """The picks of rows ``lo … hi`` of ``|S − G/cm|``: each row's ``s`` largest
    (``ri``/``rn``) and each column's ``s`` largest among these rows
    (``cv``/``ci``/``cn``), in the insertion buffers' order (larger first, an
    equal value after the earlier row)."""
    c = S.shape[1]
    rv = np.empty((1, s))
    for i in range(lo, hi):
        Si = S[i]
        Gi = G[i]
        n = 0
        for j in range(c):
            v = abs(Si[j] - Gi[j] / cm)
            n = _insert(rv, ri[i:i + 1], 0, n, s, v, j)
            cn[j] = _insert(cv, ci, j, cn[j], s, v, i)
        rn[i] = n


@njit(cache=True, nogil=True)
def _merge_columns(cv, ci, cn, s):
    """One column buffer from the buffers of consecutive row ranges (``cv[p]`` …):
    each range's picks inserted in range order, so an equal value keeps the earlier
    row — the picks one pass over all rows makes."""
    c = cv.shape[1]
    mv = np.empty((c, s))
    mi = np.empty((c, s), dtype=np.int64)
    mn = np.zeros(c, dtype=np.int64)
    for p in range(cv.shape[0]):
        for j in range(c):
            for t in range(cn[p, j]):
                mn[j] = _insert(mv, mi, j, mn[j], s, cv[p, j, t], ci[p, j, t])
    return mv, mi, mn


@njit(cache=True, nogil=True)
def _splincol_union(S, G, cm, ri, rn, ci, cn, out):  # OUT out
    # the union, row by row: a column's pick (i, j) is new unless j is among row i's
    r, c = S.shape
    cnt = rn.copy()
    for j in range(c):
        for t in range(cn[j]):
            i = ci[j, t]
            if not _row_picked(ri, rn, i, j):
                cnt[i] += 1
    indptr = np.zeros(r + 1, dtype=np.int64)
    for i in range(r):
        indptr[i + 1] = indptr[i] + cnt[i]
    indices = np.empty(indptr[r], dtype=np.int64)
    fill = indptr[:r].copy()
    for i in range(r):
        for u in range(rn[i]):
            indices[fill[i]] = ri[i, u]
            fill[i] += 1
    for j in range(c):
        for t in range(cn[j]):
            i = ci[j, t]
            if not _row_picked(ri, rn, i, j):
                indices[fill[i]] = j
                fill[i] += 1
    return _finish_rows(S, G, cm, indptr, indices, out)


@njit(cache=True, nogil=True)
def _splincol_step1(S, G, cm, s, out):  # OUT out (zeros on entry)
    r, c = S.shape
    ri = np.empty((r, s), dtype=np.int64)
    rn = np.zeros(r, dtype=np.int64)
    cv = np.empty((c, s))
    ci = np.empty((c, s), dtype=np.int64)
    cn = np.zeros(c, dtype=np.int64)
    _splincol_rows(S, G, cm, s, 0, r, ri, rn, cv, ci, cn)
    return _splincol_union(S, G, cm, ri, rn, ci, cn, out)


def splincol_step(S, G, cm, s, out):  # OUT out (zeros on entry)
    """``out = Splincol_s(S − G/cm)`` (unit Frobenius norm) in one pass over ``G``.

    The union of the ``s`` largest ``|D|`` of every row and of every column, the
    same entries and ties as ``Splincol._mask`` on the dense ``D = S − G/cm``
    (``D`` is recomputed, never stored).  Returns the CSR arrays of ``out``
    (column indices sorted in each row, exact zeros dropped).

    From 2¹⁹ entries the rows are split into one contiguous range per thread
    (:func:`._split.run_split`), each with its own column buffers, merged in
    range order: the same picks, and the values and norm are then summed on one
    thread in the one-thread order, so the result is the same to the bit.
    """
    r, c = S.shape
    ranges = split_ranges(r, n_threads(r * c))
    if len(ranges) == 1:
        return _splincol_step1(S, G, cm, s, out)
    part = {lo: p for p, (lo, _) in enumerate(ranges)}
    ri = np.empty((r, s), dtype=np.int64)
    rn = np.zeros(r, dtype=np.int64)
    cv = np.empty((len(ranges), c, s))
    ci = np.empty((len(ranges), c, s), dtype=np.int64)
    cn = np.zeros((len(ranges), c), dtype=np.int64)
    run_split(lambda lo, hi: _splincol_rows(S, G, cm, s, lo, hi, ri, rn, cv[part[lo]],
                                            ci[part[lo]], cn[part[lo]]), r, r * c)
    _, mi, mn = _merge_columns(cv, ci, cn, s)
    return _splincol_union(S, G, cm, ri, rn, mi, mn, out)


@njit(cache=True, nogil=True)
def support_step(S, G, cm, indptr0, indices0, out):  # OUT out (zeros on entry)
    """``out = (S − G/cm)`` on the CSR support ``(indptr0, indices0)``, unit norm;
    returns its CSR arrays as :func:`splincol_step`."""
    return _finish_rows(S, G, cm, indptr0.copy(), indices0.copy(), out)


@njit(cache=True, nogil=True)
def _finish_rows(S, G, cm, indptr, indices, out):  # OUT out, indices (sorted per row)
    r = S.shape[0]
    data = np.empty(indices.size)
    tot = 0.0
    for i in range(r):
        a, b = indptr[i], indptr[i + 1]
        for p in range(a + 1, b):  # insertion sort of a short row
            v = indices[p]
            q = p
            while q > a and indices[q - 1] > v:
                indices[q] = indices[q - 1]
                q -= 1
            indices[q] = v
        for p in range(a, b):
            j = indices[p]
            v = S[i, j] - G[i, j] / cm
            data[p] = v
            tot += v * v
    norm = np.sqrt(tot)
    # drop exact zeros (as a dense-to-CSR conversion would) and normalise
    k = 0
    start = 0
    for i in range(r):
        end = indptr[i + 1]
        for p in range(start, end):
            v = data[p]
            if v != 0.0:
                if norm > 0.0:
                    v = v / norm
                j = indices[p]
                indices[k] = j
                data[k] = v
                out[i, j] = v
                k += 1
        start = end
        indptr[i + 1] = k
    return indptr, indices[:k].copy(), data[:k].copy()
