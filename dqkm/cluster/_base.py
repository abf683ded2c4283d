"""What every dqkm clustering estimator shares: input validation, the
NumPy-in/NumPy-out convention, and the state used by ``dqkm.save``/``dqkm.load``."""

from __future__ import annotations

import warnings

import dask.array as da
import numpy as np
import scipy.sparse as sp
from sklearn.base import (BaseEstimator, ClassNamePrefixFeaturesOutMixin, ClusterMixin,
                          TransformerMixin)
from sklearn.utils import check_array
from sklearn.utils.validation import check_is_fitted, validate_data

from .._docstrings import fill_doc
from ..data.inputs import in_memory_input, is_lazy_input, lazy_input
from ..exceptions import DataError
from ..parallel.data import to_dask
from ..sparse import check_sparse, is_sparse_dask, sparse_to_dask

__all__ = ["DqkmClusterer", "CenterInference", "check_n_features", "is_lazy", "validate_input",
           "validate_sample_weight"]


def is_lazy(X) -> bool:
    """True for inputs that stay out of core: Dask arrays, Zarr arrays, Dask
    DataFrames, Dask-backed xarray objects and file paths (see
    :func:`dqkm.data.inputs.is_lazy_input`)."""
    return is_lazy_input(X)


def _check_lazy_features(estimator, n_features, names, *, reset):
    """``n_features_in_`` and ``feature_names_in_`` for lazy input, by scikit-learn's
    own checks run on an empty stand-in with X's columns (nothing of X is read)."""
    if names is not None:
        import pandas as pd

        proxy = pd.DataFrame(columns=list(names))
    else:
        proxy = np.empty((0, n_features))
    validate_data(estimator, proxy, reset=reset, skip_check_array=True)


def check_n_features(estimator, n_features, *, reset):
    """Record ``n_features_in_`` (``reset``) or check X against it (sklearn's message)."""
    if reset:
        estimator.n_features_in_ = n_features
        if hasattr(estimator, "feature_names_in_"):
            del estimator.feature_names_in_
        return
    check_is_fitted(estimator)
    if n_features != estimator.n_features_in_:
        raise ValueError(f"X has {n_features} features, but {type(estimator).__name__} is "
                         f"expecting {estimator.n_features_in_} features as input.")


def _validate_sparse(estimator, X, *, reset: bool):
    """``(Xd, lazy)`` for sparse X (in-memory CSR/COO, or a Dask array of CSR
    chunks) as a Dask array of CSR row chunks; None for any other X."""
    owner = type(estimator).__name__
    if sp.issparse(X):
        if not reset:
            check_is_fitted(estimator)
        X = check_sparse(X, owner)
        Xc = validate_data(estimator, X, reset=reset, accept_sparse="csr",
                           dtype=[np.float64, np.float32], ensure_min_samples=1)
        return sparse_to_dask(Xc), False
    if not (is_lazy(X) and is_sparse_dask(X)):
        return None
    Xd = check_sparse(X, owner)
    if Xd.ndim != 2:
        raise ValueError(f"Expected a 2-D array for X, got shape {Xd.shape}.")
    if Xd.numblocks[1] != 1:
        Xd = Xd.rechunk({1: -1})
    if Xd.dtype.kind not in "fiub":
        raise TypeError(f"X must hold real numbers; got dtype {Xd.dtype}.")
    if Xd.dtype not in (np.float32, np.float64):
        Xd = Xd.map_blocks(lambda b: b.astype(np.float64), dtype=np.float64,
                           meta=sp.csr_matrix((0, 0), dtype=np.float64))
    check_n_features(estimator, Xd.shape[1], reset=reset)
    return Xd, True


