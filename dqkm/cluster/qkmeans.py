"""QuicK-means: K-means whose centroid matrix is a product of sparse factors."""

from __future__ import annotations

import logging
import math

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ..io import pack_operator, unpack_operator
from ..parallel.qkmeans import assign_factors, factor_distances, factor_inertia, qkmeans_step
from ._base import check_param
from .kmeans import KMeans, LloydAlgorithm

logger = logging.getLogger(__name__)

__all__ = ["QKMeans"]

_INIT_FACTORIZATION = {"hierarchical", "palm4msa"}


def _hierarchical(A, constraints, *, n_iter, fixed_left=None):
    """Hierarchical palm4MSA as QK-means runs it: adaptive step in the global runs
    and the geometric residual rule (both in docs/ALGORITHMS.md, with the objective
    ratios they buy on digits)."""
    from ..kernels import default_residual_constraints, hierarchical_palm4msa

    residuals = default_residual_constraints(constraints, rule="geometric")
    return hierarchical_palm4msa(A, constraints, residual_constraints=residuals, n_iter=n_iter,
                                 fixed_left=fixed_left, adaptive_step=True)


def _palm(A, constraints, *, n_iter, init=None, fixed_left=None):
    """palm4MSA as QK-means runs it: the adaptive step (docs/ALGORITHMS.md)."""
    from ..kernels import palm4msa

    return palm4msa(A, constraints, n_iter=n_iter, init=init, fixed_left=fixed_left,
                    adaptive_step=True)


def _warm_or_hierarchical(A, constraints, *, n_iter, init, fixed_left, n_iter_unweighted=None):
    """The best of three refits of ``A = D_√n·U`` (lowest ‖A − D_√n·V‖):

    1. palm4MSA warm-started from ``init`` (Algorithm 1);
    2. hierarchical palm4MSA from scratch on the weighted target ``A``;
    3. hierarchical palm4MSA from scratch on the cluster means ``U`` themselves
       (``n_iter_unweighted`` iterations per level — what "K-means + palm4MSA"
       does to K-means's centroids), then palm4MSA on ``A`` warm-started from it.

    The warm-started run never ends above its starting error (palm4MSA's
    safeguard), and the lowest of the errors is kept, so the QK-means
    objective stays non-increasing (journal, Proposition 1).  Rows of ``U``
    with weight 0 (empty clusters) are the rows of ``init`` (they do not count
    in the weighted error).
    """
    warm = _palm(A, constraints, n_iter=n_iter, init=init, fixed_left=fixed_left)
    fresh = _hierarchical(A, constraints, n_iter=n_iter, fixed_left=fixed_left)
    best = fresh if fresh.errors[-1] < warm.errors[-1] else warm
    w = np.asarray(fixed_left, dtype=np.float64)
    U = init.toarray().astype(np.float64)
    nz = w > 0
    U[nz] = A[nz] / w[nz, None]
    plain = _hierarchical(U, constraints, n_iter=n_iter if n_iter_unweighted is None
                          else n_iter_unweighted)
    polished = _palm(A, constraints, n_iter=n_iter, init=plain.factors, fixed_left=w)
    return polished if polished.errors[-1] < best.errors[-1] else best


def _solver_for(iteration, hierarchical_refits, n_iter_unweighted=None):
    """The refit of Lloyd iteration ``iteration`` (from 1):
    :func:`_warm_or_hierarchical` in iterations ``1 … hierarchical_refits``,
    warm-started palm4MSA after."""
    if iteration > hierarchical_refits:
        return _palm

    def solve(A, constraints, *, n_iter, init, fixed_left):
        return _warm_or_hierarchical(A, constraints, n_iter=n_iter, init=init,
                                     fixed_left=fixed_left, n_iter_unweighted=n_iter_unweighted)
    return solve


