"""Lloyd's K-means on Dask arrays, with k-means++ and k-means‖ initialisation."""

from __future__ import annotations

import inspect
import logging
import warnings
from functools import partial
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.cluster import kmeans_plusplus
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ..parallel.bounds import BoundedPasses, choose_algorithm
from ..parallel.engine import active_client, driver_blas
from ..parallel.persist import maybe_persist, release_persisted, releases_persisted
from ..exceptions import InvalidParameterError
from .._validation import (PERSIST, SPLIT_EVERY, VERBOSE, Interval, Options, check_n_samples,
                           validate_params)
from ..parallel.fingerprint import data_fingerprint
from ..parallel.finite import check_sample
from ..parallel.lloyd import assign, inertia, labels_and_inertia, lloyd_step
from ..parallel.sampling import kmeans_parallel_init, sample_rows, weighted_sample_rows
from ..parallel.relocate import relocate_empty_clusters
from ._base import CenterInference, DqkmClusterer, validate_sample_weight
from ._checkpoint import identity_from_params
from ._driver import IterativeAlgorithm, run_fit, supports_sample_weight

logger = logging.getLogger(__name__)

__all__ = ["KMeans", "LloydAlgorithm"]

_INIT_OPTIONS = {"k-means++", "k-means||", "random"}


class LloydAlgorithm(IterativeAlgorithm):
    """Lloyd's iterations of a :class:`KMeans` (or subclass) for the fit driver:
    the state is the centers, one step is one pass over X.

    ``sample_weight`` is None or the fit's weights: a float64 Dask array of
    shape (n_samples,) with X's row chunks, read by every pass.
    """

    supports_sample_weight = True

    def __init__(self, estimator):
        self.estimator = estimator
        self.name = type(estimator).__name__
        self.max_iter, self.tol = estimator.max_iter, estimator.tol
        self.split_every = estimator.split_every
        self.algorithm = getattr(estimator, "algorithm", "lloyd")
        if self.algorithm == "elkan" and estimator.n_clusters == 1:
            warnings.warn("algorithm='elkan' doesn't make sense for a single cluster. Using "
                          "'lloyd' instead.", RuntimeWarning, stacklevel=4)
            self.algorithm = "lloyd"
        self.empty_clusters = getattr(estimator, "empty_clusters", "keep")
        self.sample_weight = None
        self._passes = None  # the bound-pruned passes and their per-row state
        # finalize computes the labels with the inertia (one pass) for a fit that keeps them
        self.with_labels = False
        self._last_labels = None  # (centers, labels) of the last Lloyd pass when kept
        self.bounds_directory = None  # where bounds in files go (the fit's checkpoint dir)

    def identity(self, X):
        """Every constructor parameter but ``persist``, ``verbose``, ``copy_x`` and
        ``algorithm`` (they do not change the result: the bounds are rebuilt on resume), X's
        shape, dtype, row chunks and fingerprint (one pass over X), and the
        weights' fingerprint when the fit has weights."""
        extra = {}
        if self.sample_weight is not None:
            extra["sample_weight"] = data_fingerprint(self.sample_weight[:, None])
        return identity_from_params(self.estimator, X, ignored=("algorithm", "copy_x"),
                                    fingerprint=data_fingerprint(X, split_every=self.split_every),
                                    **extra)

    def _bounded(self, X):
        """The :class:`~dqkm.parallel.bounds.BoundedPasses` of X, or None for Lloyd."""
        kind = choose_algorithm(self.algorithm, X, self.estimator.n_clusters)
        if kind == "lloyd":
            return None
        if self._passes is None or self._passes.X is not X or self._passes.kind != kind:
            self.close()
            self._passes = BoundedPasses(X, kind, split_every=self.split_every,
                                         sample_weight=self.sample_weight,
                                         directory=self.bounds_directory)
        return self._passes

    def begin_run(self, rng):
        self._last_labels = None
        if self._passes is not None:
            self._passes.reset()

    def close(self):
        if self._passes is not None:
            self._passes.close()
            self._passes = None

    def init_state(self, X, rng):
        return self.estimator._initial_centers(X, rng, sample_weight=self.sample_weight)

    def step(self, X, state, iteration, tol_abs):
        passes = self._bounded(X)
        if passes is not None:
            return passes.step(state, iteration, tol=self.tol, tol_abs=tol_abs,
                               relocate=self._relocation(X))
        return lloyd_step(X, state, iteration, tol=self.tol, tol_abs=tol_abs,
                          split_every=self.split_every, sample_weight=self.sample_weight,
                          relocate=self._relocation(X),
                          # kept here they cost nothing; as futures ~10 % of a small pass
                          on_labels=self._keep_labels
                          if self.with_labels and active_client() is None else None)

    def _keep_labels(self, centers, labels):
        self._last_labels = (centers, labels)

    def _relocation(self, X):
        """The steps' ``relocate`` hook: None ('keep') or scikit-learn's relocation
        of empty clusters to the farthest rows ('relocate', one extra pass over X
        after a pass that left a cluster empty)."""
        if self.empty_clusters != "relocate":
            return None
        return partial(relocate_empty_clusters, X, sample_weight=self.sample_weight,
                       split_every=self.split_every)

    def pack(self, state):
        return {"centers": np.asarray(state)}

    def unpack(self, arrays):
        return arrays["centers"]

    def finalize(self, X, result):
        # With a zero shift the last pass already used the final centers (and, for a fit
        # that keeps its labels, gave them); kept bounds spare the rows they settle.
        last, self._last_labels = self._last_labels, None  # only kept with_labels
        if result.shift == 0 and last is not None and np.array_equal(last[0], result.state):
            return result.last_objective, last[1]
        if result.shift == 0 and not self.with_labels:
            return result.last_objective
        passes = self._passes
        if passes is not None and passes.X is X and passes.valid_for is not None:
            labels, value = passes.labels_and_inertia(result.state)
        elif self.with_labels:
            labels, value = labels_and_inertia(X, result.state, split_every=self.split_every,
                                               sample_weight=self.sample_weight)
        else:
            return inertia(X, result.state, split_every=self.split_every,
                           sample_weight=self.sample_weight)
        value = result.last_objective if result.shift == 0 else value
        return (value, labels) if self.with_labels else value