def validate_sample_weight(sample_weight, Xd, owner="dqkm"):
    """``sample_weight`` as a float64 Dask array with X's row chunks, or None.

    NumPy (or list, or scalar) weights are checked here; Dask weights are
    rechunked to X's row chunks and checked in one pass over the weights
    (not over X).  Negative, NaN or infinite weights, a wrong shape and
    all-zero weights raise :class:`~dqkm.exceptions.DataError` naming
    ``sample_weight``.
    """
    if sample_weight is None:
        return None
    n = Xd.shape[0]
    fix = f"pass one finite, non-negative weight per row of X (shape ({n},))."
    if isinstance(sample_weight, da.Array):
        if sample_weight.ndim != 1 or sample_weight.shape[0] != n:
            raise DataError(f"{owner}: sample_weight must have shape ({n},) like X's rows; "
                            f"got a Dask array of shape {sample_weight.shape}; {fix}")
        w = sample_weight.astype(np.float64).rechunk((Xd.chunks[0],))
        from ..parallel.engine import compute

        finite, low, total = compute(da.isfinite(w).all(), w.min(), w.sum())
        _check_weight_values(bool(finite), float(low), float(total), owner, fix)
        return w
    w = np.asarray(sample_weight)
    if w.dtype.kind not in "fiub":
        raise DataError(f"{owner}: sample_weight must hold real numbers; got dtype {w.dtype}; "
                        f"{fix}")
    w = w.astype(np.float64)
    if w.ndim == 0:
        w = np.full(n, float(w))
    if w.shape != (n,):
        raise DataError(f"{owner}: sample_weight must have shape ({n},) like X's rows; got "
                        f"shape {w.shape}; {fix}")
    finite = bool(np.isfinite(w).all())
    _check_weight_values(finite, float(np.nanmin(w)) if finite else np.nan,
                         float(w.sum()) if finite else np.nan, owner, fix, w)
    return da.from_array(w, chunks=(Xd.chunks[0],))


def _check_weight_values(finite, low, total, owner, fix, w=None):
    where = ""
    if not finite:
        if w is not None:
            where = f" (the first at index {int(np.flatnonzero(~np.isfinite(w))[0])})"
        raise DataError(f"{owner}: sample_weight must be finite; got NaN or infinity"
                        f"{where}; {fix}")
    if low < 0:
        if w is not None:
            i = int(np.flatnonzero(w < 0)[0])
            where = f" (the first at index {i}: {float(w[i])})"
        raise DataError(f"{owner}: sample_weight must be non-negative; got negative values"
                        f"{where}; {fix} A weight of 0 leaves its row out.")
    if total <= 0:
        raise DataError(f"{owner}: sample_weight must contain at least one non-zero number; "
                        f"got all zeros; {fix}")


def validate_input(estimator, X, *, reset: bool, row_chunks=None, accept_sparse=False):
    """Return ``(Xd, lazy)``: X as a row-chunked float Dask array, and whether
    the caller gave a lazy (Dask/Zarr) input.  Shared by every dqkm estimator.

    With ``accept_sparse``, ``scipy.sparse`` X (CSR, or COO converted) and
    Dask arrays of CSR chunks come back as a Dask array of CSR row chunks;
    other sparse formats are refused with the conversion to make.

    In-memory input goes through scikit-learn's ``validate_data`` (the usual
    messages, ``n_features_in_``, feature names; an in-memory xarray Dataset
    as a DataFrame of its variables); lazy input (see :func:`is_lazy`) is
    checked for ndim, dtype, the number of features and the feature names
    (of a Dask DataFrame, a Dataset, a Parquet or CSV file) without reading
    it — non-finite values are detected during the first pass; a Dask
    DataFrame's row counts are computed (one pass returning only lengths).  ``row_chunks`` (a function of
    the number of rows) sets the rows per block of in-memory input, whose
    blocks are views of it (lazy input keeps its chunks).
    """
    X = in_memory_input(X)
    if accept_sparse:
        out = _validate_sparse(estimator, X, reset=reset)
        if out is not None:
            return out
    if not is_lazy(X):
        if not reset:
            check_is_fitted(estimator)
        Xc = validate_data(estimator, X, reset=reset, dtype=[np.float64, np.float32],
                           accept_sparse=False, ensure_min_samples=1)
        # Xc is read only by this call's passes: no defensive copy of it
        chunks = None if row_chunks is None else row_chunks(Xc.shape[0])
        return to_dask(Xc, chunks, copy=False), False
    if not reset:
        check_is_fitted(estimator)
    X, names = lazy_input(X)
    Xd = to_dask(X)
    if Xd.ndim != 2:
        raise ValueError(f"Expected a 2-D array for X, got a {Xd.ndim}-D Dask array of "
                         f"shape {Xd.shape}. Reshape your data, e.g. X.reshape(-1, 1) for a "
                         "single feature.")
    if not (np.issubdtype(Xd.dtype, np.number) or Xd.dtype == bool) or \
            np.issubdtype(Xd.dtype, np.complexfloating):
        raise TypeError(f"X must hold real numbers; got dtype {Xd.dtype}. "
                        "Convert it, e.g. X.astype('float32').")
    if Xd.dtype not in (np.float32, np.float64):
        Xd = Xd.astype(np.float64)
    if Xd.shape[0] < 1 or Xd.shape[1] < 1:
        raise ValueError(f"Found array with shape {Xd.shape} while a minimum of 1 sample "
                         "and 1 feature is required.")
    _check_lazy_features(estimator, Xd.shape[1], names, reset=reset)
    return Xd, True


