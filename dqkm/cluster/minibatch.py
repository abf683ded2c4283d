"""Mini-batch K-means streaming over out-of-core data, and ``partial_fit``."""

from __future__ import annotations

import time
import warnings
from numbers import Integral, Real

import dask.array as da
import numpy as np
import scipy.sparse as sp
from sklearn.cluster import kmeans_plusplus
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ..kernels.minibatch import minibatch_step
from ..parallel.engine import compute, driver_blas
from ..parallel.finite import check_sample
from ..parallel.lloyd import assign, inertia
from ..parallel.sampling import sample_rows
from ..parallel.stream import iter_blocks
from ..parallel.fingerprint import data_fingerprint
from .._validation import (VERBOSE, Interval, Options, check_n_samples, check_value,
                           validate_params)
from ._base import CenterInference, DqkmClusterer, validate_sample_weight
from ._checkpoint import identity_from_params
from ._driver import IterativeAlgorithm, run_fit

__all__ = ["MiniBatchKMeans"]

_INIT_OPTIONS = {"k-means++", "random"}


class MiniBatchKMeans(CenterInference, DqkmClusterer):
    """Mini-batch K-means (Sculley, 2010) over data streamed block by block.

    Each step assigns a batch of ``batch_size`` rows to the nearest centers
    and moves every center hit towards the batch rows' mean with a learning
    rate of one over the weight it has seen. ``fit`` streams X's row blocks
    (a Zarr store is read one chunk at a time, in a random order each epoch,
    never held whole on the driver) and cuts each block into shuffled batches;
    ``partial_fit`` makes one step with the rows it is given, for data that
    arrives in pieces (e.g. under ``dask_ml.wrappers.Incremental``).

    Parameters and their meaning follow :class:`sklearn.cluster.MiniBatchKMeans`.
    Its one difference: batches are drawn without replacement from one block of
    X at a time (rows are read once per epoch) instead of uniformly with
    replacement from all of X, which out of core would read every chunk for
    every batch.

    X may be dense or sparse (a ``scipy.sparse`` CSR matrix, or a Dask array
    of CSR row chunks): CSR batches go through the CSR assignment kernel.

    Parameters
    ----------
    n_clusters : int, default=8
    init : {'k-means++', 'random'} or array of shape (n_clusters, n_features)
        Computed on ``init_size`` rows drawn from X.
    max_iter : int, default=100
        Maximum number of epochs (passes over X).
    batch_size : int, default=1024
        Rows per step; X's number of rows when it has fewer (as scikit-learn).
    verbose : int, default=0
        1: one line per epoch on stderr, and scikit-learn's lines on stdout
        (``Iteration N, inertia X`` per epoch, ``Converged (small centers
        change) at step S`` or ``Converged (lack of improvement in inertia)
        at step S`` on an early stop, also kept as the last ``history_``
        record's ``stop_reason``); see :mod:`dqkm.progress`.
    compute_labels : bool, default=True
        Compute ``labels_`` and ``inertia_`` with one full pass after fit.
    random_state : int, RandomState instance or None
    tol : float, default=0.0
        Stop when the squared change of the centers in one step is at most
        ``tol`` times the mean feature variance of X (0 disables it, as in
        scikit-learn; a positive value costs one extra pass for the variance).
    max_no_improvement : int or None, default=10
        Stop after this many consecutive steps without improvement of the
        smoothed batch inertia.
    init_size : int or None, default=None
        Rows used for the initialisation (default ``3 * batch_size``, at least
        ``n_clusters``).
    n_init : 'auto' or int, default='auto'
        Initialisations tried (on ``init_size`` rows; the best by inertia on
        another sample is kept); 'auto' is 3 for ``init='random'``, else 1.
        An init array is used once (an integer other than 1 gets
        scikit-learn's RuntimeWarning, 'auto' none).
    reassignment_ratio : float, default=0.01
        Centers that have seen less than this fraction of the heaviest
        center's weight are moved to random batch rows.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
    labels_ : ndarray or dask array of shape (n_samples,) (with ``compute_labels``)
    inertia_ : float (with ``compute_labels``; else the smoothed batch inertia)
    n_iter_ : int, epochs started
    n_steps_ : int, batches processed
    n_features_in_ : int
    history_ : list of dict, one record per epoch

    Examples
    --------
    >>> import numpy as np
    >>> from dqkm import MiniBatchKMeans
    >>> X = np.array([[0, 0], [0, 1], [0, 2], [10, 10], [10, 11], [10, 12]], dtype=float)
    >>> km = MiniBatchKMeans(2, batch_size=3, random_state=0, n_init=3).fit(X)
    >>> sorted(km.cluster_centers_[:, 0].round().tolist())
    [0.0, 10.0]
    """

    _parameter_constraints = {
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "init": [Options(str, _INIT_OPTIONS), "callable", "array-like"],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "verbose": VERBOSE,
        "compute_labels": ["boolean"],
        "random_state": ["random_state"],
        "tol": [Interval(Real, 0, None, closed="left")],
        "max_no_improvement": [Interval(Integral, 0, None, closed="left"), None],
        "init_size": [Interval(Integral, 1, None, closed="left"), None],
        "n_init": [Options(str, {"auto"}), Interval(Integral, 1, None, closed="left")],
        "reassignment_ratio": [Interval(Real, 0, None, closed="left")],
    }

    _accept_sparse = True

    def __init__(self, n_clusters=8, *, init="k-means++", max_iter=100, batch_size=1024,
                 verbose=0, compute_labels=True, random_state=None, tol=0.0,
                 max_no_improvement=10, init_size=None, n_init="auto",
                 reassignment_ratio=0.01):
        self.n_clusters = n_clusters
        self.init = init
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.verbose = verbose
        self.compute_labels = compute_labels
        self.random_state = random_state
        self.tol = tol
        self.max_no_improvement = max_no_improvement
        self.init_size = init_size
        self.n_init = n_init
        self.reassignment_ratio = reassignment_ratio

    # ------------------------------------------------------------------ params
    def _check_params(self, n_samples):
        """The data-dependent checks (after :func:`validate_params`); the number of
        initialisations tried."""
        check_n_samples(n_samples, self.n_clusters)
        self._batch_size = min(self.batch_size, n_samples)  # scikit-learn's cap
        if not isinstance(self.init, str) and not callable(self.init):
            check_value("init", self.init, ["array-like"], type(self).__name__)
        if self.init_size is not None and self.init_size < self.n_clusters:
            warnings.warn(f"init_size={self.init_size} should be larger than n_clusters="
                          f"{self.n_clusters}; using init_size={3 * self.n_clusters}.",
                          RuntimeWarning, stacklevel=3)
        if self.n_init == "auto":  # scikit-learn's rule
            n_init = 1 if isinstance(self.init, str) and self.init == "k-means++" else 3
        else:
            n_init = self.n_init
        array = not isinstance(self.init, str) and not callable(self.init)
        self._warn_explicit_init(self.init, self.n_init, type(self).__name__)
        self._n_init = 1 if array else n_init
        return self._n_init

    def _weights(self, sample_weight, Xd):
        """Sample weights as float64 aligned with X's row chunks (ones if None);
        checked by :func:`~dqkm.cluster._base.validate_sample_weight`."""
        w = validate_sample_weight(sample_weight, Xd, type(self).__name__)
        if w is None:
            return da.ones(Xd.shape[0], chunks=(Xd.chunks[0],), dtype=np.float64)
        return w

    # ---------------------------------------------------------------- init
    def _init_centers(self, X, init_rows, rng):
        """Centers from ``init_rows`` (an in-memory sample of X, dense or CSR)."""
        K = self.n_clusters
        if callable(self.init):
            c = self.init(init_rows, K, random_state=check_random_state(
                int(rng.integers(2**31 - 1))))
            c = np.asarray(c.toarray() if sp.issparse(c) else c, dtype=np.float64)
            return self._check_init_array(c, K, X.shape[1], type(self).__name__) \
                .astype(np.float64)
        if not isinstance(self.init, str):
            c = self._check_init_array(self.init, K, X.shape[1], type(self).__name__)
            check_sample(c, what=f"The 'init' array of {type(self).__name__}")
            return c.astype(np.float64)
        if self.init == "random":
            c = init_rows[rng.choice(init_rows.shape[0], K, replace=False)]
            return (c.toarray() if sp.issparse(c) else c).astype(np.float64)
        with driver_blas():
            c, _ = kmeans_plusplus(init_rows.astype(np.float64), K,
                                   random_state=int(rng.integers(2**31 - 1)))
        return c

    def _best_init(self, Xd, n_init, rng):
        if not isinstance(self.init, str) and not callable(self.init):
            return self._init_centers(Xd, None, rng)  # an array: no sample to read
        n = Xd.shape[0]
        size = self.init_size
        if size is None:
            size = 3 * self._batch_size
            if size < self.n_clusters:
                size = 3 * self.n_clusters
        elif size < self.n_clusters:
            size = 3 * self.n_clusters
        size = self._init_size = int(min(n, size))
        valid = sample_rows(Xd, size, rng, dense=False).astype(np.float64)
        check_sample(valid)
        best, best_inertia = None, np.inf
        for _ in range(n_init):
            rows = sample_rows(Xd, size, rng, dense=False).astype(np.float64) \
                if n_init > 1 else valid
            check_sample(rows)
            centers = self._init_centers(Xd, rows, rng)
            value = float(minibatch_step(valid, np.ones(size), centers,
                                         np.zeros(self.n_clusters))[2])
            if value < best_inertia:
                best, best_inertia = centers, value
        return best

    # ---------------------------------------------------------------- fit
    def fit(self, X, y=None, sample_weight=None, *, callback=None, checkpoint=None,
            resume=False):
        """Compute the centers by mini-batch steps over X, streamed by blocks.

        Runs through the fit driver (one iteration is one epoch): ``callback``,
        ``checkpoint`` and ``resume`` behave as in :meth:`dqkm.KMeans.fit`
        (a resumed fit draws the same batches as an uninterrupted one).

        Parameters
        ----------
        X : array-like, scipy.sparse, Dask or Zarr array of shape (n_samples, n_features)
        y : ignored
        sample_weight : array-like or Dask array of shape (n_samples,), optional
            Non-negative weights; refused as by :meth:`dqkm.KMeans.fit`.
        callback : callable, optional
            ``callback(record, state)`` after every epoch.
        checkpoint : str or PathLike, optional
        resume : bool, default=False

        Returns
        -------
        self

        Examples
        --------
        >>> import numpy as np, dqkm
        >>> X = np.array([[0., 0.], [0., 1.], [10., 10.], [10., 11.]])
        >>> mb = dqkm.MiniBatchKMeans(2, batch_size=2, random_state=0).fit(X)
        >>> sorted(mb.cluster_centers_[:, 0].round().tolist()), len(mb.history_) == mb.n_iter_
        ([0.0, 10.0], True)
        """
        Xd, lazy, w, state = self._run_epochs(X, sample_weight, callback, checkpoint, resume)
        n = Xd.shape[0]
        self.cluster_centers_ = state.centers.astype(Xd.dtype)
        self._counts = state.weight_sums
        self.n_steps_ = state.steps
        self.n_iter_ = int(np.ceil(state.steps * self._batch_size / n))
        if self.compute_labels:
            self._set_labels(Xd, lazy, w)
        else:
            self.inertia_ = float(state.ewa) * self._batch_size if state.ewa is not None \
                else np.nan
        return self

    def _run_epochs(self, X, sample_weight, callback, checkpoint, resume):
        """Validate, run the epochs through the fit driver, keep the state for
        ``partial_fit``; return ``(Xd, lazy, weights, state)``.  Subclasses
        change the driver's algorithm through :attr:`_algorithm_class`."""
        validate_params(self)
        Xd, lazy = self._validate_X(X, reset=True)
        n = Xd.shape[0]
        n_init = self._check_params(n)
        w = self._weights(sample_weight, Xd)
        tol_abs = 0.0
        if self.tol > 0:
            tol_abs = float(compute(Xd.astype(np.float64).var(axis=0).mean())[0]) * self.tol
        algo = self._algorithm_class(self, w, n, n_init, tol_abs)
        fit = run_fit(algo, Xd, n_init=1, random_state=self.random_state, callback=callback,
                      verbose=self.verbose, checkpoint=checkpoint, resume=resume, inputs=X)
        state = fit.result.state
        self.history_ = fit.result.history
        self._state, self._rng = state, algo.rng  # partial_fit goes on from here
        return Xd, lazy, w, state

    def _epoch(self, Xd, w, state, rng, n, n_steps, tol_abs):
        """One pass over X's blocks in a random order, in batches."""
        t0 = time.perf_counter()
        start = state.centers.copy()
        order = rng.permutation(Xd.numblocks[0])
        carry_x, carry_w = None, None
        b = self._batch_size
        for _, block, wb in iter_blocks(Xd, order, weights=w):
            perm = rng.permutation(block.shape[0])
            block, wb = block[perm], wb[perm]
            if carry_x is not None:
                block = sp.vstack([carry_x, block], format="csr") if sp.issparse(block) \
                    else np.concatenate([carry_x, block])
                wb = np.concatenate([carry_w, wb])
            stop = (block.shape[0] // b) * b
            for a in range(0, stop, b):
                self._step(block[a:a + b], wb[a:a + b], state, rng, n, tol_abs)
                if state.converged or state.steps >= n_steps:
                    break
            if state.converged or state.steps >= n_steps:
                carry_x = None
                break
            carry_x, carry_w = block[stop:], wb[stop:]
        if carry_x is not None and carry_x.shape[0] and not state.converged \
                and state.steps < n_steps:
            self._step(carry_x, carry_w, state, rng, n, tol_abs)
        shift = float(((state.centers - start) ** 2).sum())
        # scikit-learn's line for the progress reporter ("": all steps made, no line)
        reason = state.converged if isinstance(state.converged, str) else ""
        return {"objective": float(state.ewa) if state.ewa is not None else float("nan"),
                "shift": shift, "steps": state.steps, "converged": bool(state.converged),
                "stop_reason": reason, "seconds": time.perf_counter() - t0}

    def _step(self, Xb, wb, state, rng, n, tol_abs):
        state.since_reassign += Xb.shape[0]
        reassign = bool((state.weight_sums == 0).any()) or \
            state.since_reassign >= 10 * self.n_clusters
        if reassign:
            state.since_reassign = 0
        old = state.centers
        centers, ws, inertia, _, _ = minibatch_step(
            Xb, wb, old, state.weight_sums, rng=rng, reassign=reassign,
            reassignment_ratio=self.reassignment_ratio)
        state.centers, state.weight_sums = centers, ws
        state.steps += 1
        self._convergence(state, inertia / max(Xb.shape[0], 1), old, n, Xb.shape[0], tol_abs)

    def _convergence(self, state, batch_inertia, old, n, batch, tol_abs):
        """scikit-learn's early stopping: center change below ``tol``, or no
        improvement of the smoothed batch inertia for ``max_no_improvement`` steps."""
        if state.steps == 1:  # the first batch's inertia is that of the init
            return
        if state.ewa is None:
            state.ewa = batch_inertia
        else:
            alpha = min(1.0, batch * 2.0 / (n + 1))
            state.ewa = state.ewa * (1 - alpha) + batch_inertia * alpha
        if self.tol > 0 and float(((state.centers - old) ** 2).sum()) <= tol_abs:
            state.converged = f"Converged (small centers change) at step {state.steps}"
            return
        if state.ewa_min is None or state.ewa < state.ewa_min:
            state.no_improvement, state.ewa_min = 0, state.ewa
        else:
            state.no_improvement += 1
        if self.max_no_improvement is not None and \
                state.no_improvement >= self.max_no_improvement:
            state.converged = ("Converged (lack of improvement in inertia) at step "
                               f"{state.steps}")

    def partial_fit(self, X, y=None, sample_weight=None):
        """One mini-batch step with the rows of X (initialising on the first call).

        Dask input makes one step per row block, streamed.

        Parameters
        ----------
        X : array-like, Dask or Zarr array of shape (n_samples, n_features)
        y : ignored
        sample_weight : array-like or Dask array of shape (n_samples,), optional

        Returns
        -------
        self

        Examples
        --------
        Data that arrives in pieces, one call per piece:

        >>> import numpy as np, dqkm
        >>> X = np.array([[0., 0.], [0., 1.], [10., 10.], [10., 11.]])
        >>> mb = dqkm.MiniBatchKMeans(2, random_state=0)
        >>> for piece in (X, X + 0.1):
        ...     mb = mb.partial_fit(piece)
        >>> mb.n_steps_, sorted(mb.cluster_centers_[:, 0].round().tolist())
        (2, [0.0, 10.0])
        """
        Xd, lazy, w, n_init = self._begin_partial(X, sample_weight, "cluster_centers_")
        n = Xd.shape[0]
        if n_init is not None:
            self._state = _State(centers=self._best_init(Xd, n_init, self._rng),
                                 weight_sums=np.zeros(self.n_clusters))
            self.n_steps_ = 0
        state = self._state
        for _, block, wb in iter_blocks(Xd, weights=w):
            if block.shape[0]:
                self._step(block, wb, state, self._rng, n, 0.0)
        self.cluster_centers_ = state.centers.astype(Xd.dtype)
        self._counts = state.weight_sums
        self.n_steps_ = state.steps
        if self.compute_labels:
            self._set_labels(Xd, lazy, w)
        return self

    def _begin_partial(self, X, sample_weight, fitted):
        """The start of ``partial_fit``: validate X and the weights, and on the
        first call (no attribute ``fitted`` yet) the parameters and the
        generator.  Return ``(Xd, lazy, weights, n_init)``, ``n_init`` None
        after the first call."""
        first = not hasattr(self, fitted)
        if first:
            validate_params(self)
        Xd, lazy = self._validate_X(X, reset=first)
        w = self._weights(sample_weight, Xd)
        n_init = None
        if first:
            n_init = self._check_params(Xd.shape[0])
            rs = check_random_state(self.random_state)
            self._rng = np.random.default_rng(rs.randint(2**31 - 1))
        return Xd, lazy, w, n_init

    def _weighted_inertia(self, Xd, w):
        """Sum of ``w`` times the squared distance of each row of X to its center."""
        return inertia(Xd, self.cluster_centers_.astype(Xd.dtype), sample_weight=w)

    def _set_labels(self, Xd, lazy, w):
        """``labels_`` and ``inertia_`` over all of X (``compute_labels``)."""
        self.labels_ = self._output(assign(Xd, self.cluster_centers_), lazy)
        self.inertia_ = self._weighted_inertia(Xd, w)

    # predict, transform, score: CenterInference (dqkm.cluster._base)

    # ------------------------------------------------------------- save/load
    def _get_state(self):
        check_is_fitted(self)
        arrays = {"cluster_centers_": self.cluster_centers_}
        if isinstance(getattr(self, "labels_", None), np.ndarray):
            arrays["labels_"] = self.labels_
        meta = {k: getattr(self, k) for k in ("inertia_", "n_iter_", "n_steps_",
                                               "n_features_in_", "history_")
                if hasattr(self, k)}
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


class _MiniBatchAlgorithm(IterativeAlgorithm):
    """Mini-batch K-means for the fit driver: one step is one epoch over X's
    blocks (in an order drawn from the fit's generator); the state is the
    centers, their weights and the early-stopping counters."""

    def __init__(self, estimator, weights, n_samples, n_init, tol_abs):
        self.est, self.weights, self.n, self.n_init = estimator, weights, n_samples, n_init
        self.name = type(estimator).__name__
        self.max_iter, self.tol, self._tol_abs = estimator.max_iter, estimator.tol, tol_abs
        self.n_steps = max(1, (estimator.max_iter * n_samples) // estimator._batch_size)
        self.rng = None

    def identity(self, X):
        w = self.weights[:, None]
        return identity_from_params(self.est, X, fingerprint=data_fingerprint(X),
                                    sample_weight=data_fingerprint(w))

    def init_state(self, X, rng):
        return _State(centers=self.est._best_init(X, self.n_init, rng),
                      weight_sums=np.zeros(self.est.n_clusters))

    def begin_run(self, rng):
        self.rng = rng

    def step(self, X, state, iteration, tol_abs):
        rec = self.est._epoch(X, self.weights, state, self.rng, self.n, self.n_steps,
                              self._tol_abs)
        rec["iteration"] = iteration
        return state, rec, self._tol_abs

    def converged(self, record, tol_abs, history=()):
        return bool(record["converged"]) or record["steps"] >= self.n_steps

    def initial_tol_abs(self):
        return self._tol_abs

    def pack(self, state):
        return {"centers": state.centers, "weight_sums": state.weight_sums}

    def pack_meta(self, state):
        return {k: getattr(state, k) for k in _State.COUNTERS}

    def unpack(self, arrays):
        return _State(np.asarray(arrays["centers"], dtype=np.float64),
                      np.asarray(arrays["weight_sums"], dtype=np.float64))

    def load_extra(self, state, directory, meta):
        for k in _State.COUNTERS:
            if k in meta:
                setattr(state, k, meta[k])
        return state

    def finalize(self, X, result):
        ewa = result.state.ewa
        return float(ewa) if ewa is not None else float("nan")


class _State:
    """The driver-side state of a mini-batch fit."""

    COUNTERS = ("steps", "since_reassign", "ewa", "ewa_min", "no_improvement", "converged")

    def __init__(self, centers, weight_sums):
        self.centers, self.weight_sums = centers, weight_sums
        self.steps = 0
        self.since_reassign = 0
        self.ewa = None
        self.ewa_min = None
        self.no_improvement = 0
        self.converged = False


MiniBatchKMeans._algorithm_class = _MiniBatchAlgorithm
