"""The sparse-factor linear operator ``V = λ · S1 · S2 ··· SQ`` and its fast apply.

QK-means constrains its ``K × D`` centroid matrix to such a product so that
assigning a point costs ``Σ_q 2·nnz(S_q)`` flops instead of ``2·K·D``.
:class:`SparseFactors` is the immutable container of the factors shared by
palm4MSA (which builds it) and QK-means (which applies it to chunks of rows).

References
----------
Giffon, Emiya, Ralaivola, Kadri. *QuicK-means: accelerating inference for
K-means by learning fast transforms*, Machine Learning 2021 — Section 3
(the factor shapes, eq. (6)) and Section 3.4 (assignment cost
``O(A log B + B)``).
"""

from __future__ import annotations

import numbers
import threading

import numpy as np
import scipy.sparse as sp

from . import _sparse_factors_io as _io
from ._factor_apply import (apply_rows_parallel, apply_rows_serial, argmin_rows_parallel,
                            argmin_rows_serial, choose_tile)

__all__ = ["SparseFactors"]

_METHODS = ("auto", "numba", "scipy")
# apply_rows with more than one thread: a numba parallel region per call.
# Calls from several Python threads are serialised (each already uses all the
# threads it was given, and not every numba threading layer is re-entrant).
_PARALLEL_LOCK = threading.Lock()


def _freeze(a):
    a.flags.writeable = False
    return a


def _as_csr(S, i, dtype):
    """A canonical, read-only CSR copy of factor ``i`` (1-based in messages)."""
    if sp.issparse(S):
        M = sp.csr_matrix(S, dtype=dtype, copy=True)
    elif isinstance(S, np.ndarray):
        if S.ndim != 2:
            raise ValueError(f"The 'factors' parameter of SparseFactors must hold 2-D arrays. "
                             f"Got factor {i} with shape {S.shape} instead.")
        M = sp.csr_matrix(S.astype(dtype, copy=False))
    else:
        raise TypeError(f"The 'factors' parameter of SparseFactors must hold scipy.sparse "
                        f"matrices/arrays or 2-D numpy arrays. Got factor {i} of type "
                        f"{type(S).__name__} instead.")
    M.sum_duplicates()  # also sorts the indices
    M.eliminate_zeros()
    if not np.all(np.isfinite(M.data)):
        raise ValueError(f"The 'factors' parameter of SparseFactors must hold finite values. "
                         f"Got NaN or inf in factor {i}.")
    M.sort_indices()
    for a in (M.data, M.indices, M.indptr):
        _freeze(a)
    return M


def _result_dtype(factors):
    dt = np.result_type(*[S.dtype for S in factors])
    if dt.kind in "biu":
        return np.dtype(np.float64)
    if dt not in (np.float32, np.float64):
        raise TypeError(f"The 'factors' parameter of SparseFactors must hold real float32, "
                        f"float64, integer or boolean values. Got dtype {dt} instead.")
    return dt