class DqkmClusterer(ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin,
                    BaseEstimator):
    """Base class: validation of X and the lazy/eager output convention.

    ``get_feature_names_out()`` names the columns of ``transform``
    (``kmeans0``, ``kmeans1``, …: the class name in lower case and the column
    index), so ``set_output(transform="pandas")`` gives a DataFrame with those
    columns — computed into memory, also for Dask input.  The parameter table
    of a subclass is its ``_parameter_constraints`` (see
    :mod:`dqkm._validation`), checked at the start of ``fit``.
    """

    # ------------------------------------------------------------- validation
    @fill_doc
    def fit_predict(self, X, y=None, **kwargs):
        """Fit on X and return the cluster of each of its rows.

        Parameters
        ----------
        {X_infer}
        y : ignored
        **kwargs
            Passed to :meth:`fit` (e.g. ``checkpoint``, ``resume``).

        Returns
        -------
        labels : ndarray or Dask array of shape (n_samples,), int
            ``labels_`` after the fit.

        Examples
        --------
        >>> import numpy as np, dqkm
        >>> X = np.array([[0., 0.], [0., 1.], [10., 10.], [10., 11.]])
        >>> labels = dqkm.KMeans(n_clusters=2, random_state=0).fit_predict(X)
        >>> bool(labels[0] == labels[1]), bool(labels[1] == labels[2])
        (True, False)
        """
        return self.fit(X, **kwargs).labels_

    def _validate_X(self, X, *, reset: bool):
        """Return ``(Xd, lazy)``; see :func:`validate_input` (sparse X where the
        class declares ``_accept_sparse``)."""
        return validate_input(self, X, reset=reset, accept_sparse=self._takes_sparse())

    @classmethod
    def _takes_sparse(cls):
        """Whether the class itself (not a parent) declares ``_accept_sparse = True``:
        a subclass whose passes are dense-only does not inherit sparse input."""
        return bool(vars(cls).get("_accept_sparse", False))

    @staticmethod
    def _check_init_array(init, n_clusters, n_features, owner):
        """``init`` as a float array of shape (n_clusters, n_features), or a
        ``ValueError`` in scikit-learn's words that also names the expected shape."""
        arr = check_array(init, dtype=[np.float64, np.float32], input_name="init")
        if arr.shape != (n_clusters, n_features):
            what = (f"the number of clusters {n_clusters}" if arr.shape[0] != n_clusters
                    else f"the number of features of the data {n_features}")
            raise ValueError(f"The shape of the initial centers {arr.shape} does not match "
                             f"{what}: the 'init' array of {owner} must have shape "
                             f"(n_clusters, n_features) = ({n_clusters}, {n_features}). Got "
                             f"{arr.shape} instead; pass one row per cluster with X's "
                             "columns, or set n_clusters to the number of rows of init.")
        return arr

    @staticmethod
    def _warn_explicit_init(init, n_init, owner, stacklevel=5):
        """scikit-learn's RuntimeWarning when an explicit init array comes with an
        integer ``n_init`` other than 1: the fit runs once (every run would start
        from the same centers)."""
        explicit = not isinstance(init, str) and not callable(init)
        if explicit and n_init != "auto" and n_init != 1:
            warnings.warn("Explicit initial center position passed: performing only one "
                          f"init in {owner} instead of n_init={n_init}.", RuntimeWarning,
                          stacklevel=stacklevel)

    @staticmethod
    def _output(result: da.Array, lazy: bool):
        """Dask in → Dask out; NumPy in → NumPy out (computed now)."""
        if lazy:
            return result
        from ..parallel.engine import compute

        return np.asarray(compute(result)[0])

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = self._takes_sparse()
        return tags