def _refit_solver(hierarchical_refits, start_iter, n_iter_unweighted=None):
    """The solvers of iterations ``start_iter + 1, start_iter + 2, …``, one per
    call (see :func:`_solver_for`)."""
    iteration = [start_iter]

    def solve(A, constraints, *, n_iter, init, fixed_left):
        iteration[0] += 1
        return _solver_for(iteration[0], hierarchical_refits, n_iter_unweighted)(
            A, constraints, n_iter=n_iter, init=init, fixed_left=fixed_left)

    return solve


class _QKMeansAlgorithm(LloydAlgorithm):
    """QK-means iterations for the fit driver: the state is the sparse factors;
    one step is one pass over X then the refit of the factors, by
    :func:`_warm_or_hierarchical` in iterations ``1 … hierarchical_refits``
    and warm-started palm4MSA after."""

    def __init__(self, estimator, constraints):
        super().__init__(estimator)
        self.constraints = constraints

    def init_state(self, X, rng):
        est = self.estimator
        return est._factorize(est._initial_centers(X, rng), self.constraints)

    def step(self, X, state, iteration, tol_abs):
        return qkmeans_step(X, state, iteration, self.constraints,
                            palm4msa=_solver_for(iteration, self.estimator.hierarchical_refits,
                                                 self.estimator.palm_iter_init),
                            tol=self.tol, tol_abs=tol_abs,
                            palm_iter=self.estimator.palm_iter, split_every=self.split_every)

    def pack(self, state):
        return state.to_arrays()

    def unpack(self, arrays):
        return unpack_operator("SparseFactors", arrays, "")

    def finalize(self, X, result):
        if result.shift == 0:
            return result.last_objective
        return factor_inertia(X, result.state, split_every=self.split_every)