class KMeans(CenterInference, DqkmClusterer):
    """K-means clustering (Lloyd's algorithm) on in-memory or out-of-core data.

    Each iteration is one pass over X: the centers are broadcast once, every
    chunk computes its labels, per-cluster sums (float64), counts and its part
    of the objective in one fused kernel, and the partials are tree-reduced.
    Memory per worker: a few chunks of X plus K×D float64 partials.

    X may be dense (NumPy, Dask, Zarr) or sparse: a ``scipy.sparse`` CSR (or
    COO) matrix or array, or a Dask array of CSR row chunks (see
    :mod:`dqkm.sparse`); sparse chunks go through the CSR Lloyd kernel
    (``dqkm/kernels/lloyd_sparse.py``), with the results of the dense path.

    ``fit`` and ``score`` take ``sample_weight``: every sum, count, objective,
    variance (for ``tol``) and the initialisation are weighted as in
    scikit-learn, so integer weights give the fit of the repeated rows and
    zero weights that of the rows removed.

    Parameters
    ----------
    n_clusters : int, default=8
    init : {'k-means++', 'k-means||', 'random'}, callable or ndarray of shape (n_clusters, n_features)
        'k-means++' runs scikit-learn's k-means++ on the driver over a uniform
        sample of ``max(10 * n_clusters, 10_000)`` rows (all rows when X is
        smaller; with weights, the sample's rows keep their weights);
        'k-means||' is the distributed k-means‖ of Bahmani et al.
        (``init_max_iter`` rounds, ``oversampling_factor``·K expected
        candidates per round, one pass each); 'random' picks K distinct rows
        (by weight, with ``sample_weight``).  A callable is called as
        ``init(X_sample, n_clusters, random_state)`` and must return the
        centers, shape (n_clusters, n_features): ``X_sample`` is X itself
        (NumPy or CSR) when X was given in memory, and for Dask or Zarr input
        a uniform sample of ``max(10 * n_clusters, 10_000)`` rows of it,
        loaded in memory (all rows when X is smaller); ``random_state`` is a
        ``numpy.random.RandomState`` drawn from the fit's seed.
    n_init : 'auto' or int, default='auto'
        Number of initialisations; the run with the lowest inertia is kept.
        'auto' is 1, or 10 for ``init='random'`` or a callable
        (scikit-learn's rule).  An init array runs once: every run would
        start from it (an integer other than 1 gets scikit-learn's
        RuntimeWarning, 'auto' none).
    max_iter : int, default=300
    tol : float, default=1e-4
        Relative tolerance (scikit-learn's meaning): stop when the sum of
        squared center shifts is at most ``tol`` × the mean feature variance.
    algorithm : {'lloyd', 'elkan', 'hamerly', 'auto'}, default='lloyd'
        How each iteration assigns the rows (scikit-learn's parameter).  'lloyd'
        computes every row-center distance.  'hamerly' (Hamerly 2010: one upper
        and one lower bound per row) and 'elkan' (Elkan 2003: one lower bound
        per row and center) keep exact triangle-inequality bounds from one
        pass to the next and skip the distances they prove useless: the labels,
        centers, inertia and ``n_iter_`` are those of 'lloyd'.  The bounds are
        per-row state aligned with X's row chunks, held in the workers'
        memory when X is persisted and in files beside the data (under the
        fit's ``checkpoint`` directory when given, else in a temporary
        directory; either way the fit removes what it wrote) when X is re-read
        every pass; a block whose state is lost, and every block after a resume, is
        assigned by a full scan.  Memory: 20 bytes per row ('hamerly'), ``12 + 8·n_clusters``
        ('elkan').  'auto' is 'hamerly' where n_features ≤ 64 and n_clusters ≥ 128, or
        n_clusters ≥ 32 and n_features ≥ 4, or n_clusters ≥ 16 and n_features ≥ 24; else
        'lloyd' (``dqkm.parallel.bounds.choose_algorithm``).  Pruning is for dense input:
        CSR input runs 'lloyd', and so does float32 input with more than 32 features
        (where the Lloyd pass's float32 GEMM rounds
        near-ties otherwise than the exact distances the bounds are checked
        against).  Elsewhere the Lloyd kernels decide near-ties by the exact
        float64 distances too, so the labels are identical.  ``history_``
        records then also hold ``skipped``, the share of row-center distances
        not computed.
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
        against the tolerance, seconds) on stderr, and scikit-learn's lines
        on stdout ("Initialization complete", "Iteration N, inertia X",
        "Converged at iteration N: ..."); 2: also Dask's progress bar for
        every pass (see :mod:`dqkm.progress`).
    copy_x : bool, default=True
        scikit-learn's parameter, accepted for compatibility: dqkm never
        modifies X (it neither centers X in place nor writes to it), so
        ``copy_x=False`` and ``True`` give the same fit and leave X as given.
    empty_clusters : {'keep', 'relocate'}, default='keep'
        What an iteration does with a cluster that received no point (or only
        points of weight 0).  'keep': it keeps its previous center and is
        listed in the iteration's ``history_`` record under
        ``empty_clusters``; it may win points back in a later iteration.
        'relocate': scikit-learn's rule (its 'lloyd' and 'elkan'
        iterations): the empty clusters, in increasing index, take the rows
        farthest from their assigned centers (largest squared distance first,
        ties by lower row index), each row's weighted contribution moving out
        of its old cluster's sum and weight; no row moves when every row sits
        on its center (more clusters than distinct points), and a cluster of
        weight 0 afterwards gets the center of the heaviest cluster.  This
        costs one extra pass over X after each pass that left a cluster empty
        (the top rows by distance of every chunk, merged on the driver, then
        those rows read), none otherwise.  Works with every ``algorithm``: the
        bounds move by each center's exact shift, a relocated one's included.
        The records of such iterations also hold ``relocated`` (the clusters
        that received a row) and ``empty_after_relocation``.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
    labels_ : ndarray of shape (n_samples,) or Dask array (lazy, aligned with X)
    inertia_ : float
        Sum of squared distances of the samples to their closest center
        (computed exactly, in float64, with the final centers), weighted by
        ``sample_weight`` when the fit had weights.
    n_iter_ : int
    n_features_in_ : int
    history_ : list of dict
        One dict per iteration: ``iteration``, ``objective`` (the inertia of
        that iteration's labels w.r.t. the centers it started from),
        ``shift`` (sum of squared center moves), ``seconds``,
        ``empty_clusters`` (indices of clusters to which no point, or only
        points of weight 0, was assigned: they kept their previous center, or
        were relocated with ``empty_clusters='relocate'``).

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
        "init": [Options(str, _INIT_OPTIONS), "callable", "array-like"],
        "n_init": [Options(str, {"auto"}), Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "algorithm": [Options(str, {"lloyd", "elkan", "hamerly", "auto"})],
        "random_state": ["random_state"],
        "persist": PERSIST,
        "split_every": SPLIT_EVERY,
        "oversampling_factor": [Interval(Real, 0, None, closed="left")],
        "init_max_iter": [Interval(Integral, 1, None, closed="left"), None],
        "verbose": VERBOSE,
        "copy_x": ["boolean"],
        "empty_clusters": [Options(str, {"keep", "relocate"})],
    }

    _accept_sparse = True

    def __init_subclass__(cls, **kwargs):
        """A subclass whose constructor does not take ``copy_x`` or
        ``empty_clusters`` (QKMeans, KMeansL1) drops them from the parameter
        table it copied from KMeans."""
        super().__init_subclass__(**kwargs)
        table = cls.__dict__.get("_parameter_constraints")
        if table is not None:
            taken = inspect.signature(cls.__init__).parameters
            drop = {k for k in ("copy_x", "empty_clusters") if k in table and k not in taken}
            if drop:
                cls._parameter_constraints = {k: v for k, v in table.items() if k not in drop}

    def __init__(self, n_clusters=8, *, init="k-means++", n_init="auto", max_iter=300,
                 tol=1e-4, algorithm="lloyd", random_state=None, persist="auto", split_every=None,
                 oversampling_factor=2.0, init_max_iter=None, verbose=0, copy_x=True,
                 empty_clusters="keep"):
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.algorithm = algorithm
        self.random_state = random_state
        self.persist = persist
        self.split_every = split_every
        self.oversampling_factor = oversampling_factor
        self.init_max_iter = init_max_iter
        self.verbose = verbose
        self.copy_x = copy_x
        self.empty_clusters = empty_clusters

    # ------------------------------------------------------------------ params
    def _check_params(self, n_samples):
        """The data-dependent checks (after :func:`validate_params`); the number of runs."""
        check_n_samples(n_samples, self.n_clusters)
        if self.n_init == "auto":
            random = isinstance(self.init, str) and self.init == "random"
            return 10 if random or callable(self.init) else 1
        if not isinstance(self.init, str) and not callable(self.init):
            self._warn_explicit_init(self.init, self.n_init, type(self).__name__)
            return 1  # every run would start from the same centers
        return self.n_init

    # ---------------------------------------------------------------- fitting
    def _initial_centers(self, X, rng, sample_weight=None):
        """The initial centers (K × D in X's dtype); ``sample_weight`` is None or
        the fit's weights (a Dask array with X's row chunks)."""
        K, owner = self.n_clusters, type(self).__name__
        if callable(self.init):
            return self._callable_centers(X, rng)
        if not isinstance(self.init, str):
            init = self._check_init_array(self.init, K, X.shape[1], owner)
            check_sample(init, what=f"The 'init' array of {owner}")
            return init.astype(X.dtype)
        if self.init == "k-means||":
            rounds = 5 if self.init_max_iter is None else self.init_max_iter
            return kmeans_parallel_init(X, K, rng=rng,
                                        oversampling_factor=self.oversampling_factor,
                                        n_rounds=rounds, split_every=self.split_every,
                                        sample_weight=sample_weight)
        if self.init == "random":
            if sample_weight is not None:
                return weighted_sample_rows(X, sample_weight, K, rng).astype(X.dtype)
            return sample_rows(X, K, rng).astype(X.dtype)
        # CSR-chunked X: the sample stays sparse (scikit-learn's k-means++ takes CSR)
        size = max(10 * K, 10_000)
        weights = None
        if sample_weight is None:
            sample = sample_rows(X, size, rng, dense=False)
        else:
            sample, weights = sample_rows(X, size, rng, dense=False,
                                          sample_weight=sample_weight)
            if np.count_nonzero(weights) < K:  # too few weighted rows drawn: draw by weight
                sample = weighted_sample_rows(X, sample_weight, size, rng, dense=False)
                weights = None
        check_sample(sample)  # NaN, infinity, or squares that overflow float64
        with driver_blas():
            centers, _ = kmeans_plusplus(sample.astype(np.float64), K, sample_weight=weights,
                                         random_state=int(rng.integers(2**31 - 1)))
        return centers.astype(X.dtype)

    def _callable_centers(self, X, rng):
        """``init(X_sample, n_clusters, random_state)``: see the ``init`` parameter."""
        K, owner = self.n_clusters, type(self).__name__
        sample = sample_rows(X, max(10 * K, 10_000), rng, dense=False)
        if sp.issparse(sample):
            sample = sp.csr_matrix(sample)
        state = check_random_state(int(rng.integers(2**31 - 1)))
        centers = self.init(sample, K, random_state=state)
        if sp.issparse(centers):
            centers = centers.toarray()
        centers = self._check_init_array(centers, K, X.shape[1], owner)
        check_sample(centers, what=f"The centers returned by the 'init' callable of {owner}")
        return centers.astype(X.dtype)

    def fit(self, X, y=None, sample_weight=None, *, callback=None, checkpoint=None,
            resume=False):
        """Compute K-means clustering.

        Parameters
        ----------
        X : array-like, scipy.sparse, Dask array or Zarr array of shape (n_samples, n_features)
        y : ignored
        sample_weight : array-like or Dask array of shape (n_samples,), optional
            Non-negative weight of every row (None: all 1).  Dask weights are
            rechunked to X's row chunks; NaN, infinity, negative values, a
            wrong length or all zeros raise a
            :class:`~dqkm.exceptions.DataError`.  The weights' fingerprint is
            part of a checkpoint's identity.
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

        Warns
        -----
        ConvergenceWarning
            When fewer than ``n_clusters`` clusters hold points at the end (X
            has fewer distinct points, or a cluster lost its points and kept its
            center), in scikit-learn's words; counted from the last iteration's
            ``empty_clusters`` (its ``empty_after_relocation`` with
            ``empty_clusters='relocate'``).
        RuntimeWarning
            An init array with an integer ``n_init`` other than 1 (one run is made).

        Examples
        --------
        >>> import os, tempfile
        >>> import numpy as np, dqkm
        >>> X = np.array([[0., 0.], [0., 1.], [10., 10.], [10., 11.]])
        >>> objectives = []
        >>> km = dqkm.KMeans(n_clusters=2, random_state=0).fit(
        ...     X, callback=lambda record, state: objectives.append(record["objective"]))
        >>> km.cluster_centers_[np.argsort(km.cluster_centers_[:, 0])]
        array([[ 0. ,  0.5],
               [10. , 10.5]])
        >>> objectives == [record["objective"] for record in km.history_]
        True

        A fit that writes a checkpoint after every iteration (``resume=True``
        continues it after an interruption) ends where the plain fit does:

        >>> with tempfile.TemporaryDirectory() as d:
        ...     ck = dqkm.KMeans(n_clusters=2, random_state=0).fit(
        ...         X, checkpoint=os.path.join(d, "ckpt"), resume=True)
        >>> bool(np.array_equal(ck.cluster_centers_, km.cluster_centers_))
        True
        """
        return self._fit(X, callback=callback, checkpoint=checkpoint, resume=resume,
                         sample_weight=sample_weight)

    def _fit(self, X, *, callback, checkpoint, resume, inputs=None, compose=None,
             sample_weight=None):
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
        w = validate_sample_weight(sample_weight, Xd, type(self).__name__)
        if w is not None:
            if not supports_sample_weight(algorithm):
                raise InvalidParameterError(
                    f"{type(self).__name__}.fit does not take sample_weight yet: its "
                    "iterations do not read weights. Fit without sample_weight, or repeat "
                    "rows to weigh them.")
            algorithm.sample_weight = w
        if isinstance(algorithm, LloydAlgorithm):
            if checkpoint is not None:
                algorithm.bounds_directory = str(checkpoint)  # bounds in files go there
            # labels_ are computed now (not lazily on X) when X is released after the fit
            algorithm.with_labels = releases_persisted(persisted)
        if compose is not None:
            algorithm = compose(algorithm)
        fit = run_fit(algorithm, Xd, n_init=n_init, random_state=self.random_state,
                      callback=callback, verbose=self.verbose, checkpoint=checkpoint,
                      resume=resume, inputs=X if inputs is None else inputs)
        self._set_fitted(Xd, lazy, fit.value, fit.result, labels=fit.labels)
        release_persisted(self, persisted)
        self._warn_few_clusters(fit.result.history)
        return self

    def _warn_few_clusters(self, history):
        """scikit-learn's ConvergenceWarning when fewer clusters than ``n_clusters``
        hold points, counted from the last iteration's ``empty_clusters`` (what
        the fit already knows: no pass over X).  Those are the final labels'
        empty clusters when the last iteration moved no center (e.g. X has
        fewer distinct points than ``n_clusters``)."""
        if not history or "empty_clusters" not in history[-1]:
            return
        last = history[-1]
        empty = last.get("empty_after_relocation", last["empty_clusters"])
        distinct = self.n_clusters - len(empty or ())
        if distinct < self.n_clusters:
            rule = ("left with weight 0 after relocation" if "empty_after_relocation" in last
                    else "that lost its points (an empty cluster keeps its previous center)")
            warnings.warn(f"Number of distinct clusters ({distinct}) found smaller than "
                          f"n_clusters ({self.n_clusters}). Possibly due to duplicate points "
                          f"in X, or a cluster {rule}.", ConvergenceWarning, stacklevel=4)

    # The pieces below are what the K-means family (KMeansL1, QKMeans) overrides.
    def _check_extra_params(self, n_features):
        """Validate the parameters a subclass adds (none for KMeans)."""

    def _algorithm(self, n_features):
        """The protocol object the fit driver runs (see :mod:`dqkm.cluster._driver`)."""
        return LloydAlgorithm(self)

    def _set_fitted(self, Xd, lazy, value, res, labels=None):
        """The fitted attributes; ``labels`` are the final labels when the fit's
        last pass computed them (else they are a lazy pass over ``Xd``)."""
        self.cluster_centers_ = res.state
        self.inertia_ = float(value)
        self.n_iter_ = int(res.n_iter)
        self.history_ = res.history
        if labels is None:
            labels = assign(Xd, self.cluster_centers_)
        self.labels_ = self._output(labels, lazy)

    # predict, transform, score: CenterInference (dqkm.cluster._base)

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


