"""Sparsity projections used by palm4MSA: ``Sp``, ``Splin``, ``Spcol``, ``Splincol``.

Each projection is a small frozen object that knows the ``shape`` of the
matrices it applies to.  Calling it on a matrix ``M`` returns a new matrix
(``M`` is never modified) that keeps the entries of ``M`` on a support chosen
by magnitude and is zero elsewhere, rescaled to unit Frobenius norm:

    P(M) = M ⊙ 1_support / ‖M ⊙ 1_support‖_F      (P(M) = 0 if that norm is 0)

The supports, with ties broken deterministically by position:

* ``Sp(shape, k)`` — the ``k`` entries of largest ``|m_ij|`` overall; among
  equal magnitudes the lower row-major (flat) index ``i·n + j`` is kept first.
* ``Splin(shape, s)`` — in every row the ``s`` entries of largest magnitude;
  among equal magnitudes the lower column index is kept first.
* ``Spcol(shape, s)`` — in every column the ``s`` entries of largest magnitude;
  among equal magnitudes the lower row index is kept first.
* ``Supp(support)`` — a fixed boolean support (FAuST's ``supp``), for
  factorisations whose sparsity pattern is known.
* ``Splincol(shape, s)`` — the union of the ``Splin(s)`` and ``Spcol(s)``
  supports (each with its own tie rule above).  Every row and every column then
  holds at least ``s`` selected entries, and at most ``s·(m + n)`` entries are
  selected overall.

A selected entry may be zero (a row with fewer than ``s`` non-zeros); it stays zero.

``Sp``, ``Splin`` and ``Spcol`` are exact Euclidean projections onto
``{X : support constraint, ‖X‖_F = 1}`` (the best support for a fixed norm is
the one holding the largest magnitudes).  ``Splincol`` is not the projection
onto any fixed set — it is the relaxation used by Le Magoarou & Gribonval and
by the QuicK-means papers — so palm4MSA's descent guarantee does not cover it
(``is_exact`` is False); see :func:`dqkm.kernels.palm4msa` for the safeguard.

References
----------
Le Magoarou, L. and Gribonval, R. (2016). Flexible multilayer sparse
approximations of matrices and applications. IEEE J. Sel. Topics Signal
Process. 10(4), Sect. III (projections).
Giffon et al. (2021). QuicK-means, Sect. 4.1 ("sparsity level": at least that
many non-zeros per row and per column) and Appendix A (Algorithm 2, line 9).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral

import numpy as np
from numba import njit

from ..exceptions import DataError, InvalidParameterError

__all__ = ["Sp", "Splin", "Spcol", "Splincol", "Supp", "default_shapes", "default_constraints"]

# Above this many kept entries per row, a stable sort beats the insertion buffer.
_SORT_ABOVE = 24


@njit(cache=True, nogil=True)
def _rows_topk_mask(absM, s, mask):  # OUT mask
    """Set ``mask[i, j]`` for the ``s`` largest ``absM[i, :]`` (lower j wins ties)."""
    r, c = absM.shape
    if s >= c:
        for i in range(r):
            for j in range(c):
                mask[i, j] = True
        return
    if s > _SORT_ABOVE:
        # threshold = the s-th largest value (introselect, O(c)); keep what is
        # above it, then entries equal to it in column order until s are kept
        for i in range(r):
            row = absM[i]
            th = -np.partition(-row, s - 1)[s - 1]
            need = s
            for j in range(c):
                if row[j] > th:
                    mask[i, j] = True
                    need -= 1
            for j in range(c):
                if need == 0:
                    break
                if row[j] == th:
                    mask[i, j] = True
                    need -= 1
        return
    bufv = np.empty(s, dtype=absM.dtype)
    bufi = np.empty(s, dtype=np.int64)
    for i in range(r):
        n = 0
        for j in range(c):
            v = absM[i, j]
            if n == s:
                # an equal magnitude at a later column never displaces a kept one
                if v <= bufv[s - 1]:
                    continue
                p = s - 1
            else:
                p = n
                n += 1
            while p > 0 and bufv[p - 1] < v:
                bufv[p] = bufv[p - 1]
                bufi[p] = bufi[p - 1]
                p -= 1
            bufv[p] = v
            bufi[p] = j
        for t in range(s):
            mask[i, bufi[t]] = True


@njit(cache=True, nogil=True)
def _cols_topk_mask(absM, s, mask):  # OUT mask
    """Set ``mask[i, j]`` for the ``s`` largest ``absM[:, j]`` (lower i wins ties).

    Scans ``absM`` row by row (cache friendly) with one insertion buffer per column.
    """
    r, c = absM.shape
    if s >= r:
        for i in range(r):
            for j in range(c):
                mask[i, j] = True
        return
    bufv = np.empty((c, s), dtype=absM.dtype)
    bufi = np.empty((c, s), dtype=np.int64)
    cnt = np.zeros(c, dtype=np.int64)
    for i in range(r):
        for j in range(c):
            v = absM[i, j]
            n = cnt[j]
            if n == s:
                if v <= bufv[j, s - 1]:
                    continue
                p = s - 1
            else:
                p = n
                cnt[j] = n + 1
            while p > 0 and bufv[j, p - 1] < v:
                bufv[j, p] = bufv[j, p - 1]
                bufi[j, p] = bufi[j, p - 1]
                p -= 1
            bufv[j, p] = v
            bufi[j, p] = i
    for j in range(c):
        for t in range(s):
            mask[bufi[j, t], j] = True


def _abs64(M):
    return np.abs(np.asarray(M, dtype=np.float64))


def _rows_mask(absM, s):
    mask = np.zeros(absM.shape, dtype=np.bool_)
    _rows_topk_mask(np.ascontiguousarray(absM), s, mask)
    return mask


def _cols_mask(absM, s):
    if s > _SORT_ABOVE and s < absM.shape[0]:
        maskT = np.zeros(absM.shape[::-1], dtype=np.bool_)
        _rows_topk_mask(np.ascontiguousarray(absM.T), s, maskT)
        return maskT.T
    mask = np.zeros(absM.shape, dtype=np.bool_)
    _cols_topk_mask(np.ascontiguousarray(absM), s, mask)
    return mask


def _flat_mask(absM, k):
    flat = absM.ravel()
    mask = np.zeros(flat.size, dtype=np.bool_)
    if k >= flat.size:
        mask[:] = True
    else:
        mask[np.argsort(-flat, kind="stable")[:k]] = True  # stable: lower flat index first
    return mask.reshape(absM.shape)


def _check_count(value, name, owner, high, what):
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise InvalidParameterError(
            f"The '{name}' parameter of {owner} must be an int in the range [1, {high}] "
            f"({what}). Got {value!r} of type {type(value).__name__} instead."
        )
    if not 1 <= int(value) <= high:
        raise InvalidParameterError(
            f"The '{name}' parameter of {owner} must be an int in the range [1, {high}] "
            f"({what}). Got {value!r} instead."
        )
    return int(value)


def _check_shape(shape, owner):
    try:
        ok = len(shape) == 2 and all(
            isinstance(d, Integral) and not isinstance(d, bool) and d >= 1 for d in shape
        )
    except TypeError:
        ok = False
    if not ok:
        raise InvalidParameterError(
            f"The 'shape' parameter of {owner} must be a pair of positive ints "
            f"(n_rows, n_cols). Got {shape!r} instead."
        )
    return (int(shape[0]), int(shape[1]))


@dataclass(frozen=True)
class _Projection:
    """Common part: the shape, input checks, and ``__call__`` from ``_mask``."""

    shape: tuple

    is_exact = True

    def __post_init__(self):
        object.__setattr__(self, "shape", _check_shape(self.shape, type(self).__name__))

    def _check_input(self, M):
        M = np.asarray(M)
        if M.ndim != 2 or M.shape != self.shape:
            raise ValueError(
                f"{type(self).__name__} applies to matrices of shape {self.shape}; "
                f"got an array of shape {M.shape}."
            )
        if not (np.issubdtype(M.dtype, np.floating) or np.issubdtype(M.dtype, np.integer)):
            raise TypeError(
                f"{type(self).__name__} expects a real numeric matrix; got dtype {M.dtype}."
            )
        if not np.all(np.isfinite(M)):
            raise DataError(f"{type(self).__name__} got a matrix with NaN or infinite entries.")
        return M

    def support(self, M):
        """Boolean mask of the selected positions.

        Parameters
        ----------
        M : array-like of shape ``self.shape``

        Returns
        -------
        mask : ndarray of bool, shape ``self.shape``

        Examples
        --------
        >>> from dqkm.kernels import Sp
        >>> Sp((2, 2), 2).support([[3., -1.], [0.5, 4.]])  # the 2 largest |entries|
        array([[ True, False],
               [False,  True]])
        """
        return self._mask(_abs64(self._check_input(M)))

    def __call__(self, M):
        """Project ``M``: keep the support, zero the rest, scale to unit Frobenius norm.

        Parameters
        ----------
        M : array-like of shape ``self.shape``, real

        Returns
        -------
        P : ndarray of shape ``self.shape``
            A new array, float dtype of ``M`` (integers give float64); all zeros
            if the kept entries are all zero.
        """
        M = self._check_input(M)
        out_dtype = M.dtype if np.issubdtype(M.dtype, np.floating) else np.float64
        P = np.where(self._mask(_abs64(M)), M, 0).astype(np.float64)
        norm = np.linalg.norm(P)
        if norm > 0:
            P /= norm
        return P.astype(out_dtype, copy=False)

    def _project_dense(self, M):
        """Unchecked fast path (palm4MSA): float64 ``M`` of shape ``self.shape``."""
        P = np.where(self._mask(np.abs(M)), M, 0.0)
        norm = np.linalg.norm(P)
        if norm > 0:
            P /= norm
        return P

    def _contains(self, M):
        """Whether float64 ``M`` is in the constraint set (a fixed point of the projection)."""
        return np.max(np.abs(self._project_dense(M) - M), initial=0.0) <= 1e-12

    def _mask(self, absM):  # pragma: no cover - every subclass overrides it
        raise NotImplementedError


@dataclass(frozen=True)
class Sp(_Projection):
    """Keep the ``k`` largest-magnitude entries overall (ties: lower flat index).

    Parameters
    ----------
    shape : (int, int)
    k : int in ``[1, shape[0] * shape[1]]``

    Examples
    --------
    >>> Sp((2, 2), k=1)([[1.0, -3.0], [3.0, 0.0]])
    array([[ 0., -1.],
           [ 0.,  0.]])
    """

    k: int

    def __post_init__(self):
        super().__post_init__()
        high = self.shape[0] * self.shape[1]
        object.__setattr__(
            self, "k", _check_count(self.k, "k", "Sp", high, f"entries of a {self.shape} matrix")
        )

    def _mask(self, absM):
        return _flat_mask(absM, self.k)


@dataclass(frozen=True)
class Splin(_Projection):
    """Keep the ``s`` largest-magnitude entries of every row (ties: lower column).

    Parameters
    ----------
    shape : (int, int)
        Shape of the matrices projected.
    s : int in ``[1, shape[1]]``
        Entries kept per row.

    Examples
    --------
    >>> P = Splin((2, 3), s=1)
    >>> P.support([[3.0, 1.0, 0.0], [2.0, 2.0, 5.0]]).astype(int)
    array([[1, 0, 0],
           [0, 0, 1]])
    """

    s: int

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(
            self, "s", _check_count(self.s, "s", "Splin", self.shape[1], f"columns of shape {self.shape}")
        )

    def _mask(self, absM):
        return _rows_mask(absM, self.s)


@dataclass(frozen=True)
class Spcol(_Projection):
    """Keep the ``s`` largest-magnitude entries of every column (ties: lower row).

    Parameters
    ----------
    shape : (int, int)
        Shape of the matrices projected.
    s : int in ``[1, shape[0]]``
        Entries kept per column.

    Examples
    --------
    >>> P = Spcol((2, 3), s=1)
    >>> P.support([[3.0, 1.0, 0.0], [2.0, 2.0, 5.0]]).astype(int)
    array([[1, 0, 0],
           [0, 1, 1]])
    """

    s: int

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(
            self, "s", _check_count(self.s, "s", "Spcol", self.shape[0], f"rows of shape {self.shape}")
        )

    def _mask(self, absM):
        return _cols_mask(absM, self.s)


@dataclass(frozen=True)
class Splincol(_Projection):
    """Union of the ``s`` largest of every row and the ``s`` largest of every column.

    Row selection breaks ties by the lower column index, column selection by
    the lower row index; the kept matrix is normalised to unit Frobenius norm.
    Not an exact projection (``is_exact = False``).

    Parameters
    ----------
    shape : (int, int)
    s : int in ``[1, min(shape)]``

    Examples
    --------
    >>> P = Splincol((2, 3), s=1)
    >>> P.support([[3.0, 1.0, 0.0], [2.0, 2.0, 5.0]]).astype(int)
    array([[1, 0, 0],
           [0, 1, 1]])
    """

    s: int
    is_exact = False

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(
            self,
            "s",
            _check_count(self.s, "s", "Splincol", min(self.shape), f"the smaller dimension of shape {self.shape}"),
        )

    def _contains(self, M):
        """Relaxed membership (the rule is not a projection onto a fixed set):
        unit Frobenius norm (or zero) and at most ``s·(rows + cols)`` non-zeros,
        the most a Splincol support can hold."""
        norm = np.linalg.norm(M)
        ok_norm = norm == 0.0 or abs(norm - 1.0) <= 1e-9
        return ok_norm and np.count_nonzero(M) <= self.s * (self.shape[0] + self.shape[1])

    def _mask(self, absM):
        if self.s >= min(absM.shape):  # every row or every column is kept whole
            return np.ones(absM.shape, dtype=np.bool_)
        return _rows_mask(absM, self.s) | _cols_mask(absM, self.s)


@dataclass(frozen=True, eq=False, init=False)
class Supp(_Projection):
    """Keep the entries on a fixed support (an exact projection).

    Parameters
    ----------
    support : array-like of bool, 2-D, non-empty
        The positions that may be non-zero; copied and made read-only.
        ``shape`` is ``support.shape``.

    Examples
    --------
    >>> P = Supp([[True, False], [False, True]])
    >>> P([[3.0, 1.0], [2.0, 4.0]])
    array([[0.6, 0. ],
           [0. , 0.8]])
    """

    support_mask: np.ndarray

    def __init__(self, support):
        mask = np.asarray(support)
        if mask.ndim != 2 or mask.size == 0 or mask.dtype != np.bool_:
            raise ValueError(
                "The 'support' parameter of Supp must be a non-empty 2-D boolean array. "
                f"Got an array of shape {mask.shape} and dtype {mask.dtype} instead."
            )
        mask = mask.copy()
        mask.flags.writeable = False
        object.__setattr__(self, "shape", _check_shape(mask.shape, "Supp"))
        object.__setattr__(self, "support_mask", mask)

    def _mask(self, absM):
        return self.support_mask


# --------------------------------------------------------------------------- layout


def _check_bool(value, name, owner):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"The {name!r} parameter of {owner} must be a bool. Got {value!r} instead.")
    return bool(value)


def _check_int(value, name, owner, low, high=None):
    rng = f"[{low}, inf)" if high is None else f"[{low}, {high}]"
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(
            f"The '{name}' parameter of {owner} must be an int in the range {rng}. "
            f"Got {value!r} of type {type(value).__name__} instead."
        )
    if value < low or (high is not None and value > high):
        raise ValueError(
            f"The '{name}' parameter of {owner} must be an int in the range {rng}. "
            f"Got {value!r} instead."
        )
    return int(value)


def default_shapes(K, D, n_factors=None):
    """Factor shapes of the QuicK-means layout for a K×D matrix.

    With ``A = min(K, D)``, ``B = max(K, D)`` and ``Q = n_factors`` (default
    ``max(1, ⌈log2 B⌉)``): ``S1`` is K×A, the ``Q − 2`` inner factors A×A and
    ``SQ`` A×D; for ``Q = 1`` the single factor is K×D.

    Parameters
    ----------
    K, D : int >= 1
        Shape of the matrix to factorise (K centroids of D features).
    n_factors : int >= 1 or None
        Number of factors ``Q``; None: ``max(1, ⌈log2 B⌉)``.

    Returns
    -------
    shapes : list of Q (rows, cols) tuples
        From ``S1`` (left) to ``SQ`` (right).

    Examples
    --------
    >>> default_shapes(16, 64, n_factors=3)
    [(16, 16), (16, 16), (16, 64)]

    References
    ----------
    Giffon et al. (2021), QuicK-means, Sect. 4.1 ("Algorithm settings").
    """
    K = _check_int(K, "K", "default_shapes", 1)
    D = _check_int(D, "D", "default_shapes", 1)
    a, b = min(K, D), max(K, D)
    if n_factors is None:
        n_factors = max(1, math.ceil(math.log2(b)))
    q = _check_int(n_factors, "n_factors", "default_shapes", 1)
    if q == 1:
        return [(K, D)]
    return [(K, a)] + [(a, a)] * (q - 2) + [(a, D)]


def default_constraints(K, D, sparsity=5, n_factors=None):
    """``Splincol(sparsity)`` on every factor of :func:`default_shapes`.

    ``sparsity`` is capped at each factor's smaller dimension.

    Parameters
    ----------
    K, D : int >= 1
        Shape of the matrix to factorise.
    sparsity : int >= 1, default=5
        Non-zeros kept per row and per column of every factor.
    n_factors : int >= 1 or None
        As in :func:`default_shapes`.

    Returns
    -------
    constraints : list of Splincol
        One per factor, from ``S1`` to ``SQ``.

    Examples
    --------
    >>> default_constraints(16, 64, sparsity=3, n_factors=3)
    [Splincol(shape=(16, 16), s=3), Splincol(shape=(16, 16), s=3), Splincol(shape=(16, 64), s=3)]
    """
    s = _check_int(sparsity, "sparsity", "default_constraints", 1)
    return [Splincol(shape, min(s, min(shape))) for shape in default_shapes(K, D, n_factors)]


def _as_constraints(spec, K, D, owner):
    if spec is None:
        return default_constraints(K, D)
    if isinstance(spec, (str, bytes)) or not hasattr(spec, "__len__") or len(spec) == 0:
        raise TypeError(
            f"The 'shapes_or_constraints' parameter of {owner} must be None or a non-empty "
            f"list of (rows, cols) tuples or projection objects. Got {spec!r} instead."
        )
    out = []
    for q, item in enumerate(spec):
        if isinstance(item, _Projection):
            out.append(item)
        else:
            try:
                shape = tuple(int(x) for x in item)
                ok = len(shape) == 2 and min(shape) >= 1 and tuple(item) == shape
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise TypeError(
                    f"Item {q} of 'shapes_or_constraints' ({owner}) must be a (rows, cols) pair "
                    f"of positive ints or a projection object (Splincol, Sp, ...). "
                    f"Got {item!r} instead."
                )
            out.append(Splincol(shape, min(5, min(shape))))
    _check_chain([c.shape for c in out], K, D, owner)
    return out


def _check_chain(shapes, K, D, owner):
    if shapes[0][0] != K:
        raise ValueError(
            f"The factors of {owner} must chain from K={K} rows to D={D} columns; "
            f"factor 0 has shape {shapes[0]} (its rows must be {K})."
        )
    for q in range(1, len(shapes)):
        if shapes[q][0] != shapes[q - 1][1]:
            raise ValueError(
                f"The factors of {owner} do not chain: factor {q - 1} has shape "
                f"{shapes[q - 1]} but factor {q} has shape {shapes[q]} "
                f"(its rows must be {shapes[q - 1][1]})."
            )
    if shapes[-1][1] != D:
        raise ValueError(
            f"The factors of {owner} must chain from K={K} rows to D={D} columns; "
            f"the last factor has shape {shapes[-1]} (its columns must be {D})."
        )
