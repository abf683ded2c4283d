"""QuicK-means: K-means whose centroid matrix is a product of sparse factors."""

from __future__ import annotations

import logging
import math
from numbers import Integral, Real

import numpy as np
from sklearn.utils.validation import check_is_fitted

from sklearn.cluster import kmeans_plusplus

from .._docstrings import fill_doc
from ..data.serialize import pack_operator, unpack_operator
from ..exceptions import DataError
from ..parallel.engine import compute, driver_blas
from ..parallel.finite import check_sample
from ..parallel.fingerprint import data_fingerprint
from ..parallel.qkmeans import (aligned_weights, assign_factors, factor_distances,
                                factor_inertia, qkmeans_step)
from .._validation import Interval, Options, check_value, validate_params
from .kmeans import KMeans, LloydAlgorithm

logger = logging.getLogger(__name__)

__all__ = ["QKMeans"]

_INIT_FACTORIZATION = {"hierarchical", "palm4msa"}
_VARIANTS = {"dqkm", "paper"}


from ._qk_solvers import (_FIT_BUDGET, _FULL_BUDGET, _LAST_TOL, _SPLIT_TOL,  # noqa: F401
                          _empty_rule, _factorize_with_offset, _hierarchical, _palm,
                          _hierarchical_refit, _refit_solver, _solver_for, _with_offset)


class _QKMeansAlgorithm(LloydAlgorithm):
    """QK-means iterations for the fit driver: the state is the sparse factors;
    one step is one pass over X then the refit of the factors, by
    :func:`_hierarchical_refit` in iterations ``1 … hierarchical_refits``
    and warm-started palm4MSA after."""

    supports_sample_weight = True

    def __init__(self, estimator, constraints):
        super().__init__(estimator)
        self.constraints = constraints
        # None, or weights one per row of X (NumPy or Dask), aligned on first use
        self.sample_weight = None
        self._aligned = None

    def weights(self, X):
        """``sample_weight`` as a Dask array aligned with X's row chunks (or None)."""
        if self.sample_weight is None:
            return None
        if self._aligned is None or self._aligned[0] != X.name:
            self._aligned = (X.name, aligned_weights(self.sample_weight, X))
        return self._aligned[1]

    def init_state(self, X, rng):
        est = self.estimator
        centers = est._weighted_initial_centers(X, rng, self.weights(X))
        return est._factorize(centers, self.constraints)

    def step(self, X, state, iteration, tol_abs):
        est = self.estimator
        solve = _solver_for(iteration, est.hierarchical_refits, est.palm_iter_init, est.variant,
                            est.palm_tol)
        return qkmeans_step(X, state, iteration, self.constraints,
                            palm4msa=_with_offset(solve) if est._fits_offset() else solve,
                            tol=self.tol, tol_abs=tol_abs,
                            palm_iter=self.estimator.palm_iter, split_every=self.split_every,
                            sample_weight=self.weights(X))

    def converged(self, record, tol_abs, history=()):
        """The center shift within ``tol`` (as K-means), or the objective's relative
        change since the previous iteration within ``objective_tol``."""
        if super().converged(record, tol_abs, history):
            return True
        rtol = self.estimator.objective_tol
        if rtol == 0 or len(history) < 2:
            return False
        before, now = float(history[-2]["objective"]), float(record["objective"])
        change = abs(before - now) / before if before > 0 else 0.0
        if change > rtol:
            return False
        record["stop_reason"] = (f"Converged at iteration {record['iteration']}: objective "
                                 f"changed by {change:e} relatively, within objective_tol "
                                 f"{rtol:e}")
        return True

    def pack(self, state):
        return state.to_arrays()

    def unpack(self, arrays):
        return unpack_operator("SparseFactors", arrays, "")

    def finalize(self, X, result):
        if result.shift == 0:
            return result.last_objective
        return factor_inertia(X, result.state, split_every=self.split_every,
                              sample_weight=self.weights(X))


