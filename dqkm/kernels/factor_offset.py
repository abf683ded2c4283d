"""Sparse factors plus a dense offset row, ``V = 1·μᵀ + λ·S1···SQ``, as plain factors.

QK-means's centroids share a large common part (every digit image is mostly
background; every embedding has the data's mean).  Sparse factors spend most of
their non-zeros reproducing that common row.  Fitting ``λ·S1···SQ`` to the
centroids *minus* a dense row ``μ`` (D values) leaves the factors the part that
differs between clusters.

:func:`add_offset` writes ``1·μᵀ + λ·S1···SQ`` exactly as an ordinary
:class:`SparseFactors` with one more inner dimension:

* ``S1' = [λ·S1 | 1]`` (K × (n1 + 1)), the column of ones last;
* ``S_q' = diag(S_q, 1)`` for the inner factors;
* ``SQ' = [SQ ; μᵀ]`` ((n_{Q−1} + 1) × D), the row ``μᵀ`` last;

so ``S1'···SQ' = λ·S1···SQ + 1·μᵀ`` and ``λ' = 1``.  Everything that applies,
stores or compares factors sees the centroids themselves; the offset costs
``K + D + Q − 2`` more non-zeros (``2·D`` more flops per point, counting μ's
row as dense).  :func:`split_offset` reads ``(λ·S1···SQ, μ)`` back and checks
the layout, so that factors without it are never taken for factors with it.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .sparse_factors import SparseFactors

__all__ = ["add_offset", "split_offset"]


def add_offset(factors, offset):
    """``1·offsetᵀ + factors`` as one :class:`SparseFactors` (see the module notes).

    Parameters
    ----------
    factors : SparseFactors of shape (K, D), at least two factors
    offset : array-like of shape (D,)
        Finite.  Zero entries are not stored.

    Returns
    -------
    SparseFactors of shape (K, D)
        ``lam == 1``; its dense product is ``factors.toarray() + offset``
        (to rounding), and :func:`split_offset` gives back both parts.

    Examples
    --------
    >>> import numpy as np
    >>> W = SparseFactors([np.eye(2), np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 3.0]])], lam=2.0)
    >>> V = add_offset(W, [1.0, 1.0, 0.0])
    >>> V.toarray()
    array([[3., 1., 0.],
           [1., 1., 6.]])
    """
    if not isinstance(factors, SparseFactors):
        raise TypeError(f"The 'factors' parameter of add_offset must be a SparseFactors. "
                        f"Got {type(factors).__name__} instead.")
    if factors.n_factors < 2:
        raise ValueError(f"The 'factors' parameter of add_offset must hold at least 2 "
                         f"factors. Got {factors.n_factors} instead.")
    K, D = factors.shape
    mu = np.asarray(offset, dtype=np.float64)
    if mu.shape != (D,) or not np.all(np.isfinite(mu)):
        raise ValueError(f"The 'offset' parameter of add_offset must be a finite vector of "
                         f"shape ({D},). Got shape {mu.shape}"
                         f"{'' if mu.shape != (D,) else ' with NaN or inf'} instead.")
    dt = factors.dtype
    mats = list(factors.factors)
    S1 = mats[0].astype(dt) * dt.type(factors.lam)
    out = [sp.hstack([S1, sp.csr_matrix(np.ones((K, 1), dtype=dt))], format="csr")]
    for S in mats[1:-1]:
        out.append(sp.block_diag([S, sp.csr_matrix(np.ones((1, 1), dtype=dt))], format="csr"))
    out.append(sp.vstack([mats[-1], sp.csr_matrix(mu.astype(dt)[None, :])], format="csr"))
    return SparseFactors(out, lam=1.0)


def split_offset(factors):
    """The parts ``(λ·S1···SQ, μ)`` of factors written by :func:`add_offset`.

    Parameters
    ----------
    factors : SparseFactors
        Written by :func:`add_offset` (possibly stored and read back).

    Returns
    -------
    inner : SparseFactors of shape (K, D)
        ``λ·S1···SQ`` with ``λ`` folded into ``S1`` (``lam == 1``).
    offset : ndarray of shape (D,), float64

    Raises
    ------
    ValueError
        When ``factors`` do not have the layout :func:`add_offset` writes (the
        column of ones, the unit corners of the inner factors, nothing else in
        the added rows and columns).

    Examples
    --------
    >>> import numpy as np
    >>> W = SparseFactors([np.eye(2), np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 3.0]])])
    >>> inner, mu = split_offset(add_offset(W, [1.0, 1.0, 0.0]))
    >>> inner.allclose(W), mu.tolist()
    (True, [1.0, 1.0, 0.0])
    """
    if not isinstance(factors, SparseFactors):
        raise TypeError(f"The 'factors' parameter of split_offset must be a SparseFactors. "
                        f"Got {type(factors).__name__} instead.")
    mats = list(factors.factors)
    lam = factors.dtype.type(factors.lam)

    def bad(what):
        return ValueError(f"The 'factors' parameter of split_offset must be factors with a "
                          f"dense offset row (as add_offset writes them); {what}.")

    if len(mats) < 2:
        raise bad(f"got {len(mats)} factor")
    S1 = mats[0]
    if S1.shape[1] < 2 or not np.array_equal(S1[:, -1].toarray().ravel() * lam,
                                             np.ones(S1.shape[0])):
        raise bad("the last column of the first factor is not all ones")
    for q, S in enumerate(mats[1:-1], 2):
        corner = S[-1:, :].toarray().ravel(), S[:, -1:].toarray().ravel()
        unit = np.zeros(S.shape[1]), np.zeros(S.shape[0])
        unit[0][-1] = unit[1][-1] = 1.0
        if not (np.array_equal(corner[0], unit[0]) and np.array_equal(corner[1], unit[1])):
            raise bad(f"factor {q} does not end with a unit corner")
    inner = [(S1[:, :-1] * lam).tocsr()] + [S[:-1, :-1].tocsr() for S in mats[1:-1]]
    inner.append(mats[-1][:-1, :].tocsr())
    mu = np.asarray(mats[-1][-1, :].toarray(), dtype=np.float64).ravel()
    return SparseFactors(inner, lam=1.0), mu