class QKMeans(KMeans):
    """QuicK-means: centroids V = λ·S1···SQ constrained to sparse factors.

    Assigning a point costs one application of the sparse factors,
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
    palm_iter : int, default=50
        palm4MSA iterations per Lloyd iteration (warm-started); see
        docs/BENCHMARKS.md for the trade-off that chose it.
    palm_iter_init : int, default=300
        palm4MSA iterations of the initial factorisation.
    hierarchical_refits : int, default=1
        In Lloyd iterations ``1 … hierarchical_refits``, the factors are
        refitted to ``D_√n·U`` three ways — palm4MSA warm-started from the
        previous factors (Algorithm 1); hierarchical palm4MSA from scratch on
        ``D_√n·U`` (``palm_iter`` iterations per level); hierarchical
        palm4MSA on the cluster means ``U`` (``palm_iter_init`` per level,
        as "K-means + palm4MSA" does to K-means's centroids) polished by
        ``palm_iter`` warm-started iterations on ``D_√n·U`` — and the best fit
        is kept, so the objective stays non-increasing; later iterations use
        the warm start only.  0: Algorithm 1 as published.  Such an iteration
        costs about ``2(Q − 1)(palm_iter + palm_iter_init)`` palm4MSA
        iterations, about as much as the initial factorisation.  The first
        iteration matters most: its target moved far from the k-means++
        centroids the init factorised.  ``hierarchical_refits >= max_iter``
        refits in every iteration: on digits (K = 10, s = 5) QK-means then
        ends below K-means + palm4MSA on average (the journal's Table 3; on 5
        of 5 seeds of the reproduction's 80 % splits, on 3 of 5 on the whole
        data set and within 0.16 % on the other 2); see docs/BENCHMARKS.md.
    max_iter, tol, random_state, persist, split_every, n_init, oversampling_factor,
    init_max_iter, verbose : as :class:`dqkm.KMeans`.

    Attributes
    ----------
    factors_ : SparseFactors
        V = λ·S1···SQ of shape (n_clusters, n_features).
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

    def __init__(self, n_clusters=8, *, sparsity=5, n_factors=None, init="k-means++",
                 init_factorization="hierarchical", palm_iter=50, palm_iter_init=300,
                 hierarchical_refits=1, max_iter=300, tol=1e-4, random_state=None, persist="auto",
                 split_every=None,
                 n_init="auto", oversampling_factor=2.0, init_max_iter=None, verbose=0):
        super().__init__(n_clusters, init=init, n_init=n_init, max_iter=max_iter, tol=tol,
                         random_state=random_state, persist=persist, split_every=split_every,
                         oversampling_factor=oversampling_factor, init_max_iter=init_max_iter,
                         verbose=verbose)
        self.sparsity = sparsity
        self.n_factors = n_factors
        self.init_factorization = init_factorization
        self.palm_iter = palm_iter
        self.palm_iter_init = palm_iter_init
        self.hierarchical_refits = hierarchical_refits

    def _check_qk_params(self, n_features):
        owner = type(self).__name__
        K = self.n_clusters
        check_param("sparsity", self.sparsity, owner, low=1, high=min(K, n_features))
        check_param("n_factors", self.n_factors, owner, low=2, allow_none=True)
        check_param("init_factorization", self.init_factorization, owner, kind=None,
                    options=_INIT_FACTORIZATION)
        check_param("palm_iter", self.palm_iter, owner, low=1)
        check_param("palm_iter_init", self.palm_iter_init, owner, low=1)
        check_param("hierarchical_refits", self.hierarchical_refits, owner, low=0)
        n_factors = self.n_factors
        if n_factors is None:
            n_factors = max(2, math.ceil(math.log2(max(K, n_features))))
        return n_factors

    def _factorize(self, centers, constraints):
        A = np.asarray(centers, dtype=np.float64)
        if self.init_factorization == "hierarchical":
            return _hierarchical(A, constraints, n_iter=self.palm_iter_init).factors
        return _palm(A, constraints, n_iter=self.palm_iter_init).factors

    def _check_extra_params(self, n_features):
        self._check_qk_params(n_features)

    def _algorithm(self, n_features):
        from ..kernels import default_constraints

        constraints = default_constraints(self.n_clusters, n_features, sparsity=self.sparsity,
                                          n_factors=self._check_qk_params(n_features))
        return _QKMeansAlgorithm(self, constraints)

    def _unpack(self, arrays, prefix):
        return unpack_operator("SparseFactors", arrays, prefix)

    def _set_fitted(self, Xd, lazy, value, res):
        self.factors_ = res.state
        self.cluster_centers_ = np.asarray(res.state.toarray(), dtype=Xd.dtype)
        self.inertia_ = float(value)
        self.n_iter_ = int(res.n_iter)
        self.history_ = res.history
        self.flops_ = int(res.state.flops)
        self.compression_ = float(res.state.compression)
        self.labels_ = self._output(assign_factors(Xd, self.factors_), lazy)

    # ------------------------------------------------------------- inference
    def predict(self, X):
        """Nearest centroid of each sample, computed with the sparse factors."""
        check_is_fitted(self)
        Xd, lazy = self._validate_X(X, reset=False)
        return self._output(assign_factors(Xd, self.factors_), lazy)

    def transform(self, X):
        """Euclidean distances to every centroid (via the factors), (n_samples, n_clusters)."""
        check_is_fitted(self)
        Xd, lazy = self._validate_X(X, reset=False)
        return self._output(factor_distances(Xd, self.factors_), lazy)

    def score(self, X, y=None):
        """Opposite of the QK-means objective of X (higher is better)."""
        check_is_fitted(self)
        Xd, _ = self._validate_X(X, reset=False)
        return -factor_inertia(Xd, self.factors_, split_every=self.split_every)

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
    """
    check_is_fitted(kmeans, "cluster_centers_")
    C = np.asarray(kmeans.cluster_centers_, dtype=np.float64)
    K, D = C.shape
    proxy = QKMeans(K, sparsity=sparsity, n_factors=n_factors, init_factorization=method,
                    palm_iter_init=n_iter)
    q = proxy._check_qk_params(D)
    from ..kernels import default_constraints

    return proxy._factorize(C, default_constraints(K, D, sparsity=sparsity, n_factors=q))
