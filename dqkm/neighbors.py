"""Approximate nearest neighbours through a cluster partition (an inverted index).

The query is first assigned to its nearest centroid(s) with the clusterer's
(fast) ``predict``, then the neighbours are searched exactly among the rows
of those clusters only — Giffon et al., QuicK-means, Sect. 4.5 (journal) /
4.3 (preprint).  With a QK-means clusterer the assignment costs one
application of the sparse factors instead of a K×D product.
"""

from __future__ import annotations

import numbers
import os

import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator, clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from ._validation import (Interval, InvalidParameterError, Predicate, check_value,
                          validate_params)
from .cluster._base import is_lazy, validate_input
from .parallel.engine import broadcast, compute
from .parallel.persist import driver_memory_bytes
from .parallel.finite import checked_rows
from .parallel.data import to_dask
from .parallel.memory import check_shuffle_memory, gather_rows
from .parallel.neighbors import (build_index, center_sq_distances, drop_self, probe_clusters,
                                 query_block_rows, search, shuffles_through_files)

__all__ = ["ClusterIndex"]

_IN_MEMORY_FRACTION = 0.5  # of the driver's free memory an in-memory index may take
_FITTED_PREFIX = "fitted_clusterer__"  # names of the fitted clusterer's arrays in a saved model


def _is_fitted(est) -> bool:
    try:
        check_is_fitted(est)
    except NotFittedError:
        return False
    return True


def _lookup_block(ind, codes, classes):
    return classes[codes[ind]]


