"""Mini-batch QuicK-means: Sculley's mini-batch updates, centroids kept as sparse factors."""

from __future__ import annotations

import time
from numbers import Integral

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ..data.serialize import pack_operator, unpack_operator
from ..parallel.qkmeans import (aligned_weights, assign_factors, batch_partials,
                                factor_distances, factor_inertia, operator_state)
from ..parallel.stream import iter_blocks
from .._validation import Interval, check_value
from .minibatch import MiniBatchKMeans, _MiniBatchAlgorithm, _State
from .._docstrings import fill_doc
from ._qk_solvers import _refit, _with_offset
from .qkmeans import QKMeans

__all__ = ["MiniBatchQKMeans"]


class MiniBatchQKMeans(MiniBatchKMeans):
    """Mini-batch QuicK-means: mini-batch K-means whose centroids are sparse factors.

    The centroids are ``V = λ·S1···SQ`` (sparse factors, as
    :class:`dqkm.QKMeans`).  Each step assigns a batch of rows to the nearest
    row of V *through the factors* (``O(A log B + B)`` per row, A = min(K, D),
    B = max(K, D)), then moves the running cluster means ``U`` by Sculley's
    update (each mean moves towards its batch rows with the learning rate one
    over the weight it has seen, exactly as :class:`dqkm.MiniBatchKMeans`),
    and every ``refit_every`` batches refits the factors to ``U`` by
    ``palm_iter`` iterations of palm4MSA warm-started from the current factors,
    on ``D_√n·U`` with ``n`` the weight each centroid has seen — the part of
    the QK-means objective that depends on V, as in QK-means's refit.  The
    refit is safeguarded: it never ends above the fit it started from.
    ``fit`` streams X's row blocks (a Zarr store is read one chunk at a time,
    never held whole); ``partial_fit`` makes one step per row block it is
    given, for data that arrives in pieces.  A fit or ``partial_fit`` call
    ends with a refit when batches arrived since the last one, so
    ``factors_`` always fits the latest means.

    Parameters
    ----------
    n_clusters, init, max_iter, batch_size, verbose, compute_labels, random_state,
    tol, max_no_improvement, init_size, n_init, reassignment_ratio :
        As :class:`dqkm.MiniBatchKMeans` (``init`` is computed on ``init_size``
        rows, then factorised by hierarchical palm4MSA, ``palm_iter_init``
        iterations per level; ``tol`` and the reassignment act on the means).
    sparsity : int, default=5
        Non-zeros kept per row and per column of every factor (splincol).
    n_factors : int or None, default=None
        Number of sparse factors Q; None: ⌈log2 max(K, D)⌉.
    palm_iter : int, default=10
        Warm-started palm4MSA iterations per refit.
    palm_iter_init : int, default=300
        palm4MSA iterations per level of the initial (hierarchical) factorisation.
    refit_every : int, default=5
        Batches between two refits of the factors (``fit`` and ``partial_fit``
        also refit at their end).  The refits dominate the cost at large K and
        D; the means keep every batch's update between refits.  Chosen by
        measurement (``benchmarks/bench_qkmeans.py --parts minibatch``, on
        digits, K = 10, sparsity 3, ``batch_size=100``, 8 epochs): the objective
        ends 1.3 % above ``QKMeans.fit``'s with a refit after every batch,
        1.7 % with 5, 2.9 % with 10 and 5.8 % with 25, for 144, 32, 16 and 8
        refits.
    hierarchical_refits : int, default=8
        Refits number 1, 2, 4, …, 2^(hierarchical_refits − 1) are QK-means's
        hierarchical refit (:class:`dqkm.QKMeans`'s ``hierarchical_refits``:
        warm-started palm4MSA, and hierarchical palm4MSA from scratch on ``U``
        polished on ``D_√n·U``; the lower error is kept); the others are
        warm-started palm4MSA only.  The early refits
        matter: the means move far from the initial centroids the first
        factorisation fitted, and warm-started palm4MSA alone stays near that
        first sparse structure (on digits, K = 10, sparsity 3, 8 epochs of one
        ``partial_fit`` call per chunk of 100 rows, a refit after each, end
        9.2 % above ``QKMeans.fit``'s objective with 0, and 7.0 % above it
        with 8).  Each
        such refit costs about one initial factorisation; 0 disables them.
    offset : bool, default=True
        As :class:`dqkm.QKMeans`: ``V = 1·μᵀ + λ·S1···SQ`` with a dense row μ
        refitted with the factors (by least squares after each palm4MSA refit).
        ``partial_fit`` on a model fitted with ``offset=False`` goes on from its
        factors with μ = 0 (the same centroids).

    Attributes
    ----------
    factors_ : SparseFactors
        V = λ·S1···SQ of shape (n_clusters, n_features).
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        ``factors_.toarray()``.
    means_ : ndarray of shape (n_clusters, n_features)
        The running weighted means ``U`` the factors are refitted to.
    labels_ : ndarray or Dask array of shape (n_samples,) (with ``compute_labels``)
        Assignment through the factors.
    inertia_ : float
        The (weighted) QK-means objective of X (with ``compute_labels``; else
        the smoothed batch objective).
    n_iter_, n_steps_, n_features_in_, history_ : as :class:`dqkm.MiniBatchKMeans`
    n_refits_ : int
        palm4MSA refits made.

    Notes
    -----
    Empty centroids (no weight seen yet) keep their previous row of V as the
    refit's target with the weight of one point, as in :class:`dqkm.QKMeans`.
    ``reassignment_ratio`` moves rarely hit means to batch rows; the factors
    are refitted in that step.

    References
    ----------
    Sculley, "Web-scale k-means clustering", WWW 2010.
    Giffon, Emiya, Ralaivola, Kadri, "QuicK-means: accelerating inference for
    K-means by learning fast transforms", Machine Learning (2021).

    Examples
    --------
    >>> import numpy as np, dqkm
    >>> X = np.repeat(np.eye(4) * 10, 10, axis=0)  # four groups of 10 equal rows
    >>> mb = dqkm.MiniBatchQKMeans(4, sparsity=2, batch_size=10, max_iter=2,
    ...                            palm_iter_init=10, palm_iter=2, random_state=0).fit(X)
    >>> mb.factors_.shape, mb.predict(X[:3]).shape
    ((4, 4), (3,))
    """

    _parameter_constraints = {
        **MiniBatchKMeans._parameter_constraints,
        "sparsity": QKMeans._parameter_constraints["sparsity"],
        "n_factors": QKMeans._parameter_constraints["n_factors"],
        "palm_iter": [Interval(Integral, 1, None, closed="left")],
        "palm_iter_init": [Interval(Integral, 1, None, closed="left")],
        "refit_every": [Interval(Integral, 1, None, closed="left")],
        "hierarchical_refits": [Interval(Integral, 0, None, closed="left")],
        "offset": ["boolean"],
    }

    def __init__(self, n_clusters=8, *, sparsity=5, n_factors=None, palm_iter=10,
                 palm_iter_init=300, refit_every=5, hierarchical_refits=8, init="k-means++",
                 max_iter=100, batch_size=1024, verbose=0, compute_labels=True,
                 random_state=None, tol=0.0, max_no_improvement=10, init_size=None,
                 n_init="auto", reassignment_ratio=0.01, offset=True):
        super().__init__(n_clusters, init=init, max_iter=max_iter, batch_size=batch_size,
                         verbose=verbose, compute_labels=compute_labels,
                         random_state=random_state, tol=tol,
                         max_no_improvement=max_no_improvement, init_size=init_size,
                         n_init=n_init, reassignment_ratio=reassignment_ratio)
        self.sparsity = sparsity
        self.n_factors = n_factors
        self.palm_iter = palm_iter
        self.palm_iter_init = palm_iter_init
        self.refit_every = refit_every
        self.hierarchical_refits = hierarchical_refits
        self.offset = offset

    # ------------------------------------------------------------------ factors
    def _proxy(self):
        """A QKMeans with this model's factor parameters (its checks and init)."""
        return QKMeans(self.n_clusters, sparsity=self.sparsity, n_factors=self.n_factors,
                       palm_iter_init=self.palm_iter_init, offset=self.offset)

    def _constraints(self, n_features):
        from ..kernels import default_constraints

        proxy = self._proxy()
        q = proxy._check_qk_params(n_features)
        return default_constraints(self.n_clusters, n_features, sparsity=self.sparsity,
                                   n_factors=q)

    def _check_params(self, n_samples):
        n_init = super()._check_params(n_samples)
        check_value("sparsity", self.sparsity,
                    [Interval(Integral, 1, min(self.n_clusters, self.n_features_in_))],
                    type(self).__name__)
        return n_init

    def _new_state(self, Xd, n_init, rng):
        """Initial means (as MiniBatchKMeans) and their factorisation."""
        centers = self._best_init(Xd, n_init, rng)
        constraints = self._constraints(Xd.shape[1])
        state = _QKState(centers=np.asarray(centers, dtype=np.float64),
                         weight_sums=np.zeros(self.n_clusters))
        # the tighter budget: every batch up to the first refit is assigned by these
        # factors (QKMeans refits after one pass; its init takes the progress budget)
        state.set_factors(self._proxy()._factorize(centers, constraints, budget="full"))
        return state

    def _refit(self, state):
        """Warm-started palm4MSA on ``D_√n·U`` (empty centroids: their row of V)."""
        if state.factors is None or state.pending == 0:
            return
        w = np.sqrt(state.weight_sums)
        constraints = self._constraints(state.centers.shape[1])
        r = state.refits + 1
        hierarchical = r & (r - 1) == 0 and r.bit_length() <= self.hierarchical_refits
        solve = _refit(hierarchical, n_iter_unweighted=self.palm_iter_init)
        if self._proxy()._fits_offset():
            solve = _with_offset(solve)
        res = solve(w[:, None] * state.centers, constraints, n_iter=self.palm_iter,
                    init=state.factors, fixed_left=w)
        state.set_factors(res.factors)
        state.refits += 1
        state.pending = 0

    # ------------------------------------------------------------------ steps
    def _step(self, Xb, wb, state, rng, n, tol_abs):
        state.since_reassign += Xb.shape[0]
        reassign = bool((state.weight_sums == 0).any()) or \
            state.since_reassign >= 10 * self.n_clusters
        if reassign:
            state.since_reassign = 0
        old = state.centers
        sums, bw, inertia = batch_partials(Xb, wb, state.operator(Xb.dtype))
        new, ws = old.copy(), state.weight_sums + bw
        hit = bw > 0
        new[hit] = (old[hit] * state.weight_sums[hit, None] + sums[hit]) / ws[hit, None]
        moved = _reassign(new, ws, Xb, wb, rng, self.reassignment_ratio) if reassign else 0
        state.centers, state.weight_sums = new, ws
        state.steps += 1
        state.pending += 1
        if moved or state.pending >= self.refit_every:
            self._refit(state)
        self._convergence(state, inertia / max(Xb.shape[0], 1), old, n, Xb.shape[0], tol_abs)

    def _epoch(self, Xd, w, state, rng, n, n_steps, tol_abs):
        rec = super()._epoch(Xd, w, state, rng, n, n_steps, tol_abs)
        t0 = time.perf_counter()
        self._refit(state)
        rec["seconds"] += time.perf_counter() - t0
        rec["n_refits"] = state.refits
        return rec

    # ------------------------------------------------------------------ fit
    def fit(self, X, y=None, sample_weight=None, *, callback=None, checkpoint=None,
            resume=False):
        """Fit by mini-batch steps over X, streamed by blocks (see the class).

        Runs through the fit driver (one iteration is one epoch): ``callback``,
        ``checkpoint`` and ``resume`` behave as in :meth:`dqkm.KMeans.fit`.

        Parameters
        ----------
        X : array-like, Dask or Zarr array of shape (n_samples, n_features)
        y : ignored
        sample_weight : array-like or Dask array of shape (n_samples,), optional
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
        >>> X = np.repeat(np.eye(4) * 10, 10, axis=0)  # four groups of 10 equal rows
        >>> mb = dqkm.MiniBatchQKMeans(4, sparsity=2, batch_size=10, max_iter=2,
        ...                            palm_iter_init=10, palm_iter=2, random_state=0).fit(X)
        >>> mb.n_refits_ >= 1, float(mb.cluster_centers_.round(1).max())
        (True, 10.0)
        """
        Xd, lazy, w, state = self._run_epochs(X, sample_weight, callback, checkpoint, resume)
        n = Xd.shape[0]
        self.n_iter_ = int(np.ceil(state.steps * self._batch_size / n))
        self._publish(state, Xd, lazy, None if sample_weight is None else w)
        if not self.compute_labels:
            self.inertia_ = float(state.ewa) * self._batch_size if state.ewa is not None \
                else np.nan
        return self

    def partial_fit(self, X, y=None, sample_weight=None):
        """One mini-batch step per row block of X (initialising on the first call),
        then a refit of the factors.

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
        Data that arrives in pieces, one call per piece (each call ends with a
        refit of the factors):

        >>> import numpy as np, dqkm
        >>> X = np.repeat(np.eye(4) * 10, 10, axis=0)
        >>> mb = dqkm.MiniBatchQKMeans(4, sparsity=2, palm_iter_init=10, palm_iter=2,
        ...                            random_state=0)
        >>> for piece in (X, X):
        ...     mb = mb.partial_fit(piece)
        >>> mb.n_steps_, mb.n_refits_, len(set(mb.predict(X[::10]).tolist()))
        (2, 2, 4)
        """
        Xd, lazy, w, n_init = self._begin_partial(X, sample_weight, "factors_")
        n = Xd.shape[0]
        if n_init is not None:
            self._state = self._new_state(Xd, n_init, self._rng)
        state = self._state
        for _, block, wb in iter_blocks(Xd, weights=w):
            if block.shape[0]:
                self._step(block, wb, state, self._rng, n, 0.0)
        self._refit(state)
        self._publish(state, Xd, lazy, None if sample_weight is None else w)
        return self

    def _publish(self, state, Xd, lazy, w):
        """The fitted attributes from the state (and labels_/inertia_ over X)."""
        self.factors_ = state.factors
        self.cluster_centers_ = np.asarray(state.factors.toarray(), dtype=Xd.dtype)
        self.means_ = state.centers.astype(Xd.dtype)
        self._counts = state.weight_sums
        self.n_steps_ = state.steps
        self.n_refits_ = state.refits
        if self.compute_labels:
            self.labels_ = self._output(assign_factors(Xd, self.factors_), lazy)
            self.inertia_ = factor_inertia(Xd, self.factors_, sample_weight=w)

    # ------------------------------------------------------------- inference
    @fill_doc
    def predict(self, X):
        """Nearest centroid of each sample, computed with the sparse factors.

        Parameters
        ----------
        {X_infer}

        Returns
        -------
        {labels}

        Examples
        --------
        {fitted_mbqkmeans}
        >>> labels = mb.predict(X)
        >>> len(set(labels.tolist())), bool((labels[::10] == mb.labels_[::10]).all())
        (4, True)
        """
        check_is_fitted(self)
        Xd, lazy = self._validate_X(X, reset=False)
        return self._output(assign_factors(Xd, self.factors_), lazy)

    @fill_doc
    def transform(self, X):
        """Euclidean distances to every centroid, computed with the sparse factors.

        Parameters
        ----------
        {X_infer}

        Returns
        -------
        distances : ndarray or Dask array of shape (n_samples, n_clusters)
            Distance of each sample to each row of ``factors_``.

        Examples
        --------
        {fitted_mbqkmeans}
        >>> d = mb.transform(X[:1])
        >>> d.shape, round(float(d.min()), 3)
        ((1, 4), 0.0)
        """
        check_is_fitted(self)
        Xd, lazy = self._validate_X(X, reset=False)
        return self._output(factor_distances(Xd, self.factors_), lazy)

    @fill_doc
    def score(self, X, y=None, sample_weight=None):
        """Opposite of the (weighted) QK-means objective of X.

        Parameters
        ----------
        X : array-like, Dask array, Zarr array or store path of shape (n_samples, n_features)
        {score_y_weights}

        Returns
        -------
        score : float
            Minus the sum over rows of the weighted squared distance to the
            nearest centroid (via the factors); higher is better.

        Examples
        --------
        {fitted_mbqkmeans}
        >>> bool(mb.score(X) > -1e-6), round(mb.score(X + 1.0), 3)  # 40 rows at squared distance 4
        (True, -160.0)
        """
        check_is_fitted(self)
        Xd, _ = self._validate_X(X, reset=False)
        return -factor_inertia(Xd, self.factors_, sample_weight=aligned_weights(
            sample_weight, Xd))

    # ------------------------------------------------------------- save/load
    def _get_state(self):
        arrays, meta = super()._get_state()
        arrays.update(pack_operator(self.factors_, "factors_")[1])
        return arrays, meta

    def _set_state(self, arrays, meta):
        arrays = dict(arrays)
        self.factors_ = unpack_operator("SparseFactors", arrays, "factors_")
        for k in [k for k in arrays if k.startswith("factors_")]:
            del arrays[k]
        return super()._set_state(arrays, meta)

    def __sklearn_is_fitted__(self):
        return hasattr(self, "factors_")


