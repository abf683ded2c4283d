"""Nyström kernel feature maps whose landmarks are a fast operator.

The Nyström approximation ``K ≈ C·W⁺·Cᵀ`` (QuicK-means journal paper, eq. 13)
needs the kernel between every sample and the K landmarks ``U``.  For kernels
of the form ``k(x, u) = f(x)f(u)g(x·u)`` — the RBF kernel is
``exp(−γ(‖x‖² − 2x·u + ‖u‖²))`` — that costs one product ``U·x`` plus ‖x‖² and
the fixed ‖u_k‖².  :class:`FactorNystroem` takes ``U`` from:

* a fitted ``QKMeans``: ``U = V = λ·S1···SQ`` (its ``factors_``), so ``U·x`` is
  one fast sparse-factor apply (Sect. 4.6.3);
* a fitted ``KMeans`` (or any clusterer with ``cluster_centers_``): dense;
* ``'uniform'``: rows of X drawn uniformly;
* ``'hadamard'``: the Fast-Nyström structure of Si et al. (2016), eq. (14):
  ``U = [D_{v1}Hᵀ, …, D_{vS}Hᵀ]ᵀ`` with H the Walsh–Hadamard matrix applied
  by the fast transform (see :class:`dqkm.kernels.hadamard.HadamardLandmarks`).
"""

from __future__ import annotations

import math
import numbers

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin, clone
from sklearn.exceptions import NotFittedError
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ._validation import Interval, Options, Predicate, validate_params
from .cluster._base import validate_input
from .cluster.kmeans import KMeans
from .data.serialize import pack_operator, unpack_operator
from .exceptions import DataError
from .kernels.hadamard import HadamardLandmarks, next_pow2
from .parallel.engine import compute
from .parallel.finite import check_sample
from .parallel.sampling import sample_rows
from .parallel.neighbors import kernel_from_products, nystroem_map

__all__ = ["FactorNystroem", "landmark_operator"]

_KERNELS = {"rbf", "linear"}
_SEEDS = {"uniform", "k-means"}
_DEFAULT_N_COMPONENTS = 100


def landmark_operator(estimator):
    """The landmark operator of a fitted clusterer: its ``factors_`` when it has
    them (fast ``apply_rows``), else its dense ``cluster_centers_``.

    Parameters
    ----------
    estimator : fitted clusterer
        A model with ``factors_`` (``QKMeans``) or ``cluster_centers_``.

    Returns
    -------
    SparseFactors or ndarray of shape (n_clusters, n_features)

    Examples
    --------
    >>> import numpy as np, dqkm
    >>> from dqkm.kernel_approximation import landmark_operator
    >>> X = np.random.default_rng(0).normal(size=(100, 8))
    >>> landmark_operator(dqkm.KMeans(4, random_state=0).fit(X)).shape
    (4, 8)
    """
    factors = getattr(estimator, "factors_", None)
    if factors is not None:
        return factors
    return np.asarray(estimator.cluster_centers_)


def _is_operator(obj) -> bool:
    return all(hasattr(obj, a) for a in ("apply_rows", "row_norms_sq", "toarray", "shape"))


def _is_landmarks(obj) -> bool:
    """A clusterer (fitted or not: fit says which), an operator or an array."""
    return (hasattr(obj, "fit") or _is_operator(obj) or hasattr(obj, "__array__")
            or isinstance(obj, (list, tuple)))


def _inverse_sqrt_psd(W):
    """``W^{+1/2}`` of a symmetric PSD matrix: eigenvalues below
    ``λ_max·K·eps`` (and negative round-off) are treated as zero."""
    W = (np.asarray(W, dtype=np.float64) + np.asarray(W, dtype=np.float64).T) / 2
    evals, evecs = np.linalg.eigh(W)
    top = max(float(evals.max(initial=0.0)), 0.0)
    tol = top * W.shape[0] * np.finfo(np.float64).eps
    inv = np.zeros_like(evals)
    keep = evals > tol
    inv[keep] = 1.0 / np.sqrt(evals[keep])
    return (evecs * inv) @ evecs.T


