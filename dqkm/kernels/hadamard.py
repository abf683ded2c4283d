"""The fast Walsh–Hadamard transform and the Fast-Nyström landmark operator.

``H_N`` is the unnormalised Sylvester–Hadamard matrix of order ``N = 2^m``
(entries ±1, ``H_1 = [1]``, ``H_2N = [[H_N, H_N], [H_N, −H_N]]``; the matrix of
``scipy.linalg.hadamard``).  It is symmetric, so ``x·Hᵀ = x·H``, and the
butterfly below computes it in ``N log2 N`` additions instead of ``N²``
multiply-adds: at level ``h = 1, 2, 4, …, N/2`` every pair ``(a, b) =
(y[j], y[j + h])`` in a block of ``2h`` becomes ``(a + b, a − b)``.

A vector of length ``D`` that is not a power of two is padded with zeros to
``N = 2^⌈log2 D⌉`` first.

:class:`HadamardLandmarks` is the structured landmark matrix of Si et al.
(2016), eq. (14) of the QuicK-means journal paper:
``U = [D_{v1}Hᵀ, …, D_{vS}Hᵀ]ᵀ``, i.e. block ``s`` is ``H·D_{v_s}`` and its
row ``j`` is the landmark ``u_{s,j} = h_j ⊙ v_s`` (``h_j`` the ``j``-th
Walsh sign pattern).  ``U·x`` costs one transform of ``v_s ⊙ x`` per seed:
``O(S·N log N)`` instead of ``O(K·D)``.

All kernels are pure: inputs are never mutated; outputs written in place are
marked ``# OUT``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

__all__ = ["next_pow2", "fwht", "fwht_reference", "HadamardLandmarks"]


def next_pow2(n: int) -> int:
    """Smallest power of two ``>= n`` (``n >= 1``)."""
    n = int(n)
    if n < 1:
        raise ValueError(f"next_pow2 needs n >= 1; got {n}.")
    return 1 << (n - 1).bit_length()


@njit(cache=True, nogil=True)
def _butterfly(y):  # OUT y
    n = y.shape[0]
    h = 1
    while h < n:
        for i in range(0, n, 2 * h):
            for j in range(i, i + h):
                a = y[j]
                b = y[j + h]
                y[j] = a + b
                y[j + h] = a - b
        h *= 2


@njit(cache=True, nogil=True)
def _fwht_rows(X, out):  # OUT out
    n, d = X.shape
    for i in range(n):
        row = out[i]
        for f in range(d):
            row[f] = X[i, f]
        for f in range(d, row.shape[0]):
            row[f] = 0.0
        _butterfly(row)


def _as_float_2d(X, name="X"):
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (n_rows, n_features); got shape "
                         f"{X.shape}.")
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    return np.ascontiguousarray(X)


def fwht(X):
    """Fast Walsh–Hadamard transform of every row: ``X_pad · H_N``.

    Parameters
    ----------
    X : ndarray of shape (n_rows, D), float32 or float64 (other types → float64)

    Returns
    -------
    ndarray of shape (n_rows, N), N = next_pow2(D), X's dtype
        Row ``i`` is ``H_N·x_i`` with ``x_i`` padded with ``N − D`` zeros;
        equal to ``X_pad @ scipy.linalg.hadamard(N)``.  Unnormalised: the
        transform of a row scales its norm by ``√N``.

    References
    ----------
    Fino & Algazi (1976), Unified matrix treatment of the fast Walsh–Hadamard
    transform.
    """
    X = _as_float_2d(X)
    out = np.empty((X.shape[0], next_pow2(max(1, X.shape[1]))), dtype=X.dtype)
    if X.shape[0]:
        _fwht_rows(X, out)
    return out


def fwht_reference(X):
    """Plain NumPy version of :func:`fwht` (one vectorised butterfly level at a time)."""
    X = _as_float_2d(X)
    n, d = X.shape
    N = next_pow2(max(1, d))
    y = np.zeros((n, N), dtype=X.dtype)
    y[:, :d] = X
    h = 1
    while h < N:
        y = y.reshape(n, N // (2 * h), 2, h)
        a, b = y[:, :, 0, :], y[:, :, 1, :]
        y = np.stack([a + b, a - b], axis=2).reshape(n, N)
        h *= 2
    return y


@njit(cache=True, nogil=True)
def _hadamard_products_loop(X, seeds, starts, cols, out):  # OUT out
    n, d = X.shape
    S = seeds.shape[0]
    N = 1
    while N < d:
        N *= 2
    buf = np.empty(N, dtype=X.dtype)
    for i in range(n):
        for s in range(S):
            if starts[s + 1] == starts[s]:
                continue
            for f in range(d):
                buf[f] = X[i, f] * seeds[s, f]
            for f in range(d, N):
                buf[f] = 0.0
            _butterfly(buf)
            for k in range(starts[s], starts[s + 1]):
                out[i, k] = buf[cols[k]]


@dataclass(frozen=True)
class HadamardLandmarks:
    """Fast-Nyström landmarks ``u_k = h_{j_k} ⊙ v_{s_k}`` (Si et al., 2016).

    Parameters
    ----------
    seeds : ndarray of shape (S, D)
        The diagonals ``v_1 … v_S`` (e.g. uniformly sampled rows of X, or
        K-means centroids).
    blocks : ndarray of shape (K,), int
        Seed index ``s_k`` of each landmark, non-decreasing.
    rows : ndarray of shape (K,), int
        Walsh pattern (row of ``H_N``) ``j_k`` of each landmark,
        ``0 <= j_k < N``, ``N = next_pow2(D)``.

    Landmark ``k`` is row ``j_k`` of the block ``H_N·D_{v_{s_k}}`` restricted
    to the first D coordinates (the padded coordinates of ``v`` are zero, so
    the landmark lives in R^D), hence ``‖u_k‖² = ‖v_{s_k}‖²``.

    References
    ----------
    Si, Hsieh, Dhillon (2016), Computationally efficient Nyström approximation
    using fast transforms, ICML; Giffon et al., QuicK-means, Machine Learning
    (2021), eq. (14).
    """

    seeds: np.ndarray
    blocks: np.ndarray
    rows: np.ndarray

    def __post_init__(self):
        seeds = _as_float_2d(self.seeds, "seeds")
        blocks = np.asarray(self.blocks, dtype=np.int64).ravel()
        rows = np.asarray(self.rows, dtype=np.int64).ravel()
        N = next_pow2(max(1, seeds.shape[1]))
        if blocks.shape != rows.shape:
            raise ValueError(f"blocks and rows must have the same length; got {blocks.shape} "
                             f"and {rows.shape}.")
        if blocks.size and (blocks.min() < 0 or blocks.max() >= seeds.shape[0]
                            or np.any(np.diff(blocks) < 0)):
            raise ValueError(f"blocks must be non-decreasing seed indices in [0, "
                             f"{seeds.shape[0]}); got {blocks}.")
        if rows.size and (rows.min() < 0 or rows.max() >= N):
            raise ValueError(f"rows must be Walsh pattern indices in [0, {N}); got {rows}.")
        object.__setattr__(self, "seeds", seeds)
        object.__setattr__(self, "blocks", blocks)
        object.__setattr__(self, "rows", rows)

    @property
    def shape(self):
        """``(K, D)``."""
        return (int(self.rows.size), int(self.seeds.shape[1]))

    @property
    def dtype(self):
        return self.seeds.dtype

    @property
    def n_padded(self) -> int:
        """``N``: D padded to a power of two."""
        return next_pow2(max(1, self.seeds.shape[1]))

    def astype(self, dtype):
        return HadamardLandmarks(self.seeds.astype(dtype), self.blocks, self.rows)

    def _starts(self):
        S = self.seeds.shape[0]
        return np.searchsorted(self.blocks, np.arange(S + 1), side="left").astype(np.int64)

    def apply_rows(self, X):
        """``X·Uᵀ``, shape (n_rows, K), in X's dtype: one transform per row and seed."""
        X = _as_float_2d(X)
        if X.shape[1] != self.seeds.shape[1]:
            raise ValueError(f"X has {X.shape[1]} features, but the landmarks have "
                             f"{self.seeds.shape[1]}.")
        seeds = np.ascontiguousarray(self.seeds, dtype=X.dtype)
        out = np.empty((X.shape[0], self.rows.size), dtype=X.dtype)
        if X.shape[0] and self.rows.size:
            _hadamard_products_loop(X, seeds, self._starts(), self.rows, out)
        return out

    def row_norms_sq(self):
        """``‖u_k‖² = ‖v_{s_k}‖²``, shape (K,), float64."""
        s = np.einsum("ij,ij->i", self.seeds, self.seeds, dtype=np.float64)
        return s[self.blocks]

    def toarray(self):
        """The dense landmark matrix U, shape (K, D) (for tests and small cases)."""
        # H_N[j, f] = (−1)^popcount(j AND f)
        parity = np.bitwise_count(np.bitwise_and.outer(self.rows, np.arange(self.seeds.shape[1])))
        signs = 1.0 - 2.0 * (parity & 1)
        return (signs * self.seeds[self.blocks]).astype(self.seeds.dtype)

    @property
    def nnz(self) -> int:
        """Stored parameters: the non-zeros of the seeds."""
        return int(np.count_nonzero(self.seeds))

    @property
    def flops(self) -> int:
        """Flops of ``U·x``: per used seed D products and N·log2 N additions."""
        N = self.n_padded
        used = np.unique(self.blocks).size
        return int(used * (self.seeds.shape[1] + N * int(np.log2(N))))