class ClusterIndex(BaseEstimator):
    """k-nearest-neighbour search restricted to the query's nearest clusters.

    Parameters
    ----------
    clusterer : estimator with ``fit``, ``predict`` and ``cluster_centers_``
        A dqkm ``KMeans``/``QKMeans``/``KMeansL1`` (or a scikit-learn
        ``KMeans``).  If it is already fitted it is used as is; otherwise a
        clone is fitted on the X given to :meth:`fit`.
    n_probe : int, default=1
        Number of nearest clusters searched per query.  ``n_probe=1`` uses the
        clusterer's ``predict``; more use its ``transform`` (distances to the
        centroids).  ``n_probe = n_clusters`` is an exact search.  A query-time
        setting: ``set_params(n_probe=…)`` after fit needs no refit.
    store : str or PathLike, optional
        Write the inverted index as a Zarr v3 group there (atomic); queries
        then read only the clusters they probe.  None: the index is kept in
        memory (for Dask/Zarr input the reordered X is computed into memory;
        fit raises MemoryError, before any pass, if that would take more than
        half of the driver's free memory).
    overwrite : bool, default=False
        Replace an existing ``store``.

    Attributes
    ----------
    clusterer_ : the fitted clusterer
    index_ : InvertedIndex
        Rows grouped by cluster with their original row ids
        (``index_.offsets``: cluster ``c`` is ``offsets[c]:offsets[c+1]``).
    cluster_sizes_ : ndarray of shape (n_clusters,)
    classes_ : ndarray, only when fitted with ``y``
    n_samples_fit_ : int
    n_features_in_ : int

    References
    ----------
    Giffon, Emiya, Ralaivola, Kadri, QuicK-means: accelerating inference for
    K-means by learning fast transforms, Machine Learning (2021), Sect. 4.5.

    Examples
    --------
    >>> import numpy as np, dqkm
    >>> from dqkm.neighbors import ClusterIndex
    >>> X = np.array([[0., 0.], [0., 1.], [10., 10.], [10., 11.]])
    >>> idx = ClusterIndex(dqkm.KMeans(2, random_state=0)).fit(X)
    >>> dist, ind = idx.kneighbors(np.array([[0.1, 0.9]]))
    >>> int(ind[0, 0])
    1
    """

    _parameter_constraints = {
        "clusterer": [Predicate(lambda c: hasattr(c, "fit") and hasattr(c, "predict"),
                                "a clustering estimator with fit and predict (e.g. dqkm.KMeans)")],
        # n_probe <= n_clusters: checked by fit and by every query (_check_n_probe)
        "n_probe": [Interval(numbers.Integral, 1, None, closed="left")],
        "store": [str, os.PathLike, None],
        "overwrite": ["boolean"],
    }

    def __init__(self, clusterer, *, n_probe=1, store=None, overwrite=False):
        self.clusterer = clusterer
        self.n_probe = n_probe
        self.store = store
        self.overwrite = overwrite

    # ----------------------------------------------------------------- helpers
    def _validate(self, X, *, reset, row_chunks=None):
        return validate_input(self, X, reset=reset, row_chunks=row_chunks)

    def __sklearn_clone__(self):
        """Clone the parameters but keep a fitted clusterer as is (read only), so that a
        clone searches the same partition instead of refitting it."""
        params = self.get_params(deep=False)
        c = params.pop("clusterer")
        params = {k: clone(v, safe=False) for k, v in params.items()}
        return type(self)(c if _is_fitted(c) else clone(c), **params)

    # ------------------------------------------------------------------- fit
    def fit(self, X, y=None):
        """Fit the clusterer if needed and build the inverted index of X.

        Parameters
        ----------
        X : array-like, Dask or Zarr array of shape (n_samples, n_features)
        y : array-like of shape (n_samples,), optional
            Targets for :meth:`predict` (1-NN classification).

        Returns
        -------
        self

        Notes
        -----
        Passes over X: the clusterer's fit (if unfitted), one ``predict`` pass,
        one shuffle that writes the rows in cluster order.

        Examples
        --------
        >>> import numpy as np, dqkm
        >>> from dqkm.neighbors import ClusterIndex
        >>> X = np.array([[0., 0.], [0., 1.], [10., 10.], [10., 11.]])
        >>> idx = ClusterIndex(dqkm.KMeans(2, random_state=0)).fit(X)
        >>> idx.cluster_sizes_.tolist(), idx.n_samples_fit_
        ([2, 2], 4)

        An index kept in a Zarr store (queries read only the clusters they probe):

        >>> import os, tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     on_disk = ClusterIndex(dqkm.KMeans(2, random_state=0),
        ...                            store=os.path.join(d, "index.zarr")).fit(X)
        ...     print(on_disk.kneighbors(X[:1], n_neighbors=2)[1].tolist())
        [[0, 1]]
        """
        owner = type(self).__name__
        validate_params(self)  # before the fit's passes
        if self.store is not None:
            from .data.stores import check_writable

            check_writable(self.store, self.overwrite)
        Xd, _ = self._validate(X, reset=True)
        if is_lazy(X):  # NumPy input: the caller already chose memory
            self._check_in_memory_size(Xd)
            if shuffles_through_files(self.store):  # before the clusterer's fit, not after
                check_shuffle_memory(Xd)
        if _is_fitted(self.clusterer):
            clusterer = self.clusterer
            n_in = getattr(clusterer, "n_features_in_", Xd.shape[1])
            if n_in != Xd.shape[1]:
                raise ValueError(f"X has {Xd.shape[1]} features, but the fitted clusterer "
                                 f"of {owner} was fitted on {n_in} features.")
        else:
            clusterer = clone(self.clusterer).fit(Xd if is_lazy(X) else compute(Xd)[0])
        centers = getattr(clusterer, "cluster_centers_", None)
        if centers is None:
            raise TypeError(f"The 'clusterer' parameter of {owner} must have "
                            f"'cluster_centers_' once fitted; {type(clusterer).__name__} "
                            "has none.")
        K = int(np.shape(centers)[0])
        self._check_n_probe(K)
        labels = self._assign(clusterer, Xd)
        labels = np.asarray(gather_rows(labels) if isinstance(
            labels, da.Array) else labels).ravel()
        extra = {}
        if y is not None:
            y = np.asarray(compute(y)[0] if isinstance(y, da.Array) else y)
            if y.ndim != 1 or y.shape[0] != Xd.shape[0]:
                raise ValueError(f"y must have shape (n_samples,) = ({Xd.shape[0]},); got "
                                 f"{y.shape}.")
            self.classes_, codes = np.unique(y, return_inverse=True)
            self._y_codes = codes.astype(np.int64)
            extra["y"] = self._y_codes
        elif hasattr(self, "classes_"):
            del self.classes_
            del self._y_codes
        self.index_, _ = build_index(Xd, labels, K, path=self.store, overwrite=self.overwrite,
                                     extra=extra)
        self.clusterer_ = clusterer
        self._centers = np.asarray(centers)
        self.cluster_sizes_ = np.diff(self.index_.offsets)
        self.n_samples_fit_ = int(Xd.shape[0])
        return self

    def _check_in_memory_size(self, Xd):
        """Without ``store`` the index of a lazy X is X itself, reordered, in the
        driver's memory: refuse (before any pass) when it would take more than half of
        what is free."""
        if self.store is not None:
            return
        need = Xd.nbytes + 16 * Xd.shape[0]  # rows, ids and squared norms
        free = driver_memory_bytes()
        if need > _IN_MEMORY_FRACTION * free:
            raise MemoryError(
                f"An in-memory {type(self).__name__} of X needs {need / 1e9:.1f} GB on the "
                f"driver, more than {_IN_MEMORY_FRACTION:.0%} of its {free / 1e9:.1f} GB "
                "free: pass store='index.zarr' (a path every worker can read) to write the "
                "index to Zarr; queries then read only the clusters they probe.")

    def _check_n_probe(self, n_clusters):
        """``n_probe`` in [1, n_clusters]: checked by fit and again by every query (it
        may be changed after fit with ``set_params``, no refit needed)."""
        check_value("n_probe", self.n_probe,
                    [Interval(numbers.Integral, 1, None, closed="left")], type(self).__name__)
        if self.n_probe > n_clusters:
            raise InvalidParameterError(
                f"The 'n_probe' parameter of {type(self).__name__} must be an int in the range "
                f"[1, n_clusters={n_clusters}]. Got {self.n_probe} instead.")

    @staticmethod
    def _assign(clusterer, Qd, n_probe=1):
        """Labels (n,) or distances (n, K) of the queries, as a Dask array aligned with Qd."""
        if n_probe == 1:
            out = clusterer.predict(Qd)
        elif hasattr(clusterer, "transform"):
            out = clusterer.transform(Qd)
        else:
            out = center_sq_distances(Qd, np.asarray(clusterer.cluster_centers_))
        if not isinstance(out, da.Array):  # a scikit-learn clusterer computed it eagerly
            out = np.asarray(out)
            out = da.from_array(out, chunks=(Qd.chunks[0],) + tuple(-1 for _ in out.shape[1:]))
        return out

    # ------------------------------------------------------------ inference
    def kneighbors(self, X=None, n_neighbors=1, return_distance=True):
        """The ``n_neighbors`` nearest indexed rows of every query.

        Parameters
        ----------
        X : array-like, Dask or Zarr array of shape (n_queries, n_features), optional
            None: the neighbours of every indexed row among the *other*
            indexed rows (as scikit-learn's ``kneighbors()``), as NumPy
            arrays in the order of the X given to :meth:`fit` (computed into
            memory also for a Zarr-backed index: n_samples_fit × n_neighbors
            distances and ids).  With ``n_probe = 1`` each row searches its
            own cluster (no assignment pass).
        n_neighbors : int, default=1
        return_distance : bool, default=True

        Returns
        -------
        distances : ndarray of shape (n_queries, n_neighbors), float64
            Euclidean distances, ascending (only if ``return_distance``).
        indices : ndarray of shape (n_queries, n_neighbors), int64
            Row numbers in the X given to :meth:`fit`.
            Dask arrays for Dask input (lazy, aligned with X's row chunks).

        A block of Dask queries holding NaN or infinity raises
        :class:`~dqkm.exceptions.DataError` when it is computed.

        As :meth:`sklearn.neighbors.NearestNeighbors.kneighbors`, except that
        the neighbours are searched only in the ``n_probe`` nearest clusters
        (extended by the next ones when those hold fewer than
        ``n_neighbors`` rows).

        Examples
        --------
        >>> import numpy as np, dqkm
        >>> from dqkm.neighbors import ClusterIndex
        >>> X = np.array([[0., 0.], [0., 1.], [10., 10.], [10., 11.]])
        >>> idx = ClusterIndex(dqkm.KMeans(2, random_state=0)).fit(X, y=["a", "a", "b", "b"])
        >>> dist, ind = idx.kneighbors(np.array([[0.1, 0.9], [9.9, 10.8]]), n_neighbors=2)
        >>> ind.tolist(), dist.round(3).tolist()
        ([[1, 0], [3, 2]], [[0.141, 0.906], [0.224, 0.806]])

        Without X, the nearest *other* indexed row of every indexed row:

        >>> idx.kneighbors(n_neighbors=1, return_distance=False).ravel().tolist()
        [1, 0, 3, 2]
        """
        check_is_fitted(self, "index_")
        self._check_n_probe(self.index_.n_clusters)
        self._check_n_neighbors(n_neighbors, query_is_train=X is None)
        if X is None:
            return self._kneighbors_indexed(int(n_neighbors), return_distance)
        # in-memory queries: one block per core, views of X (no copy)
        Qd, lazy = self._validate(X, reset=False, row_chunks=query_block_rows)
        if lazy:  # NaN/inf: DataError when the block is computed (in memory: validated)
            Qd = checked_rows(Qd)
        probes = probe_clusters(self._assign(self.clusterer_, Qd, self.n_probe), self.n_probe)
        dist, ind = search(Qd, probes, self.index_, int(n_neighbors), self._centers)
        if not lazy:
            # one BLAS thread per task (engine.compute): the per-cluster products are small
            dist, ind = compute(dist, ind)
            dist, ind = np.asarray(dist), np.asarray(ind)
        return (dist, ind) if return_distance else ind

    def _check_n_neighbors(self, n_neighbors, *, query_is_train):
        owner = type(self).__name__
        hi = self.n_samples_fit_ - 1 if query_is_train else self.n_samples_fit_
        if not Interval(numbers.Integral, None, None).is_satisfied_by(n_neighbors):
            check_value("n_neighbors", n_neighbors, [Interval(numbers.Integral, 1, hi)],
                        f"{owner}.kneighbors")
        if n_neighbors < 1 or n_neighbors > hi:
            what = ("n_samples_fit - 1 (X=None: a row is not its own neighbour)"
                    if query_is_train else "n_samples_fit")
            raise InvalidParameterError(f"Expected n_neighbors <= {what}, but n_neighbors = "
                             f"{n_neighbors}, n_samples_fit = {self.n_samples_fit_}: the "
                             f"'n_neighbors' parameter of {owner}.kneighbors must be in the "
                             f"range [1, {hi}].")

    def _kneighbors_indexed(self, k, return_distance):
        """``kneighbors(None, k)``: every indexed row against the others."""
        index = self.index_
        if index.in_memory:
            Qd = to_dask(index.X, query_block_rows(index.n_samples), copy=False)
            ids = da.from_array(index.ids, chunks=(Qd.chunks[0],))
        else:
            g = index._open()
            Qd = to_dask(g[0])
            ids = to_dask(g[1], Qd.chunks[0])
        if self.n_probe == 1:  # the index holds every row in its own (predicted) cluster
            own = np.repeat(np.arange(index.n_clusters, dtype=np.int64), self.cluster_sizes_)
            probes = da.from_array(own[:, None], chunks=(Qd.chunks[0], 1))
        else:
            probes = probe_clusters(self._assign(self.clusterer_, Qd, self.n_probe),
                                    self.n_probe)
        dist, ind = search(Qd, probes, index, k + 1, self._centers)
        out = da.map_blocks(drop_self, dist, ind, ids[:, None], k,
                            chunks=(Qd.chunks[0], (2 * k,)), dtype=np.float64)
        # into memory, then from cluster order to the order of fit's X (a lazy
        # permutation would cost dask's take a task per pair of chunks)
        res, row_ids = compute(out, ids)
        res = np.asarray(res)
        ordered = np.empty_like(res)
        ordered[np.asarray(row_ids)] = res
        del res
        dist, ind = ordered[:, :k], ordered[:, k:].astype(np.int64)
        return (dist, ind) if return_distance else ind

    def kneighbors_graph(self, X=None, n_neighbors=1, mode="connectivity"):
        """The k-neighbours graph of the queries as a sparse matrix.

        Parameters
        ----------
        X : array-like, Dask or Zarr array of shape (n_queries, n_features), optional
            None: the graph of the indexed rows (a row is not its own
            neighbour), as :meth:`kneighbors`.
        n_neighbors : int, default=1
        mode : {'connectivity', 'distance'}, default='connectivity'
            Entries 1, or the Euclidean distances.

        Returns
        -------
        scipy.sparse.csr_matrix of shape (n_queries, n_samples_fit)
            ``n_neighbors`` entries per row (computed into memory also for
            lazy input), as :meth:`sklearn.neighbors.NearestNeighbors.kneighbors_graph`.

        Examples
        --------
        >>> import numpy as np, dqkm
        >>> from dqkm.neighbors import ClusterIndex
        >>> X = np.array([[0., 0.], [0., 1.], [10., 10.], [10., 11.]])
        >>> idx = ClusterIndex(dqkm.KMeans(2, random_state=0)).fit(X, y=["a", "a", "b", "b"])
        >>> idx.kneighbors_graph(n_neighbors=1).toarray()
        array([[0., 1., 0., 0.],
               [1., 0., 0., 0.],
               [0., 0., 0., 1.],
               [0., 0., 1., 0.]])
        """
        import scipy.sparse as sp

        if mode not in ("connectivity", "distance"):
            raise InvalidParameterError(
                f"The 'mode' parameter of {type(self).__name__}.kneighbors_graph must be a "
                f"str among {{'connectivity', 'distance'}}. Got {mode!r} instead.")
        dist, ind = self.kneighbors(X, n_neighbors, return_distance=True)
        if isinstance(ind, da.Array):
            dist, ind = compute(dist, ind)
        n_q, k = ind.shape
        data = np.ones(n_q * k) if mode == "connectivity" else np.asarray(dist).ravel()
        indptr = np.arange(0, n_q * k + 1, k, dtype=np.int64)
        return sp.csr_matrix((data, np.asarray(ind).ravel(), indptr),
                             shape=(n_q, self.n_samples_fit_))

    def predict(self, X):
        """1-NN classification: the target of every query's nearest indexed row.

        Parameters
        ----------
        X : array-like or Dask array of shape (n_queries, n_features)
            The queries.

        Returns
        -------
        y_pred : ndarray of shape (n_queries,) (Dask array for Dask input)
            The target of each query's nearest indexed row.

        Examples
        --------
        >>> import numpy as np, dqkm
        >>> from dqkm.neighbors import ClusterIndex
        >>> X = np.array([[0., 0.], [0., 1.], [10., 10.], [10., 11.]])
        >>> idx = ClusterIndex(dqkm.KMeans(2, random_state=0)).fit(X, y=["a", "a", "b", "b"])
        >>> idx.predict(np.array([[0.1, 0.9], [9.9, 10.8]])).tolist()
        ['a', 'b']
        """
        check_is_fitted(self, "index_")
        if not hasattr(self, "classes_"):
            raise NotFittedError(f"This {type(self).__name__} was fitted without targets; "
                                 "call fit(X, y) with y to use predict.")
        ind = self.kneighbors(X, 1, return_distance=False)
        if isinstance(ind, da.Array):
            st = broadcast(self._y_codes, "targets")
            cl = broadcast(self.classes_, "classes")
            return ind[:, 0].map_blocks(_lookup_block, st, cl, dtype=self.classes_.dtype,
                                        meta=np.empty((0,), self.classes_.dtype))
        return self.classes_[self._y_codes[ind[:, 0]]]

    # ------------------------------------------------------------- save/load
    def _get_state(self):
        """Arrays and scalars for :func:`dqkm.save`: the fitted clusterer (nested,
        unless it is the ``clusterer`` parameter itself), the index's offsets, and
        its rows when it is in memory — a Zarr-backed index is saved as its store's
        location (the rows stay there)."""
        from .data.paths import is_url as _is_url
        from .data.serialize import pack_model

        check_is_fitted(self, "index_")
        index = self.index_
        arrays = {"offsets": index.offsets}
        meta = {"n_samples_fit_": self.n_samples_fit_, "n_features_in_": self.n_features_in_,
                "clusterer_is_param": self.clusterer_ is self.clusterer, "index_store": None}
        if not meta["clusterer_is_param"]:
            header, nested = pack_model(self.clusterer_, _FITTED_PREFIX)
            meta["clusterer_"] = header
            arrays.update(nested)
        if index.in_memory:
            arrays.update(index_X=index.X, index_ids=index.ids, index_sq_norms=index.sq_norms)
        else:
            p = str(index.path)
            meta["index_store"] = p if _is_url(p) else os.path.abspath(p)
            meta["index_uid"] = index.uid
        if hasattr(self, "classes_"):
            arrays["y_codes"] = self._y_codes
            cl = self.classes_
            if cl.dtype.kind in "iufb":
                arrays["classes_"] = cl
            elif all(isinstance(c, str) for c in cl):  # text labels go in the JSON header
                meta["classes_"] = [str(c) for c in cl]
                meta["classes_dtype"] = cl.dtype.str
            else:
                raise TypeError(f"The targets of this {type(self).__name__} ({cl.dtype}) "
                                "cannot be saved without pickle: dqkm saves numeric and text "
                                "labels.")
        return arrays, meta

    def _set_state(self, arrays, meta):
        from .exceptions import ModelFileError
        from .data.serialize import unpack_model
        from .parallel.neighbors import InvertedIndex

        if meta["clusterer_is_param"]:
            clusterer = self.clusterer
        else:
            clusterer = unpack_model(meta["clusterer_"], arrays, _FITTED_PREFIX)
        offsets = np.asarray(arrays["offsets"], dtype=np.int64)
        store = meta["index_store"]
        if store is None:
            index = InvertedIndex(offsets, X=np.ascontiguousarray(arrays["index_X"]),
                                  ids=np.asarray(arrays["index_ids"], dtype=np.int64),
                                  sq_norms=np.asarray(arrays["index_sq_norms"], np.float64))
        else:
            try:
                index = InvertedIndex.open(store)
            except FileNotFoundError as e:
                raise FileNotFoundError(f"The saved {type(self).__name__} reads its index "
                                        f"from the Zarr store {store!r}, which is not there "
                                        "any more; refit it (fit writes the store).") from e
            if index.uid != meta.get("index_uid") or not np.array_equal(index.offsets, offsets):
                raise ModelFileError(f"The Zarr store {store!r} holds another index than the "
                                     f"saved {type(self).__name__}: it was rewritten "
                                     "since; refit.")
        self.clusterer_ = clusterer
        self._centers = np.asarray(clusterer.cluster_centers_)
        self.index_ = index
        self.cluster_sizes_ = np.diff(offsets)
        self.n_samples_fit_ = int(meta["n_samples_fit_"])
        self.n_features_in_ = int(meta["n_features_in_"])
        if "y_codes" in arrays:
            self.classes_ = (np.asarray(arrays["classes_"]) if "classes_" in arrays else
                             np.asarray(meta["classes_"], dtype=np.dtype(meta["classes_dtype"])))
            self._y_codes = np.asarray(arrays["y_codes"], dtype=np.int64)
        return self

    def score(self, X, y):
        """Accuracy of :meth:`predict` on ``(X, y)``.

        Parameters
        ----------
        X : array-like or Dask array of shape (n_queries, n_features)
            The queries.
        y : array-like of shape (n_queries,)
            The true targets.

        Returns
        -------
        float
            The fraction of queries whose predicted target is ``y``.

        Examples
        --------
        >>> import numpy as np, dqkm
        >>> from dqkm.neighbors import ClusterIndex
        >>> X = np.array([[0., 0.], [0., 1.], [10., 10.], [10., 11.]])
        >>> idx = ClusterIndex(dqkm.KMeans(2, random_state=0)).fit(X, y=["a", "a", "b", "b"])
        >>> idx.score(np.array([[0.1, 0.9], [9.9, 10.8]]), ["a", "a"])
        0.5
        """
        pred = self.predict(X)
        if isinstance(pred, da.Array):
            pred = compute(pred)[0]
        y = np.asarray(compute(y)[0] if isinstance(y, da.Array) else y)
        return float(np.mean(np.asarray(pred) == y))