class FactorNystroem(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Nyström feature map with landmarks from (Q)K-means, uniform rows or Fast-Nyström.

    ``transform(X) = k(X, U) · W^{+1/2}`` with ``W = k(U, U)``, so that
    ``transform(X)·transform(Y)ᵀ = k(X, U)·W⁺·k(U, Y)`` (eq. 13), as
    :class:`sklearn.kernel_approximation.Nystroem`.

    Parameters
    ----------
    landmarks : fitted clusterer, SparseFactors-like operator, ndarray, 'uniform' or 'hadamard'
        * a fitted ``QKMeans`` (uses ``factors_``: ``U·x`` by the sparse factors)
          or ``KMeans``/``KMeansL1``/scikit-learn ``KMeans`` (dense
          ``cluster_centers_``);
        * an operator with ``apply_rows``, ``row_norms_sq``, ``toarray`` and
          ``shape`` (e.g. ``dqkm.kernels.SparseFactors``), or an ndarray of
          shape (K, n_features): used as given;
        * ``'uniform'``: ``n_components`` distinct rows of X, uniformly;
        * ``'hadamard'``: Fast-Nyström landmarks (Si et al. 2016, eq. 14):
          with ``N = 2^⌈log2 D⌉`` (D padded with zeros) and
          ``S = ⌈n_components / N⌉`` seeds ``v_1…v_S`` (``seeds``), landmark
          ``(s, j)`` is ``h_j ⊙ v_s`` (row j of ``H_N·D_{v_s}``, first D
          coordinates).  Blocks ``1…S−1`` use all N rows of ``H_N``; the last
          block uses ``n_components − (S−1)·N`` distinct rows drawn uniformly
          (``random_state``).  ``U·x`` then costs S fast transforms.
    kernel : {'rbf', 'linear'}, default='rbf'
    gamma : float or None, default=None
        RBF width, ``k(x, u) = exp(−γ‖x − u‖²)``; None: ``1 / n_features``
        (scikit-learn's default).  Must be > 0.
    n_components : int or None, default=None
        Number of landmarks K for ``'uniform'`` and ``'hadamard'`` (None: 100,
        at most n_samples for ``'uniform'``).  With a clusterer or an
        operator K is its number of rows; if given it must equal it.
    seeds : {'uniform', 'k-means'}, default='uniform'
        ``'hadamard'`` only: the diagonals ``v_s`` are S rows of X drawn
        uniformly, or the centroids of ``dqkm.KMeans(S, random_state)`` on X
        ("Un. F-Nys" and "K. F-Nys" of the journal's Table 4).
    random_state : int, RandomState instance or None
        For ``'uniform'`` and ``'hadamard'``.

    Attributes
    ----------
    landmark_operator_ : ndarray of shape (K, n_features), SparseFactors or HadamardLandmarks
        What computes ``X·Uᵀ`` in :meth:`transform`.
    components_ : ndarray of shape (K, n_features)
        The landmarks, dense.
    component_sq_norms_ : ndarray of shape (K,)
    normalization_ : ndarray of shape (K, K)
        ``W^{+1/2}``: eigenvalues of W below ``λ_max·K·eps`` are dropped.
    gamma_ : float
        The RBF width in use.
    kernel_ : str
        The kernel of fit (what :meth:`transform` uses, whatever ``kernel`` is set
        to later: the normalisation belongs to it).
    n_components_ : int
    n_features_in_ : int

    References
    ----------
    Williams & Seeger (2001), Using the Nyström method to speed up kernel
    machines.  Si, Hsieh, Dhillon (2016), Computationally efficient Nyström
    approximation using fast transforms, ICML.  Giffon et al., QuicK-means,
    Machine Learning (2021), Sect. 4.6, eqs. (13)–(15).

    Examples
    --------
    >>> import numpy as np, dqkm
    >>> from dqkm.kernel_approximation import FactorNystroem
    >>> X = np.random.default_rng(0).standard_normal((200, 5))
    >>> km = dqkm.KMeans(20, random_state=0).fit(X)
    >>> FactorNystroem(km, gamma=0.1).fit(X).transform(X).shape
    (200, 20)
    """

    _parameter_constraints = {
        "landmarks": [Options(str, {"uniform", "hadamard"}),
                      Predicate(lambda v: _is_landmarks(v),
                                "a fitted clusterer, an operator with apply_rows or an array "
                                "of shape (n_components, n_features)")],
        "kernel": [Options(str, _KERNELS)],
        "gamma": [Interval(numbers.Real, 0, None, closed="neither"), None],
        "n_components": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "seeds": [Options(str, _SEEDS)],
        "random_state": ["random_state"],
    }

    def __init__(self, landmarks="uniform", *, kernel="rbf", gamma=None, n_components=None,
                 seeds="uniform", random_state=None):
        self.landmarks = landmarks
        self.kernel = kernel
        self.gamma = gamma
        self.n_components = n_components
        self.seeds = seeds
        self.random_state = random_state

    # ------------------------------------------------------------ validation
    def _validate(self, X, *, reset):
        return validate_input(self, X, reset=reset)

    def _check_params(self, n_features):
        """After :func:`validate_params`: γ of the fit (None: 1 / n_features)."""
        self.gamma_ = 1.0 / n_features if self.gamma is None else float(self.gamma)

    def _resolve_landmarks(self, Xd, rng):
        """The landmark operator for ``self.landmarks``."""
        owner = type(self).__name__
        lm = self.landmarks
        D = Xd.shape[1]
        if isinstance(lm, str):
            K = _DEFAULT_N_COMPONENTS if self.n_components is None else self.n_components
            if lm == "uniform":
                K = min(K, Xd.shape[0])
                rows = sample_rows(Xd, K, rng)
                check_sample(rows)  # an all-NaN model otherwise
                return rows
            N = next_pow2(D)
            S = math.ceil(K / N)
            if self.seeds == "uniform":
                if S > Xd.shape[0]:
                    raise ValueError(f"'hadamard' landmarks with seeds='uniform' need S = "
                                     f"ceil(n_components / {N}) = {S} rows; X has "
                                     f"{Xd.shape[0]}.")
                seeds = sample_rows(Xd, S, rng)
                check_sample(seeds)
            else:
                seeds = KMeans(S, random_state=int(rng.integers(2**31 - 1))).fit(
                    Xd).cluster_centers_
            last = K - (S - 1) * N
            blocks = np.repeat(np.arange(S), [N] * (S - 1) + [last])
            rows = np.concatenate([np.tile(np.arange(N), S - 1),
                                   np.sort(rng.choice(N, size=last, replace=False))])
            return HadamardLandmarks(np.asarray(seeds, dtype=Xd.dtype), blocks, rows)
        if hasattr(lm, "fit") and not _is_operator(lm):
            try:
                check_is_fitted(lm)
            except NotFittedError as e:
                raise NotFittedError(f"The 'landmarks' estimator of {owner} "
                                     f"({type(lm).__name__}) is not fitted yet: fit it first; "
                                     "its centroids (or sparse factors) are the landmarks.") \
                    from e
            op = landmark_operator(lm)
        elif _is_operator(lm):
            op = lm
        else:  # an array (validate_params let nothing else through)
            op = np.asarray(lm, dtype=Xd.dtype)
            if op.ndim != 2:
                raise ValueError(f"The 'landmarks' array of {owner} must be 2-D (n_components, "
                                 f"n_features). Got shape {op.shape} instead.")
            if not np.isfinite(op).all():
                raise DataError(f"The 'landmarks' array of {owner} contains NaN or infinity; "
                                "landmarks must be finite: drop or replace those rows.")
        K, d = op.shape
        if d != D:
            raise ValueError(f"X has {D} features, but the landmarks of {owner} have {d}.")
        if self.n_components is not None and self.n_components != K:
            raise ValueError(f"The 'n_components' parameter of {owner} must be None or the "
                             f"number of landmarks ({K}) when landmarks are given. Got "
                             f"{self.n_components} instead.")
        return op

    # ------------------------------------------------------------------ fit
    def fit(self, X, y=None):
        """Choose the landmarks and compute ``W^{+1/2}``.

        Parameters
        ----------
        X : array-like, Dask or Zarr array of shape (n_samples, n_features)
            Read only for ``'uniform'`` (the sampled rows) and ``'hadamard'``
            (seeds: sampled rows or one K-means fit).  Sampled rows holding
            NaN or infinity raise :class:`~dqkm.exceptions.DataError`.
        y : ignored

        Returns
        -------
        self

        Examples
        --------
        >>> import numpy as np, dqkm
        >>> from dqkm.kernel_approximation import FactorNystroem
        >>> X = np.random.default_rng(0).standard_normal((100, 4))
        >>> ny = FactorNystroem(dqkm.KMeans(8, random_state=0).fit(X), gamma=0.5).fit(X)
        >>> ny.components_.shape, ny.normalization_.shape  # the 8 centers are the landmarks
        ((8, 4), (8, 8))
        """
        validate_params(self)
        Xd, _ = self._validate(X, reset=True)
        self._check_params(Xd.shape[1])
        rs = check_random_state(self.random_state)
        rng = np.random.default_rng(rs.randint(2**31 - 1))
        op = self._resolve_landmarks(Xd, rng)
        U = np.asarray(op if isinstance(op, np.ndarray) else op.toarray(), dtype=np.float64)
        u_sq = np.einsum("ij,ij->i", U, U) if isinstance(op, np.ndarray) \
            else np.asarray(op.row_norms_sq(), dtype=np.float64)
        self.kernel_ = self.kernel
        W = kernel_from_products(U @ U.T, u_sq, u_sq, self.kernel_, self.gamma_)
        self.landmark_operator_ = op
        self.components_ = U.astype(Xd.dtype)
        self.component_sq_norms_ = u_sq
        self.normalization_ = _inverse_sqrt_psd(W)
        self.n_components_ = int(U.shape[0])
        return self

    def transform(self, X):
        """The Nyström features ``k(X, U)·W^{+1/2}``.

        Parameters
        ----------
        X : array-like, Dask or Zarr array of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples, n_components), X's dtype
            (a lazy Dask array, blockwise, for Dask input)

        Notes
        -----
        One pass over X; per block, ``X·Uᵀ`` by the landmark operator (sparse
        factors: one fast apply; Hadamard: S fast transforms per row), then
        the kernel from ‖x‖², ‖u‖² and the products, times the K×K
        normalisation.

        Examples
        --------
        >>> import numpy as np, dqkm
        >>> from dqkm.kernel_approximation import FactorNystroem
        >>> from sklearn.metrics.pairwise import rbf_kernel
        >>> X = np.random.default_rng(0).standard_normal((30, 4))
        >>> ny = FactorNystroem("uniform", gamma=0.5, n_components=30, random_state=0).fit(X)
        >>> Z = ny.transform(X)  # every row is a landmark: the kernel is reproduced
        >>> Z.shape, bool(np.allclose(Z @ Z.T, rbf_kernel(X, gamma=0.5), atol=1e-6))
        ((30, 30), True)
        """
        check_is_fitted(self, "normalization_")
        Xd, lazy = self._validate(X, reset=False)
        op = self.landmark_operator_
        if isinstance(op, np.ndarray):
            op = op.astype(Xd.dtype, copy=False)
        elif hasattr(op, "astype") and getattr(op, "dtype", Xd.dtype) != Xd.dtype:
            op = op.astype(Xd.dtype)
        out = nystroem_map(Xd, op, self.component_sq_norms_, self.normalization_, self.kernel_,
                           self.gamma_)
        if lazy:
            return out
        return np.asarray(compute(out)[0])

    # ------------------------------------------------------------- save/load
    def _get_state(self):
        """Arrays and scalars for :func:`dqkm.save` (the landmark operator by kind:
        dense rows, sparse factors or Fast-Nyström seeds)."""
        check_is_fitted(self, "normalization_")
        op = self.landmark_operator_
        if isinstance(op, np.ndarray):
            kind, arrays = "ndarray", {"operator": op}
        else:
            kind, arrays = pack_operator(op, "operator__")
            if kind is None:
                raise TypeError(f"The landmark operator of this {type(self).__name__} "
                                f"({type(op).__name__}) cannot be saved without pickle; dqkm "
                                "saves dense landmarks, SparseFactors and HadamardLandmarks.")
        arrays.update(components_=self.components_,
                      component_sq_norms_=self.component_sq_norms_,
                      normalization_=self.normalization_)
        meta = {"operator_kind": kind, "gamma_": self.gamma_, "kernel_": self.kernel_,
                "n_components_": self.n_components_, "n_features_in_": self.n_features_in_}
        return arrays, meta

    def _set_state(self, arrays, meta):
        kind = meta["operator_kind"]
        self.landmark_operator_ = (np.asarray(arrays["operator"]) if kind == "ndarray"
                                   else unpack_operator(kind, arrays, "operator__"))
        self.components_ = np.asarray(arrays["components_"])
        self.component_sq_norms_ = np.asarray(arrays["component_sq_norms_"], np.float64)
        self.normalization_ = np.asarray(arrays["normalization_"], np.float64)
        self.gamma_ = float(meta["gamma_"])
        self.kernel_ = str(meta["kernel_"])
        self.n_components_ = int(meta["n_components_"])
        self.n_features_in_ = int(meta["n_features_in_"])
        return self

    def __sklearn_clone__(self):
        """Clone the parameters but keep a fitted landmark estimator as is (it is an
        input, read only), so that pipelines and grid searches can clone this
        transformer without unfitting its landmarks."""
        params = self.get_params(deep=False)
        lm = params.pop("landmarks")
        params = {k: clone(v, safe=False) for k, v in params.items()}
        if not (hasattr(lm, "fit") and not _is_operator(lm)):
            lm = clone(lm, safe=False)
        return type(self)(lm, **params)

    @property
    def _n_features_out(self):
        return self.n_components_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        return tags