def _reassign(centers, ws, Xb, wb, rng, ratio):
    """scikit-learn's reassignment rule on the means (in place): those that have
    seen less than ``ratio`` × the largest weight go to random batch rows
    (drawn by weight, at most half the batch); returns how many moved."""
    if ratio <= 0:
        return 0
    low = ws < ratio * ws.max()
    if low.sum() > 0.5 * Xb.shape[0]:
        low[np.argsort(ws, kind="stable")[int(0.5 * Xb.shape[0]):]] = False
    moved = int(low.sum())
    positive = np.flatnonzero(wb > 0)
    if not moved or positive.size < moved:
        return 0
    rows = rng.choice(positive, size=moved, replace=False, p=wb[positive] / wb[positive].sum())
    centers[low] = Xb[rows]
    ws[low] = ws[~low].min() if (~low).any() else 0.0
    return moved


class _QKState(_State):
    """The mini-batch state plus the factors and what assigning through them needs."""

    COUNTERS = _State.COUNTERS + ("refits", "pending")

    def __init__(self, centers, weight_sums):
        super().__init__(centers, weight_sums)
        self.factors, self._operators = None, {}
        self.refits = self.pending = 0

    def set_factors(self, factors):
        self.factors, self._operators = factors, {}

    def operator(self, dtype):
        """The factors as assigning rows of ``dtype`` needs them (made once per refit)."""
        dtype = np.dtype(dtype)
        if dtype not in self._operators:
            self._operators[dtype] = operator_state(self.factors, dtype)
        return self._operators[dtype]


class _MiniBatchQKAlgorithm(_MiniBatchAlgorithm):
    """:class:`_MiniBatchAlgorithm` with the factors in the state."""

    def init_state(self, X, rng):
        return self.est._new_state(X, self.n_init, rng)

    def pack(self, state):
        arrays = super().pack(state)
        arrays.update(pack_operator(state.factors, "factors_")[1])
        return arrays

    def pack_meta(self, state):
        return {k: getattr(state, k) for k in _QKState.COUNTERS}

    def unpack(self, arrays):
        state = _QKState(np.asarray(arrays["centers"], dtype=np.float64),
                         np.asarray(arrays["weight_sums"], dtype=np.float64))
        state.set_factors(unpack_operator("SparseFactors", arrays, "factors_"))
        return state

    def load_extra(self, state, directory, meta):
        for k in _QKState.COUNTERS:
            if k in meta:
                setattr(state, k, meta[k])
        return state

    def finalize(self, X, result):
        ewa = result.state.ewa
        return float(ewa) if ewa is not None else float("nan")



MiniBatchQKMeans._algorithm_class = _MiniBatchQKAlgorithm