class QKMeans(KMeans):
    """QuicK-means: centroids V = λ·S1···SQ constrained to sparse factors.

    (By default V = 1·μᵀ + λ·S1···SQ, a dense offset row plus sparse factors:
    see ``offset``.)  Assigning a point costs one application of the sparse factors,
    O(A log B + B) with A = min(K, D), B = max(K, D), instead of the O(K·D)
    dense product.  Each Lloyd iteration is one pass over X (assignment by the
    factors, K×D float64 sums, counts, exact objective, tree-reduced), then
    palm4MSA on ``A = D_√n·U`` with ``D_√n = diag(√n_k)`` fixed, warm-started
    from the previous factors — which makes the objective non-increasing
    (journal version, Proposition 1).

    Parameters
    ----------
    n_clusters : int, default=8
    sparsity : int, default=5
        Non-zeros kept per row and per column of every factor (splincol).
    n_factors : int or None, default=None
        Number of sparse factors Q; None: ⌈log2 max(K, D)⌉.
    init : {'k-means++', 'k-means||', 'random'} or ndarray, default='k-means++'
        Initial centroids (as :class:`dqkm.KMeans`), then factorised.
    init_factorization : {'hierarchical', 'palm4msa'}, default='hierarchical'
        How the initial centroids are factorised: hierarchical palm4MSA (as
        the paper) or plain palm4MSA from its default start.
    palm_iter : int, default=10
        Cap on the palm4MSA iterations per Lloyd iteration (warm-started from
        the previous factors); the run stops earlier on ``palm_tol``.  With
        ``variant="dqkm"`` each accepted factor update is followed by least
        squares on its support (``palm4msa``'s ``support_cg``), so few
        iterations go far: 10 reached the objective 50 plain ones did on digits
        in about two thirds of the time, and a lower one at K = D = 1024.
    palm_iter_init : int, default=300
        Cap on the palm4MSA iterations of every run of the initial
        factorisation (each run stops earlier on progress; see Notes).
    palm_tol : float, default=1e-06
        A warm-started refit stops after the first palm4MSA iteration that
        lowers its error ‖A − D_√n·V‖ by at most ``palm_tol`` relatively
        (``palm_iter`` caps it); the later Lloyd iterations move the centroids
        little, so with e.g. 1e-3 their refits stop after a few iterations
        (measured at K = 256 with ``hierarchical_refits=0``: the objective
        ended 1.42 × K-means's, so the default stays at palm4MSA's own
        1e-6).  0: every refit runs ``palm_iter`` iterations.
    hierarchical_refits : int, default=1
        In Lloyd iterations ``1 … hierarchical_refits``, the factors are
        refitted to ``D_√n·U`` two ways — palm4MSA warm-started from the
        previous factors (Algorithm 1), and hierarchical palm4MSA from
        scratch on the cluster means ``U`` (``palm_iter_init`` iterations per
        level, as "K-means + palm4MSA" does to K-means's centroids) polished
        by ``palm_iter`` warm-started iterations on ``D_√n·U`` — and the
        better fit is kept, so the objective stays non-increasing.  Later
        iterations use the warm start only.  0:
        warm-started palm4MSA only — but with dqkm's safeguarded adaptive
        step, not Algorithm 1 as published (that is ``variant="paper"``).
        Each hierarchical refit costs about one to three initial
        factorisations (its hierarchical run stops on the tighter budget,
        see Notes); the first iteration gains most (its target moved far
        from the k-means++ centroids the init factorised).
        ``hierarchical_refits >= max_iter`` refits in every iteration: on
        digits (K = 10, s = 5) QK-means then ends below K-means + palm4MSA
        on average (the journal's Table 3; on 4 of 5 seeds, 0.9 % above on
        the fifth).
    variant : {'dqkm', 'paper'}, default='dqkm'
        ``'paper'``: Algorithm 1 of the QuicK-means paper exactly — the initial
        centroids factorised by hierarchical palm4MSA with the product residual
        rule (``Splincol(min(s^(Q-l), ·))``, Le Magoarou & Gribonval's rule),
        then in every Lloyd iteration palm4MSA warm-started from the previous
        factors, plain PALM (step ``1/c``, ``c = 1.001·λ²‖L‖₂²‖R‖₂²``, no
        safeguard, no adaptive step), ``palm_iter`` iterations (``palm_iter_init``
        per run of the initial factorisation), no early stop;
        ``hierarchical_refits`` is ignored.  Without the safeguard the objective
        may rise (rarely; Splincol is not an exact projection).  ``'dqkm'``:
        the safeguarded adaptive step, the geometric residual rule, the
        hierarchical refits and early stops; lower objectives on digits (see
        docs/benchmarks/palm4msa.md for what each part costs).
    offset : bool, default=True
        Fit ``V = 1·μᵀ + λ·S1···SQ``: a dense row μ (the D values every
        centroid shares) outside the sparse factors, which then fit only what
        differs between clusters.  The initial factorisation fits the
        centroids minus their mean row; every refit runs palm4MSA on
        ``D_√n·(U − 1·μᵀ)`` warm-started from the sparse part, then sets μ
        by least squares (neither step raises the objective).  ``factors_``
        holds V itself as plain factors (the sparse part, a column of ones
        and μ as one more inner row; :func:`dqkm.kernels.split_offset` gives
        back the parts), at ``K + D + Q − 2`` more non-zeros.  It lowers the
        objective most where the centroids share a large common part
        (upsampled digits, K = 256: 1.05 × K-means's objective after 40
        iterations against 1.2 without; docs/benchmarks/qk_objective.md).
        Centroids that are sparse themselves (a few large entries on a zero
        background, one-hot-like) fit better without it: their mean row is
        not sparse, and neither is what remains once it is subtracted.
        ``variant='paper'`` ignores it (Algorithm 1 has no offset).
    objective_tol : float, default=0.001
        Also stop when a Lloyd iteration changes the objective by at most
        ``objective_tol`` relatively, ``|f_{t-1} − f_t| <= objective_tol·f_{t-1}``
        (the QuicK-means paper's stopping rule; its experiments use 1e-6 with
        10 or 20 iterations at most).  ``tol`` alone rarely stops QK-means at
        large K: each refit keeps improving the factors a little, so the
        centers keep moving long after the clustering settled (K = 256:
        still above ``tol`` after 100 iterations, the objective falling by
        under 0.1 % per iteration).  The default was chosen by
        ``benchmarks/bench_qk_objective.py`` (docs/benchmarks/qk_objective.md);
        0: ``tol`` only.
    max_iter, tol, random_state, persist, split_every, n_init, oversampling_factor,
    init_max_iter, verbose : as :class:`dqkm.KMeans`.

    Notes
    -----
    Empty clusters (both variants, every ``hierarchical_refits``): a cluster
    that receives no point keeps its previous row of V as the refit's target,
    with the weight of one point (``√n = 1`` in place of 0).  The warm start's
    fit objective is unchanged by it (that row's term is 0 there), so the
    QK-means objective stays non-increasing, and the row stays within
    ``‖v_new − v_old‖² <= Σ_k n_k‖u_k − v_old,k‖²`` of where it was — it
    neither collapses to 0 nor drifts unconstrained.

    Defaults and their cost: the initial factorisation is hierarchical
    palm4MSA, ``palm_iter_init`` iterations at most per run; the 2-factor
    splits and the global runs of levels before the last stop after the
    first iteration that improves their error by at most 0.3 %, the last
    global run at 0.1 % — about ``Σ_l (iterations of level l)·(l + 1)``
    factor updates; each factor update costs ``O(Q·s·A·B)`` through the
    sparse factors (A = min(K, D), B = max(K, D)).  Every Lloyd iteration
    then runs warm-started palm4MSA until it improves by at most
    ``palm_tol`` (``palm_iter`` at most).  ``hierarchical_refits=k`` adds a
    hierarchical refit in iterations 1 … k, whose hierarchical run stops on
    the tighter budget of :func:`factorize_centroids` ("K-means + palm4MSA"),
    0.1 % and 0.01 %: the factorisation of the cluster means sets the course
    of the fit, where the init only seeds the first assignment
    (``benchmarks/bench_qk_budget.py`` measures both).

    Attributes
    ----------
    factors_ : SparseFactors
        V = λ·S1···SQ of shape (n_clusters, n_features) (with ``offset``, the
        offset written into the factors as ``offset`` says).
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        ``factors_.toarray()``, for compatibility.
    labels_, inertia_, n_iter_, n_features_in_ : as :class:`dqkm.KMeans`
        ``inertia_`` is the QK-means objective (eq. 5): Σ‖x − v_label(x)‖².
    history_ : list of dict
        Per iteration: ``objective``, ``shift``, ``seconds``, ``empty_clusters``,
        ``seconds_assign``, ``seconds_palm``, ``palm_error`` (relative error
        ‖A − D_√n·V‖/‖A‖ after palm4MSA), ``palm_iter``, ``nnz``.
    flops_ : int
        Flops to apply the factors to one vector.
    compression_ : float
        K·D / nnz of the factors.

    References
    ----------
    Giffon, Emiya, Ralaivola, Kadri, "QuicK-means: accelerating inference for
    K-means by learning fast transforms", Machine Learning (2021), Algorithm 1,
    eq. (5), Proposition 1.

    Examples
    --------
    >>> import dqkm
    >>> from sklearn.datasets import load_digits
    >>> X = load_digits().data
    >>> qk = dqkm.QKMeans(10, sparsity=3, random_state=0, max_iter=5).fit(X)
    >>> qk.factors_.shape
    (10, 64)
    """

    _parameter_constraints = {
        **{k: v for k, v in KMeans._parameter_constraints.items() if k != "algorithm"},
        "sparsity": ["integer"],  # in [1, min(n_clusters, n_features)]: checked by fit
        "n_factors": [Interval(Integral, 2, None, closed="left"), None],
        "init_factorization": [Options(str, _INIT_FACTORIZATION)],
        "palm_iter": [Interval(Integral, 1, None, closed="left")],
        "palm_iter_init": [Interval(Integral, 1, None, closed="left")],
        "palm_tol": [Interval(Real, 0, None, closed="left")],
        "hierarchical_refits": [Interval(Integral, 0, None, closed="left")],
        "variant": [Options(str, _VARIANTS)],
        "offset": ["boolean"],
        "objective_tol": [Interval(Real, 0, None, closed="left")],
    }

    def __init__(self, n_clusters=8, *, sparsity=5, n_factors=None, init="k-means++",
                 init_factorization="hierarchical", palm_iter=10, palm_iter_init=300,
                 palm_tol=1e-6, hierarchical_refits=1, variant="dqkm", offset=True,
                 objective_tol=1e-3, max_iter=300, tol=1e-4, random_state=None, persist="auto",
                 split_every=None, n_init="auto", oversampling_factor=2.0, init_max_iter=None,
                 verbose=0):
        super().__init__(n_clusters, init=init, n_init=n_init, max_iter=max_iter, tol=tol,
                         random_state=random_state, persist=persist, split_every=split_every,
                         oversampling_factor=oversampling_factor, init_max_iter=init_max_iter,
                         verbose=verbose)
        self.sparsity = sparsity
        self.n_factors = n_factors
        self.init_factorization = init_factorization
        self.palm_iter = palm_iter
        self.palm_iter_init = palm_iter_init
        self.palm_tol = palm_tol
        self.hierarchical_refits = hierarchical_refits
        self.variant = variant
        self.offset = offset
        self.objective_tol = objective_tol

    def _check_qk_params(self, n_features):
        """The data-dependent check (``sparsity <= min(K, D)``); the number of factors."""
        K = self.n_clusters
        check_value("sparsity", self.sparsity, [Interval(Integral, 1, min(K, n_features))],
                    type(self).__name__)
        n_factors = self.n_factors
        if n_factors is None:
            n_factors = max(2, math.ceil(math.log2(max(K, n_features))))
        return n_factors

    def _fits_offset(self):
        """Whether the centroids are fitted with a dense offset row (``offset``,
        which ``variant='paper'`` ignores)."""
        return bool(self.offset) and self.variant != "paper"

    def _factorize(self, centers, constraints, budget="fit"):
        """The initial factorisation of ``centers``; ``budget`` of the hierarchical
        runs (:func:`_hierarchical`): QK-means's progress budget, as the init only seeds
        the first assignment (MiniBatchQKMeans asks for ``"full"``)."""
        paper = self.variant == "paper"

        def factorize(A):
            if self.init_factorization == "hierarchical":
                return _hierarchical(A, constraints, n_iter=self.palm_iter_init,
                                     paper=paper, budget=budget).factors
            return _palm(A, constraints, n_iter=self.palm_iter_init, paper=paper).factors

        A = np.asarray(centers, dtype=np.float64)
        return _factorize_with_offset(factorize, A) if self._fits_offset() else factorize(A)

    def _check_extra_params(self, n_features):
        self._check_qk_params(n_features)

    # ---------------------------------------------------------------- fitting
    @fill_doc
    def fit(self, X, y=None, sample_weight=None, *, callback=None, checkpoint=None,
            resume=False):
        """Compute QK-means clustering.

        Parameters
        ----------
        {X_fit}
        sample_weight : array-like or Dask array of shape (n_samples,), optional
            Non-negative weight of every row (None: all 1).  The weights enter
            the cluster sums, the weighted counts ``n_k`` of ``D_√n``, the
            objective, the variance behind ``tol`` and the k-means++ / random
            initialisation (drawn on a uniform sample of rows, by weight):
            integer weights give the fit of the rows repeated that many times,
            a zero weight the fit without the row.  A Dask array is rechunked
            to X's row chunks and its values checked as they are read.
            ``init='k-means||'`` does not take weights.
        callback, checkpoint, resume :
            As :meth:`dqkm.KMeans.fit`; with weights, the checkpoint's identity
            also holds their fingerprint.

        Returns
        -------
        self

        Examples
        --------
        >>> import numpy as np, dqkm
        >>> rng = np.random.default_rng(0)
        >>> X = np.vstack([rng.normal(c, 0.5, (30, 8)) for c in (0, 4, 8, 12)])
        >>> qk = dqkm.QKMeans(4, sparsity=2, palm_iter_init=10, palm_iter=2, random_state=0).fit(X)
        >>> qk.factors_.shape, len(set(qk.labels_.tolist()))
        ((4, 8), 4)
        """
        return self._fit(X, callback=callback, checkpoint=checkpoint, resume=resume,
                         sample_weight=sample_weight)

    def _weighted_initial_centers(self, X, rng, w):
        """:meth:`_initial_centers`, the draws weighted by ``w`` (aligned with X)."""
        if w is None or not isinstance(self.init, str):
            return self._initial_centers(X, rng)
        name, K = type(self).__name__, self.n_clusters
        if self.init == "k-means||":
            raise DataError(f"{name}(init='k-means||') does not take sample_weight; got "
                            "weights. Use init='k-means++' (weighted on a sample of rows) or "
                            "an array of initial centers.")
        n = X.shape[0]
        m = min(n, max(10 * K, 10_000))
        idx = np.sort(rng.choice(n, size=m, replace=False)) if m < n else np.arange(n)
        rows, weights = compute(X[idx], w[idx])
        rows, weights = np.asarray(rows, dtype=np.float64), np.asarray(weights)
        check_sample(rows)
        positive = np.flatnonzero(weights > 0)
        if positive.size < K:
            raise DataError(f"{name}: the {m:,} rows drawn for init={self.init!r} hold "
                            f"{positive.size} rows of positive sample_weight, fewer than "
                            f"n_clusters={K}. Give more rows a positive weight or pass an "
                            "array of initial centers as init.")
        if self.init == "random":
            p = weights[positive] / weights[positive].sum()
            pick = rng.choice(positive, size=K, replace=False, p=p)
            return rows[pick].astype(X.dtype)
        with driver_blas():
            centers, _ = kmeans_plusplus(rows[positive], K, sample_weight=weights[positive],
                                         random_state=int(rng.integers(2**31 - 1)))
        return centers.astype(X.dtype)

    def _algorithm(self, n_features):
        from ..kernels import default_constraints

        constraints = default_constraints(self.n_clusters, n_features, sparsity=self.sparsity,
                                          n_factors=self._check_qk_params(n_features))
        return _QKMeansAlgorithm(self, constraints)

    def _unpack(self, arrays, prefix):
        return unpack_operator("SparseFactors", arrays, prefix)

    def _set_fitted(self, Xd, lazy, value, res, labels=None):  # labels: by the factors here
        self.factors_ = res.state
        self.cluster_centers_ = np.asarray(res.state.toarray(), dtype=Xd.dtype)
        self.inertia_ = float(value)
        self.n_iter_ = int(res.n_iter)
        self.history_ = res.history
        self.flops_ = int(res.state.flops)
        self.compression_ = float(res.state.compression)
        self.labels_ = self._output(assign_factors(Xd, self.factors_), lazy)

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
        {fitted_qkmeans}
        >>> bool((qk.predict(X) == qk.labels_).all())
        True
        """
        check_is_fitted(self)
        Xd, lazy = self._validate_X(X, reset=False)
        return self._output(assign_factors(Xd, self.factors_), lazy)

    @fill_doc
    def transform(self, X):
        """Euclidean distances to every centroid (via the factors), (n_samples, n_clusters).

        Parameters
        ----------
        {X_infer}

        Returns
        -------
        distances : ndarray or Dask array of shape (n_samples, n_clusters)

        Examples
        --------
        {fitted_qkmeans}
        >>> D = qk.transform(X[:3])
        >>> D.shape, bool((D.argmin(axis=1) == qk.predict(X[:3])).all())
        ((3, 4), True)
        """
        check_is_fitted(self)
        Xd, lazy = self._validate_X(X, reset=False)
        return self._output(factor_distances(Xd, self.factors_), lazy)

    @fill_doc
    def score(self, X, y=None, sample_weight=None):
        """Opposite of the QK-means objective of X (higher is better).

        Parameters
        ----------
        X : array-like, Dask array, Zarr array or store path of shape (n_samples, n_features)
        {score_y_weights}

        Returns
        -------
        float
            Minus the (weighted) QK-means objective (eq. 5) of X.

        Examples
        --------
        {fitted_qkmeans}
        >>> bool(np.isclose(qk.score(X), -qk.inertia_))
        True
        """
        check_is_fitted(self)
        Xd, _ = self._validate_X(X, reset=False)
        return -factor_inertia(Xd, self.factors_, split_every=self.split_every,
                               sample_weight=aligned_weights(sample_weight, Xd))

    # ------------------------------------------------------------- save/load
    def _get_state(self):
        arrays, meta = super()._get_state()
        arrays.update(pack_operator(self.factors_, "factors_")[1])
        meta.update({"flops_": self.flops_, "compression_": self.compression_})
        return arrays, meta

    def _set_state(self, arrays, meta):
        arrays = dict(arrays)
        self.factors_ = self._unpack(arrays, "factors_")
        for k in [k for k in arrays if k.startswith("factors_")]:
            del arrays[k]
        return super()._set_state(arrays, meta)

    def __sklearn_is_fitted__(self):
        return hasattr(self, "factors_")


def factorize_centroids(kmeans, sparsity=5, n_factors=None, *, method="hierarchical",
                        n_iter=300):
    """"K-means + palm4MSA": factorise a fitted model's centroids post hoc.

    Parameters
    ----------
    kmeans : fitted estimator with ``cluster_centers_`` of shape (K, D)
    sparsity : int, default=5
        Non-zeros per row and column of every factor (splincol).
    n_factors : int or None
        None: ⌈log2 max(K, D)⌉.
    method : {'hierarchical', 'palm4msa'}
    n_iter : int, default=300
        palm4MSA iterations (per level for 'hierarchical').

    Returns
    -------
    SparseFactors of shape (K, D)

    References
    ----------
    Giffon et al., QuicK-means (Machine Learning, 2021): the "K-means +
    palm4MSA" baseline.

    Examples
    --------
    >>> import dqkm
    >>> from sklearn.datasets import load_digits
    >>> X = load_digits().data
    >>> km = dqkm.KMeans(16, random_state=0, max_iter=10).fit(X)
    >>> V = dqkm.factorize_centroids(km, sparsity=3, n_iter=20)
    >>> V.shape, V.nnz < 16 * 64
    ((16, 64), True)
    """
    check_is_fitted(kmeans, "cluster_centers_")
    C = np.asarray(kmeans.cluster_centers_, dtype=np.float64)
    K, D = C.shape
    table = QKMeans._parameter_constraints
    validate_params(None, {"sparsity": sparsity, "n_factors": n_factors, "method": method,
                           "n_iter": n_iter},
                    {"sparsity": table["sparsity"], "n_factors": table["n_factors"],
                     "method": table["init_factorization"], "n_iter": table["palm_iter_init"]},
                    caller="factorize_centroids")
    proxy = QKMeans(K, sparsity=sparsity, n_factors=n_factors, init_factorization=method,
                    palm_iter_init=n_iter)
    q = proxy._check_qk_params(D)
    from ..kernels import default_constraints

    constraints = default_constraints(K, D, sparsity=sparsity, n_factors=q)
    if method == "hierarchical":
        return _hierarchical(C, constraints, n_iter=n_iter, budget="full").factors
    return proxy._factorize(C, constraints)