class SparseFactors:
    """Immutable linear operator ``V = lam · S1 @ S2 @ … @ SQ`` of shape ``(K, D)``.

    Parameters
    ----------
    factors : sequence of scipy.sparse matrices/arrays or 2-D ndarrays
        ``S1, ..., SQ`` from left to right; ``S_q`` has shape
        ``(n_{q-1}, n_q)`` with ``n_0 = K`` and ``n_Q = D``.  They are copied
        (never mutated) into canonical ``scipy.sparse.csr_matrix`` objects:
        duplicates summed, explicit zeros removed, indices sorted, the
        ``data``/``indices``/``indptr`` arrays read-only.
    lam : float, default=1.0
        Scalar factor ``λ``, kept separately (see :meth:`fold_lam`).

    Attributes
    ----------
    shape : tuple of int
        ``(K, D)``.
    factors : tuple of scipy.sparse.csr_matrix
        The read-only factors, left to right.
    lam : float
    dtype : numpy.dtype
        float32 when every factor is float32, float64 otherwise (integer
        and boolean factors become float64).
    n_factors : int
    nnz : int
        Stored non-zeros over all factors (explicit zeros are not stored).
    flops : int
        Flops to apply ``V`` to one vector, counted as ``Σ_q 2·nnz(S_q)``
        (one multiply and one add per stored value; the multiplication by
        ``λ`` and the first add of each row are not deducted).  The dense
        product costs ``2·K·D`` under the same convention.
    compression : float
        ``K·D / nnz``.

    Notes
    -----
    ``apply_rows`` (``X @ V.T``), the operation QK-means's assignment needs,
    runs a numba kernel (``dqkm.kernels._factor_apply``) that keeps a tile of
    rows in cache through the whole chain; ``method="scipy"`` is the plain
    reference (a chain of CSR products).

    References
    ----------
    Giffon et al., *QuicK-means*, Machine Learning 2021, Section 3, eq. (6).

    Examples
    --------
    >>> import numpy as np
    >>> V = SparseFactors([np.eye(2), np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]])], lam=2.0)
    >>> V.shape, V.nnz, V.flops
    ((2, 3), 5, 10)
    >>> V.apply_rows(np.ones((1, 3)))
    array([[6., 6.]])
    """

    __slots__ = ("_factors", "_lam", "_dtype", "_shape", "_layout", "_T", "__weakref__")
    __array_ufunc__ = None  # ndarray @ SparseFactors defers to __rmatmul__

    def __init__(self, factors, lam=1.0):
        if isinstance(factors, (np.ndarray, str, bytes)) or sp.issparse(factors) \
                or not hasattr(factors, "__len__"):
            raise TypeError(f"The 'factors' parameter of SparseFactors must be a sequence "
                            f"(list or tuple) of matrices. Got {type(factors).__name__} instead.")
        factors = list(factors)
        if len(factors) == 0:
            raise ValueError("The 'factors' parameter of SparseFactors must hold at least one "
                             "factor. Got an empty sequence instead.")
        for i, S in enumerate(factors, 1):
            if not (sp.issparse(S) or isinstance(S, np.ndarray)):
                raise TypeError(f"The 'factors' parameter of SparseFactors must hold "
                                f"scipy.sparse matrices/arrays or 2-D numpy arrays. Got factor "
                                f"{i} of type {type(S).__name__} instead.")
            if S.ndim != 2:
                raise ValueError(f"The 'factors' parameter of SparseFactors must hold 2-D "
                                 f"arrays. Got factor {i} with shape {S.shape} instead.")
        for i in range(1, len(factors)):
            a, b = factors[i - 1].shape, factors[i].shape
            if a[1] != b[0]:
                raise ValueError(f"The factors of SparseFactors do not chain: factor {i} has "
                                 f"shape {tuple(a)} but factor {i + 1} has shape {tuple(b)}: "
                                 f"S{i} @ S{i + 1} is undefined.")
        if isinstance(lam, (bool, np.bool_)) or not isinstance(lam, numbers.Real) \
                or not np.isfinite(lam):
            raise ValueError(f"The 'lam' parameter of SparseFactors must be a finite real "
                             f"number. Got {lam!r} instead.")
        dtype = _result_dtype(factors)
        self._factors = tuple(_as_csr(S, i, dtype) for i, S in enumerate(factors, 1))
        self._lam = float(lam)
        self._dtype = dtype
        self._shape = (int(self._factors[0].shape[0]), int(self._factors[-1].shape[1]))
        self._layout = {}
        self._T = None

    # ------------------------------------------------------------ properties
    @property
    def factors(self):
        return self._factors

    @property
    def lam(self):
        return self._lam

    @property
    def dtype(self):
        return self._dtype

    @property
    def shape(self):
        return self._shape

    @property
    def n_factors(self):
        return len(self._factors)

    @property
    def nnz(self):
        return int(sum(S.nnz for S in self._factors))

    @property
    def flops(self):
        return 2 * self.nnz

    @property
    def compression(self):
        nnz = self.nnz
        return float(self._shape[0] * self._shape[1]) / nnz if nnz else float("inf")

    @property
    def T(self):
        """The transposed operator ``Vᵀ = lam · SQᵀ ··· S1ᵀ`` (cached)."""
        if self._T is None:
            t = SparseFactors([S.T.tocsr() for S in reversed(self._factors)], lam=self._lam)
            t._T = self
            self._T = t
        return self._T

    def __repr__(self):
        return (f"SparseFactors(shape={self._shape}, n_factors={self.n_factors}, "
                f"nnz={self.nnz}, dtype={self._dtype.name}, lam={self._lam!r})")

    def __reduce__(self):
        # rebuilt through __init__ (validated, read-only again); caches are not sent
        return (SparseFactors, (self._factors, self._lam))

    # ------------------------------------------------------------ conversions
    def toarray(self):
        """Dense ``lam · S1 ··· SQ``, ndarray of shape ``(K, D)`` and dtype ``self.dtype``.

        Returns
        -------
        ndarray of shape (K, D)
            The product of the factors times ``lam``.

        Examples
        --------
        >>> V = SparseFactors([np.eye(2), np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]])], lam=2.0)
        >>> V.toarray()
        array([[2., 4., 0.],
               [0., 0., 6.]])
        """
        R = self._factors[-1].toarray()
        for S in reversed(self._factors[:-1]):
            R = S @ R
        R = np.asarray(R, dtype=self._dtype)
        R *= self._dtype.type(self._lam)
        return R

    def astype(self, dtype):
        """The same operator with factors of ``dtype`` (float32 or float64).

        Parameters
        ----------
        dtype : numpy dtype or str
            ``float32`` or ``float64``; another dtype raises ``ValueError``.

        Returns
        -------
        SparseFactors
            ``self`` when the dtype is already ``dtype``, else a new operator.

        Examples
        --------
        >>> V = SparseFactors([np.eye(2), np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]])], lam=2.0)
        >>> V.astype("float32").dtype
        dtype('float32')
        """
        dt = np.dtype(dtype)
        if dt not in (np.float32, np.float64):
            raise ValueError(f"The 'dtype' parameter of SparseFactors.astype must be float32 or "
                             f"float64. Got {dt} instead.")
        if dt == self._dtype:
            return self
        return SparseFactors([S.astype(dt) for S in self._factors], lam=self._lam)

    def fold_lam(self):
        """A new operator with ``lam`` multiplied into ``S1`` and ``lam = 1``.

        Returns
        -------
        SparseFactors
            The same linear operator, with ``lam == 1.0``.

        Examples
        --------
        >>> V = SparseFactors([np.eye(2), np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]])], lam=2.0)
        >>> W = V.fold_lam()
        >>> W.lam, W.allclose(V)
        (1.0, True)
        """
        S1 = self._factors[0].astype(self._dtype, copy=True)
        S1.data *= self._dtype.type(self._lam)
        return SparseFactors((S1,) + self._factors[1:], lam=1.0)

    def allclose(self, other, rtol=1e-5, atol=1e-8):
        """Whether ``other`` is the same operator up to tolerance (compares dense products).

        Parameters
        ----------
        other : SparseFactors
            The operator to compare with (another type raises ``TypeError``).
        rtol, atol : float, default=1e-5, 1e-8
            Tolerances of :func:`numpy.allclose` on the dense products.

        Returns
        -------
        bool
            Whether the shapes are equal and the dense products agree.

        Examples
        --------
        >>> V = SparseFactors([np.eye(2), np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]])], lam=2.0)
        >>> V.allclose(SparseFactors([V.toarray()]))
        True
        """
        if not isinstance(other, SparseFactors):
            raise TypeError(f"The 'other' parameter of SparseFactors.allclose must be a "
                            f"SparseFactors. Got {type(other).__name__} instead.")
        if other.shape != self.shape:
            return False
        return bool(np.allclose(self.toarray(), other.toarray(), rtol=rtol, atol=atol))

    # ------------------------------------------------------------ products
    def _check_operand(self, x, side):
        if sp.issparse(x):
            x = x.toarray()
        x = np.asarray(x)
        if x.dtype.kind not in "biuf":
            raise TypeError(f"SparseFactors {side} needs a real array. Got dtype {x.dtype} "
                            f"instead.")
        if x.ndim not in (1, 2):
            raise ValueError(f"SparseFactors {side} needs a 1-D or 2-D array. Got shape "
                             f"{x.shape} instead.")
        return x

    def __matmul__(self, x):
        """``V @ x`` for ``x`` of shape ``(D,)`` or ``(D, m)``; a SparseFactors chains."""
        if isinstance(x, SparseFactors):
            return SparseFactors(self._factors + x._factors, lam=self._lam * x._lam)
        x = self._check_operand(x, "V @ x")
        if x.shape[0] != self._shape[1]:
            raise ValueError(f"V @ x: V has shape {self._shape} but x has shape {x.shape}; "
                             f"x must have {self._shape[1]} rows.")
        if x.ndim == 2:
            return self.apply_rows(np.ascontiguousarray(x.T)).T
        return self.apply_rows(x[None, :])[0]

    def __rmatmul__(self, y):
        """``y @ V`` for ``y`` of shape ``(K,)`` or ``(m, K)``."""
        y = self._check_operand(y, "y @ V")
        if y.shape[-1] != self._shape[0]:
            raise ValueError(f"y @ V: V has shape {self._shape} but y has shape {y.shape}; "
                             f"y must have {self._shape[0]} columns.")
        if y.ndim == 2:
            return self.T.apply_rows(y)
        return self.T.apply_rows(y[None, :])[0]

    def _kernel_layout(self, dtype):
        """Flattened CSR arrays (λ folded into S1) for the numba kernel, cached per dtype."""
        lay = self._layout.get(dtype)
        if lay is None:
            shapes = np.array([S.shape for S in self._factors], dtype=np.int64)
            # column indices in int32 (less to stream) unless a dimension needs more
            idx_type = np.int32 if shapes.max() < 2**31 else np.int64
            poffs = np.zeros(self.n_factors, dtype=np.int64)
            ioffs = np.zeros(self.n_factors, dtype=np.int64)
            ptrs, idxs, vals = [], [], []
            p = i = 0
            for q, S in enumerate(self._factors):
                poffs[q], ioffs[q] = p, i
                ptrs.append(S.indptr.astype(np.int64))
                idxs.append(S.indices.astype(idx_type))
                v = S.data.astype(dtype)
                if q == 0:
                    v = v * dtype.type(self._lam)
                vals.append(v)
                p += S.shape[0] + 1
                i += S.nnz
            lay = (shapes, np.concatenate(ptrs), np.concatenate(idxs),
                   np.ascontiguousarray(np.concatenate(vals), dtype=dtype), poffs, ioffs)
            for a in lay:
                _freeze(a)
            self._layout[dtype] = lay
        return lay

    def apply_rows(self, X, *, method="auto", n_threads=None):
        """``X @ V.T``: the products of every row of ``X`` with every row of ``V``.

        Parameters
        ----------
        X : array-like of shape (n_samples, D)
            float32 or float64 (other real dtypes are converted to float64).
            Not modified.
        method : {"auto", "numba", "scipy"}, default="auto"
            ``"numba"``: the tiled kernel; ``"scipy"``: the readable
            reference, a chain of CSR products
            ``lam · (S1 @ (S2 @ ··· (SQ @ Xᵀ)))ᵀ``; ``"auto"``: ``"numba"``.
        n_threads : int or None, default=None
            Threads of the numba kernel.  ``None``: all numba threads
            (``numba.get_num_threads()``) when called from the main thread,
            one otherwise — a Dask worker thread already runs one task per
            core.  The kernel releases the GIL in every case.

        Returns
        -------
        ndarray of shape (n_samples, K), dtype of ``X``
            ``(X @ V.T)[i, k]`` is the product of row ``i`` of ``X`` with
            row ``k`` of ``V``.

        Notes
        -----
        The numba kernel adds the terms of every product left to right in
        CSR order, so a row's result is bit-identical whatever the number of
        threads and whatever other rows are in the same call; it may differ
        from ``method="scipy"`` by rounding.  Cost: ``n_samples · flops``.

        Examples
        --------
        >>> V = SparseFactors([np.eye(2), np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]])], lam=2.0)
        >>> V.apply_rows(np.array([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0]]))
        array([[6., 6.],
               [4., 0.]])
        """
        if method not in _METHODS:
            raise ValueError(f"The 'method' parameter of SparseFactors.apply_rows must be one "
                             f"of {_METHODS}. Got {method!r} instead.")
        if sp.issparse(X):
            X = X.toarray()
        X, dtype, n_threads = self._check_rows(X, n_threads, "apply_rows")
        if method == "scipy":
            return self._apply_rows_scipy(X.astype(dtype, copy=False), dtype)
        return self._apply_rows_numba(np.ascontiguousarray(X, dtype=dtype), dtype, n_threads)

    def _check_rows(self, X, n_threads, caller):
        """Validated ``(X, dtype, n_threads)`` for a method taking rows of length D:
        the computing dtype (float32 stays, the rest is float64) and ``n_threads``
        with None as 0 (the kernels' "choose for me")."""
        X = np.asarray(X)
        if X.dtype.kind not in "biuf":
            raise TypeError(f"The 'X' parameter of SparseFactors.{caller} must hold real "
                            f"numbers. Got dtype {X.dtype} instead.")
        if X.ndim != 2 or X.shape[1] != self._shape[1]:
            raise ValueError(f"The 'X' parameter of SparseFactors.{caller} must be 2-D with "
                             f"{self._shape[1]} columns (V has shape {self._shape}). Got "
                             f"shape {X.shape} instead.")
        if n_threads is not None and (isinstance(n_threads, (bool, np.bool_))
                                      or not isinstance(n_threads, numbers.Integral)
                                      or n_threads < 1):
            raise ValueError(f"The 'n_threads' parameter of SparseFactors.{caller} must be "
                             f"None or an int >= 1. Got {n_threads!r} instead.")
        dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.dtype(np.float64)
        return X, dtype, 0 if n_threads is None else int(n_threads)

    def _apply_rows_scipy(self, X, dtype):
        R = X.T
        for S in reversed(self._factors):
            R = S.astype(dtype, copy=False) @ R
        out = np.ascontiguousarray(np.asarray(R).T, dtype=dtype)
        out *= dtype.type(self._lam)
        return out

    def _apply_rows_numba(self, X, dtype, n_threads):
        out = np.empty((X.shape[0], self._shape[0]), dtype=dtype)
        self._run_tiles(X, dtype, n_threads, apply_rows_serial, apply_rows_parallel, out)
        return out

    def _run_tiles(self, X, dtype, n_threads, serial, parallel, *outs):
        """Run a tiled kernel (``serial(X, *outs, tile, ld, layout…)`` or its
        ``parallel`` twin with ``n_workers``) on the rows of X."""
        import numba

        n = X.shape[0]
        if n == 0:
            return
        shapes, indptr, indices, data, poffs, ioffs = self._kernel_layout(dtype)
        tile, ld = choose_tile(max(X.shape[1], int(shapes.max())), dtype.itemsize, n)
        if n_threads == 0:
            main = threading.current_thread() is threading.main_thread()
            n_threads = numba.get_num_threads() if main else 1
        n_tiles = (n + tile - 1) // tile
        n_workers = min(n_threads, numba.config.NUMBA_NUM_THREADS, n_tiles)
        layout = (shapes, indptr, indices, data, poffs, ioffs)
        if n_workers <= 1:
            serial(X, *outs, tile, ld, *layout)
        else:
            with _PARALLEL_LOCK:
                before = numba.get_num_threads()  # a per-thread setting: restored below
                numba.set_num_threads(n_workers)
                try:
                    parallel(X, *outs, tile, ld, n_workers, *layout)
                finally:
                    numba.set_num_threads(before)

    def nearest_rows(self, X, row_norms_sq=None, *, n_threads=None):
        """Index of the row of ``V`` nearest to every row of ``X`` (squared Euclidean).

        ``argmin_k ‖v_k‖² − 2·(X·Vᵀ)[i, k]``, the lower index winning ties:
        the same labels as ``argmin`` over :meth:`apply_rows`'s products
        (taken as ``½‖v_k‖² − (X·Vᵀ)[i, k]`` in X's dtype), but each tile's
        products are reduced while in cache, so the n × K matrix is never
        formed (for QK-means's assignment the argmin over a materialised
        n × K matrix cost ~13 % of the whole at K = D = 2048).

        Parameters
        ----------
        X : array-like of shape (n_samples, D), float32 or float64
            The rows to assign; not modified.
        row_norms_sq : array-like of shape (K,), optional
            ``‖v_k‖²`` (default: :meth:`row_norms_sq`; pass it when calling
            repeatedly).
        n_threads : int or None
            As in :meth:`apply_rows`.

        Returns
        -------
        ndarray of shape (n_samples,), int32
            Index of the nearest row of ``V`` for every row of ``X``.

        Examples
        --------
        >>> V = SparseFactors([np.eye(2), np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]])], lam=2.0)
        >>> V.nearest_rows(np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 5.0]]))
        array([0, 1], dtype=int32)
        """
        X, dtype, n_threads = self._check_rows(X, n_threads, "nearest_rows")
        X = np.ascontiguousarray(X, dtype=dtype)
        norms = self.row_norms_sq() if row_norms_sq is None else np.asarray(row_norms_sq)
        if norms.shape != (self._shape[0],):
            raise ValueError(f"The 'row_norms_sq' parameter of SparseFactors.nearest_rows must "
                             f"have shape ({self._shape[0]},). Got {norms.shape} instead.")
        half = (norms.astype(np.float64) * 0.5).astype(dtype)
        labels = np.empty(X.shape[0], dtype=np.int32)
        self._run_tiles(X, dtype, n_threads, argmin_rows_serial, argmin_rows_parallel, labels,
                        half)
        return labels

    # ------------------------------------------------------------ statistics
    def row_norms_sq(self):
        """``‖v_k‖²`` for every row of ``V`` (float64), ndarray of shape (K,).

        Computed in float64 on blocks of 256 rows (``e_kᵀ V`` by the
        transposed operator), so memory stays ``O(256·D)``.

        Returns
        -------
        ndarray of shape (K,), float64
            The squared Euclidean norm of every row of ``V``.

        Examples
        --------
        >>> V = SparseFactors([np.eye(2), np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]])], lam=2.0)
        >>> V.row_norms_sq()
        array([20., 36.])
        """
        K = self._shape[0]
        T64 = self.T.astype(np.float64)
        out = np.empty(K, dtype=np.float64)
        for k0 in range(0, K, 256):
            k1 = min(K, k0 + 256)
            E = np.zeros((k1 - k0, K), dtype=np.float64)
            E[np.arange(k1 - k0), np.arange(k0, k1)] = 1.0
            rows = T64.apply_rows(E, n_threads=1)  # rows k0..k1 of V, (k1-k0, D)
            out[k0:k1] = np.einsum("ij,ij->i", rows, rows)
        return out

    # persistence: defined in _sparse_factors_io (the file format lives there)
    to_arrays = _io.to_arrays
    from_arrays = classmethod(_io.from_arrays)
    save = _io.save
    load = classmethod(_io.load)
