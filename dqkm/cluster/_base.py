"""What every dqkm clustering estimator shares: input validation, the
NumPy-in/NumPy-out convention, and the state used by ``dqkm.save``/``dqkm.load``."""

from __future__ import annotations

import dask.array as da
import numpy as np
from sklearn.base import (BaseEstimator, ClassNamePrefixFeaturesOutMixin, ClusterMixin,
                          TransformerMixin)
from sklearn.utils import check_array
from sklearn.utils.validation import check_is_fitted, validate_data

from ..data.inputs import in_memory_input, is_lazy_input, lazy_input
from ..parallel.data import to_dask

__all__ = ["DqkmClusterer", "check_n_features", "is_lazy", "validate_input"]


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


def validate_input(estimator, X, *, reset: bool, row_chunks=None):
    """Return ``(Xd, lazy)``: X as a row-chunked float Dask array, and whether
    the caller gave a lazy (Dask/Zarr) input.  Shared by every dqkm estimator.

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
    def fit_predict(self, X, y=None, **kwargs):
        """Fit on X and return the cluster of each of its rows.

        Parameters
        ----------
        X : array-like, Dask array, Zarr array or store path of shape (n_samples, n_features)
            NumPy in gives NumPy out; Dask in gives a lazy Dask array aligned with
            X's row chunks.
        y : ignored
        **kwargs
            Passed to :meth:`fit` (e.g. ``checkpoint``, ``resume``).

        Returns
        -------
        labels : ndarray or Dask array of shape (n_samples,), int
            ``labels_`` after the fit.
        """
        return self.fit(X, **kwargs).labels_

    def _validate_X(self, X, *, reset: bool):
        """Return ``(Xd, lazy)``; see :func:`validate_input`."""
        return validate_input(self, X, reset=reset)

    @staticmethod
    def _check_init_array(init, n_clusters, n_features, owner):
        arr = check_array(init, dtype=[np.float64, np.float32], input_name="init")
        if arr.shape != (n_clusters, n_features):
            raise ValueError(f"The 'init' array of {owner} must have shape (n_clusters, "
                             f"n_features) = ({n_clusters}, {n_features}). Got {arr.shape} "
                             "instead.")
        return arr

    @staticmethod
    def _output(result: da.Array, lazy: bool):
        """Dask in → Dask out; NumPy in → NumPy out (computed now)."""
        if lazy:
            return result
        from ..parallel.engine import compute

        return np.asarray(compute(result)[0])

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        return tags
