"""Lloyd's K-means on Dask arrays, with k-means++ and k-means‖ initialisation."""

from __future__ import annotations

import logging
from numbers import Integral, Real

import numpy as np
from sklearn.cluster import kmeans_plusplus
from sklearn.utils.validation import check_is_fitted

from ..parallel.engine import driver_blas, maybe_persist, release_persisted
from .._validation import (PERSIST, SPLIT_EVERY, VERBOSE, Interval, Options, check_n_samples,
                           validate_params)
from ..parallel.fingerprint import data_fingerprint
from ..parallel.finite import check_sample
from ..parallel.lloyd import (assign, center_distances, inertia, kmeans_parallel_init,
                              lloyd_step, min_sq_distances, sample_rows)
from ._base import DqkmClusterer
from ._checkpoint import identity_from_params
from ._driver import IterativeAlgorithm, run_fit

logger = logging.getLogger(__name__)

__all__ = ["KMeans", "LloydAlgorithm"]

_INIT_OPTIONS = {"k-means++", "k-means||", "random"}


class LloydAlgorithm(IterativeAlgorithm):
    """Lloyd's iterations of a :class:`KMeans` (or subclass) for the fit driver:
    the state is the centers, one step is one pass over X."""

    def __init__(self, estimator):
        self.estimator = estimator
        self.name = type(estimator).__name__
        self.max_iter, self.tol = estimator.max_iter, estimator.tol
        self.split_every = estimator.split_every

    def identity(self, X):
        """Every constructor parameter but ``persist`` and ``verbose``, X's shape,
        dtype, row chunks and fingerprint (one pass over X)."""
        return identity_from_params(self.estimator, X, fingerprint=data_fingerprint(
            X, split_every=self.split_every))

    def init_state(self, X, rng):
        return self.estimator._initial_centers(X, rng)

    def step(self, X, state, iteration, tol_abs):
        return lloyd_step(X, state, iteration, tol=self.tol, tol_abs=tol_abs,
                          split_every=self.split_every)

    def pack(self, state):
        return {"centers": np.asarray(state)}

    def unpack(self, arrays):
        return arrays["centers"]

    def finalize(self, X, result):
        # With a zero shift the last pass already used the final centers.
        if result.shift == 0:
            return result.last_objective
        return inertia(X, result.state, split_every=self.split_every)