class CenterInference(TransformerMixin):
    """``predict``, ``transform`` and ``score`` of an estimator whose model is
    its ``cluster_centers_`` (KMeans, MiniBatchKMeans): blockwise on any size,
    dense or CSR rows (as the estimator's ``_validate_X`` accepts them).

    A block of X holding NaN or infinity, or values whose squared distances
    overflow float64, raises :class:`~dqkm.exceptions.DataError` naming the
    first row concerned (for Dask input: when that block is computed).
    """

    def _centers_for(self, Xd):
        check_is_fitted(self)
        return np.asarray(self.cluster_centers_).astype(Xd.dtype)

    @fill_doc
    def predict(self, X):
        """Index of the closest center of each sample.

        Parameters
        ----------
        {X_infer_sparse}

        Returns
        -------
        {labels}

        Examples
        --------
        {fitted_kmeans}
        >>> bool(km.predict([[0.5, 0.5]])[0] == km.labels_[0])
        True
        """
        from ..parallel.lloyd import assign

        check_is_fitted(self)
        Xd, lazy = self._validate_X(X, reset=False)
        return self._output(assign(Xd, self._centers_for(Xd)), lazy)

    @fill_doc
    def transform(self, X):
        """Euclidean distances to every center, shape (n_samples, n_clusters).

        Parameters
        ----------
        {X_infer_sparse}

        Returns
        -------
        distances : ndarray or Dask array of shape (n_samples, n_clusters)

        Examples
        --------
        {fitted_kmeans}
        >>> sorted(km.transform([[0., 0.5]])[0].round(3).tolist())  # to (0, 0.5), to (10, 10.5)
        [0.0, 14.142]
        """
        from ..parallel.lloyd import center_distances

        check_is_fitted(self)
        Xd, lazy = self._validate_X(X, reset=False)
        return self._output(center_distances(Xd, self._centers_for(Xd)), lazy)

    @fill_doc
    def score(self, X, y=None, sample_weight=None):
        """Opposite of the (weighted) inertia of X on the fitted centers (higher is better).

        One pass over X (and the weights).

        Parameters
        ----------
        X : array-like, scipy.sparse, Dask array, Zarr array or store path of shape (n_samples, n_features)
        {score_y_weights}

        Returns
        -------
        float
            Minus the (weighted) sum of squared distances to the nearest centers.

        Examples
        --------
        {fitted_kmeans}
        >>> km.score(X), km.score(X, sample_weight=[1, 1, 1, 3])
        (-1.0, -1.5)
        """
        from ..parallel.lloyd import inertia

        check_is_fitted(self)
        Xd, _ = self._validate_X(X, reset=False)
        w = validate_sample_weight(sample_weight, Xd, type(self).__name__)
        return -inertia(Xd, self._centers_for(Xd), sample_weight=w,
                        split_every=getattr(self, "split_every", None))