class KMeans(DqkmClusterer):
    """K-means clustering (Lloyd's algorithm) on in-memory or out-of-core data.

    Each iteration is one pass over X: the centers are broadcast once, every
    chunk computes its labels, per-cluster sums (float64), counts and its part
    of the objective in one fused kernel, and the partials are tree-reduced.
    Memory per worker: a few chunks of X plus K×D float64 partials.

    Parameters
    ----------
    n_clusters : int, default=8
    init : {'k-means++', 'k-means||', 'random'} or ndarray of shape (n_clusters, n_features)
        'k-means++' runs scikit-learn's k-means++ on the driver over a uniform
        sample of ``max(10 * n_clusters, 10_000)`` rows (all rows when X is
        smaller); 'k-means||' is the distributed k-means‖ of Bahmani et al.
        (``init_max_iter`` rounds, ``oversampling_factor``·K expected
        candidates per round, one pass each); 'random' picks K distinct rows.
    n_init : 'auto' or int, default='auto'
        Number of initialisations; the run with the lowest inertia is kept.
        'auto' is 1, or 10 for ``init='random'`` (scikit-learn's rule).
    max_iter : int, default=300
    tol : float, default=1e-4
        Relative tolerance (scikit-learn's meaning): stop when the sum of
        squared center shifts is at most ``tol`` × the mean feature variance.
    random_state : int, RandomState instance or None
    persist : 'auto', bool, default='auto'
        Keep X in the workers' memory for the iterations.  'auto' persists when
        X takes at most half the cluster's memory; otherwise X is re-read from
        its source (Zarr) every pass.
    split_every : int or None, default=None
        Fan-in of the tree reduction (None: 8).
    oversampling_factor : float, default=2.0
        k-means‖ only: expected candidates per round, as a multiple of K.
    init_max_iter : int or None, default=None
        k-means‖ only: number of sampling rounds (None: 5, as Bahmani et al.).
    verbose : int, default=0
        0: silent; 1: one line per iteration (iteration, objective, shift
        against the tolerance, seconds) on stderr; 2: also Dask's progress
        bar for every pass (see :mod:`dqkm.progress`).

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
    labels_ : ndarray of shape (n_samples,) or Dask array (lazy, aligned with X)
    inertia_ : float
        Sum of squared distances of the samples to their closest center
        (computed exactly, in float64, with the final centers).
    n_iter_ : int
    n_features_in_ : int
    history_ : list of dict
        One dict per iteration: ``iteration``, ``objective`` (the inertia of
        that iteration's labels w.r.t. the centers it started from),
        ``shift`` (sum of squared center moves), ``seconds``,
        ``empty_clusters`` (indices of clusters that kept their previous
        center because no point was assigned to them).

    References
    ----------
    Lloyd (1982), Least squares quantization in PCM.
    Arthur & Vassilvitskii (2007), k-means++: the advantages of careful seeding.
    Bahmani et al. (2012), Scalable k-means++ (k-means‖).

    Examples
    --------
    >>> import numpy as np, dqkm
    >>> X = np.array([[0., 0.], [0., 1.], [10., 10.], [10., 11.]])
    >>> km = dqkm.KMeans(n_clusters=2, random_state=0).fit(X)
    >>> sorted(km.cluster_centers_[:, 1].tolist())
    [0.5, 10.5]
    """

    _parameter_constraints = {
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "init": [Options(str, _INIT_OPTIONS), "array-like"],
        "n_init": [Options(str, {"auto"}), Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "random_state": ["random_state"],
        "persist": PERSIST,
        "split_every": SPLIT_EVERY,
        "oversampling_factor": [Interval(Real, 0, None, closed="left")],
        "init_max_iter": [Interval(Integral, 1, None, closed="left"), None],
        "verbose": VERBOSE,
    }

    def __init__(self, n_clusters=8, *, init="k-means++", n_init="auto", max_iter=300,
                 tol=1e-4, random_state=None, persist="auto", split_every=None,
                 oversampling_factor=2.0, init_max_iter=None, verbose=0):
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.persist = persist
        self.split_every = split_every
        self.oversampling_factor = oversampling_factor
        self.init_max_iter = init_max_iter
        self.verbose = verbose

    # ------------------------------------------------------------------ params
    def _check_params(self, n_samples):
        """The data-dependent checks (after :func:`validate_params`); the number of runs."""
        check_n_samples(n_samples, self.n_clusters)
        if self.n_init == "auto":
            return 10 if isinstance(self.init, str) and self.init == "random" else 1
        if not isinstance(self.init, str):
            return 1  # scikit-learn warns and runs once with an explicit init
        return self.n_init

    # ---------------------------------------------------------------- fitting
    def _initial_centers(self, X, rng):
        K = self.n_clusters
        if not isinstance(self.init, str):
            init = self._check_init_array(self.init, K, X.shape[1], type(self).__name__)
            check_sample(init, what=f"The 'init' array of {type(self).__name__}")
            return init.astype(X.dtype)
        if self.init == "k-means||":
            rounds = 5 if self.init_max_iter is None else self.init_max_iter
            return kmeans_parallel_init(X, K, rng=rng,
                                        oversampling_factor=self.oversampling_factor,
                                        n_rounds=rounds, split_every=self.split_every)
        if self.init == "random":
            return sample_rows(X, K, rng).astype(X.dtype)
        # CSR-chunked X: the sample stays sparse (scikit-learn's k-means++ takes CSR)
        sample = sample_rows(X, max(10 * K, 10_000), rng, dense=False)
        check_sample(sample)  # NaN, infinity, or squares that overflow float64
        with driver_blas():
            centers, _ = kmeans_plusplus(sample.astype(np.float64), K,
                                         random_state=int(rng.integers(2**31 - 1)))
        return centers.astype(X.dtype)

    def fit(self, X, y=None, *, callback=None, checkpoint=None, resume=False):
        """Compute K-means clustering.

        Parameters
        ----------
        X : array-like, Dask array or Zarr array of shape (n_samples, n_features)
        y : ignored
        callback : callable, optional
            ``callback(record, state)`` after every iteration (``record`` is
            the iteration's ``history_`` entry; ``state`` the new centers, or
            factors for QK-means) — e.g. for a live plot.
        checkpoint : str or PathLike, optional
            A local directory where the driver state (centers or factors,
            iteration, RNG state, history) is written as a Zarr group after
            every iteration, atomically.  It must be new, empty or a dqkm
            checkpoint (which a fit with ``resume=False`` replaces); a file,
            another non-empty directory, or a path that is, contains or lies
            inside the input store is refused with a ``CheckpointError``.  The
            fit locks it (a second fit on it gets a ``CheckpointError`` naming
            the host and pid of the first) and records its identity: every
            constructor parameter but ``persist`` and ``verbose``, and X's
            shape, dtype, row chunks and fingerprint (per-chunk row counts and float64 column
            sums: one extra pass over X, made only with a checkpoint).
        resume : bool, default=False
            Continue from ``checkpoint`` if it holds a state (in the run and
            after the iteration it was written); the result is the
            same as an uninterrupted fit with the same seed.  A checkpoint of
            another estimator, other parameters or other data is refused with
            a ``CheckpointMismatchError``, a damaged one (a missing or altered
            array, file or state) with a ``CheckpointError``, and one written
            by an older dqkm (another checkpoint format) with a
            ``CheckpointMismatchError`` saying to fit with ``resume=False``.

        Returns
        -------
        self
        """
        return self._fit(X, callback=callback, checkpoint=checkpoint, resume=resume)

    def _fit(self, X, *, callback, checkpoint, resume, inputs=None, compose=None):
        """Validate X and the parameters, run the fit driver, set the fitted state.

        ``inputs`` is X as the user gave it (default ``X``: the stores the
        checkpoint must stay apart from); ``compose(algorithm)`` returns the
        algorithm the driver runs in place of this estimator's own (an
        estimator running K-means on data of its own names itself there).
        """
        validate_params(self)
        Xd, lazy = self._validate_X(X, reset=True)
        n_init = self._check_params(Xd.shape[0])
        self._check_extra_params(Xd.shape[1])
        Xd, persisted = maybe_persist(Xd, self.persist)
        algorithm = self._algorithm(Xd.shape[1])
        if compose is not None:
            algorithm = compose(algorithm)
        fit = run_fit(algorithm, Xd, n_init=n_init, random_state=self.random_state,
                      callback=callback, verbose=self.verbose, checkpoint=checkpoint,
                      resume=resume, inputs=X if inputs is None else inputs)
        self._set_fitted(Xd, lazy, fit.value, fit.result)
        release_persisted(self, persisted)
        return self

    # The pieces below are what the K-means family (KMeansL1, QKMeans) overrides.
    def _check_extra_params(self, n_features):
        """Validate the parameters a subclass adds (none for KMeans)."""

    def _algorithm(self, n_features):
        """The protocol object the fit driver runs (see :mod:`dqkm.cluster._driver`)."""
        return LloydAlgorithm(self)

    def _set_fitted(self, Xd, lazy, value, res):
        self.cluster_centers_ = res.state
        self.inertia_ = float(value)
        self.n_iter_ = int(res.n_iter)
        self.history_ = res.history
        self.labels_ = self._output(assign(Xd, self.cluster_centers_), lazy)

    # ------------------------------------------------------------- inference
    def predict(self, X):
        """Index of the closest center of each sample (blockwise on any size).

        A block of X holding NaN or infinity, or values whose squared
        distances overflow float64, raises :class:`~dqkm.exceptions.DataError`
        (for Dask input: when that block is computed).

        Parameters
        ----------
        X : array-like, Dask array, Zarr array or store path of shape (n_samples, n_features)
            NumPy in gives NumPy out; Dask in gives a lazy Dask array aligned with
            X's row chunks.

        Returns
        -------
        labels : ndarray or Dask array of shape (n_samples,), int
            Index of the cluster of each sample.
        """
        check_is_fitted(self)
        Xd, lazy = self._validate_X(X, reset=False)
        return self._output(assign(Xd, self.cluster_centers_.astype(Xd.dtype)), lazy)

    def transform(self, X):
        """Euclidean distances to every center, shape (n_samples, n_clusters).

        Refuses X as :meth:`predict` does.

        Parameters
        ----------
        X : array-like, Dask array, Zarr array or store path of shape (n_samples, n_features)
            NumPy in gives NumPy out; Dask in gives a lazy Dask array aligned with
            X's row chunks.

        Returns
        -------
        distances : ndarray or Dask array of shape (n_samples, n_clusters)
        """
        check_is_fitted(self)
        Xd, lazy = self._validate_X(X, reset=False)
        return self._output(center_distances(Xd, self.cluster_centers_.astype(Xd.dtype)), lazy)

    def score(self, X, y=None):
        """Opposite of the inertia of X on the fitted centers (higher is better).

        Refuses X as :meth:`predict` does, naming the first row concerned.

        Parameters
        ----------
        X : array-like, Dask array, Zarr array or store path of shape (n_samples, n_features)
            NumPy in gives NumPy out; Dask in gives a lazy Dask array aligned with
            X's row chunks.
        y : ignored

        Returns
        -------
        float
            Minus the sum of squared distances to the nearest centers.
        """
        check_is_fitted(self)
        Xd, lazy = self._validate_X(X, reset=False)
        if lazy:
            return -inertia(Xd, self.cluster_centers_.astype(Xd.dtype),
                            split_every=self.split_every)
        mind = self._output(min_sq_distances(Xd, self.cluster_centers_.astype(Xd.dtype)), False)
        return -float(mind.sum())

    # ------------------------------------------------------------- save/load
    def _get_state(self):
        check_is_fitted(self)
        arrays = {"cluster_centers_": self.cluster_centers_}
        if isinstance(getattr(self, "labels_", None), np.ndarray):  # none once reloaded if lazy
            arrays["labels_"] = self.labels_
        meta = {"inertia_": self.inertia_, "n_iter_": self.n_iter_,
                "n_features_in_": self.n_features_in_, "history_": self.history_}
        return arrays, meta

    def _set_state(self, arrays, meta):
        self.cluster_centers_ = arrays["cluster_centers_"]
        if "labels_" in arrays:
            self.labels_ = arrays["labels_"]
        for k, v in meta.items():
            setattr(self, k, v)
        return self

    def __sklearn_is_fitted__(self):
        return hasattr(self, "cluster_centers_")

    @property
    def _n_features_out(self):
        return self.n_clusters


