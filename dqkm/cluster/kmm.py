"""K-Multiple-Means (Nie et al., 2019) and its exact fast variant F-KMM
(Fujiwara et al., 2024) as a scikit-learn estimator on Dask arrays."""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import replace
from numbers import Integral

import numpy as np
from sklearn.utils import check_array
from sklearn.utils.validation import check_is_fitted

from .._docstrings import fill_doc
from ..kernels.kmm_init import kmeanspp_pruned, svd_basis
from ..kernels.kmm_spectral import SVD_ALGORITHMS
from ..parallel.engine import compute
from ..parallel.persist import maybe_persist, release_persisted
from ..parallel.fingerprint import data_fingerprint
from ..parallel.finite import check_sample, checked_rows
from ..parallel.kmm import (KMMConfig, KMMSolver, KMMState, predict_labels,
                            prototype_distances)
from ..parallel.sampling import sample_rows
from .._validation import (PERSIST, SPLIT_EVERY, VERBOSE, Interval, InvalidParameterError,
                           Options, check_value, validate_params)
from ._base import DqkmClusterer, validate_sample_weight
from ._checkpoint import identity_from_params
from ._driver import IterativeAlgorithm, run_fit
from ._kmm_rows import OPTIONAL_ROWS, read_rows, write_rows

logger = logging.getLogger(__name__)

__all__ = ["KMultipleMeans"]

_INIT_OPTIONS = {"random", "k-means++"}
_SOLVERS = {"fast", "svd"}


class _KMMAlgorithm(IterativeAlgorithm):
    """K-Multiple-Means for the fit driver: the state is a :class:`KMMState`, one
    step is one outer iteration (:meth:`KMMSolver.step`); the rows of S are
    checkpointed by the workers (:mod:`dqkm.cluster._kmm_rows`)."""

    checkpoint_optional = OPTIONAL_ROWS

    def __init__(self, estimator, X, m, rank):
        self.estimator, self.m, self.rank = estimator, m, rank
        self.name = type(estimator).__name__
        self.max_iter, self.tol = estimator.max_iter, 0.0
        self.solver = KMMSolver(X, KMMConfig(
            n_clusters=estimator.n_clusters, n_neighbors=estimator.n_neighbors,
            pruned=estimator.solver == "fast", max_inner_iter=estimator.max_inner_iter,
            detect_outliers=bool(estimator.detect_outliers), split_every=estimator.split_every,
            svd_algorithm=estimator.svd_algorithm))

    def identity(self, X):
        return self.estimator._checkpoint_identity(X, self.m)

    def init_state(self, X, rng):
        if self.m != "auto":  # a pass that cannot fit is refused before the seeding's passes
            self.solver._check_memory(self.m, self.rank)
        A, mu, V, seeding = self.estimator._initial_prototypes(X, self.m, self.rank, rng)
        self.estimator._warn_few_prototypes(A.shape[0])
        return self.solver.init_state(A, mu, V, rng, seeding)

    def step(self, X, state, iteration, tol_abs):
        state, record = self.solver.step(state, iteration)
        return state, record, tol_abs

    def converged(self, record, tol_abs, history=()):
        """No row changed its nearest prototype in an outer iteration after the first."""
        return record["iteration"] > 1 and record["n_changed"] == 0

    def initial_tol_abs(self):
        return 0.0

    def pack(self, state):
        return state.pack()

    def unpack(self, arrays):
        return KMMState.unpack(arrays)

    def save_extra(self, state):
        return lambda directory: write_rows(state.rows, directory)

    def load_extra(self, state, directory, meta=None):
        self.estimator._warn_few_prototypes(state.prototypes.shape[0])
        rows = read_rows(directory, len(state.row_chunks))
        return self.solver.resume(replace(state, rows=rows))

    def finalize(self, X, result):
        return result.last_objective

    def describe_saved(self, run, iteration):
        return f"outer iteration {iteration}"



class KMultipleMeans(DqkmClusterer):
    """K-Multiple-Means clustering: m prototypes, c clusters of any shape.

    Each point is linked to its ``n_neighbors`` nearest prototypes with the
    CAN weights of eq. (10); the weights are re-solved with a spectral term
    weighted by β until the bipartite graph of points and prototypes has
    exactly ``n_clusters`` connected components; the prototypes then move to
    the weighted means of their points (eq. 14), until no point changes its
    nearest prototype.  The clusters are the connected components.

    ``solver='fast'`` (F-KMM) and ``solver='svd'`` (the original algorithm)
    follow the same rules (docs/ALGORITHMS.md) and give the same clusters,
    neighbour sets and β trajectory (Theorem 4.14); 'fast' never forms the
    n × m SVD and prunes exact distances with a rank-d′ lower bound.

    Parameters
    ----------
    n_clusters : int, default=2
        c, at least 2.
    n_prototypes : int, 'auto' or None, default=None
        m, with ``n_clusters < m ≤ n_samples``.  None: ⌊√(n·c)⌋.  'auto': the
        adaptive k-means++ rule of Algorithm 6 ("F-KMM#"), run on a sample.
    n_neighbors : int, default=5
        l, in [1, m − 1].
    init : {'random', 'k-means++'} or ndarray of shape (m, n_features), default='random'
        'random': m distinct rows (Algorithm 4); 'k-means++': k-means++ with
        SVD-pruned distance updates (Algorithm 5, "F-KMM++") on a uniform
        sample of ``max(20·m, 20000)`` rows (all rows when fewer).
    detect_outliers : bool, default=False
        Algorithm 7 ("F-KMM-OD"): points with fewer than l/2 of their l
        nearest prototypes within θ are outliers; they are left out of the
        graph and labelled −1.  θ = mean + 2 standard deviations of the
        distances between points and their l nearest prototypes (the paper
        uses the mean; see docs/ALGORITHMS.md).  The paper pairs it with
        ``n_prototypes='auto'``.
    solver : {'fast', 'svd'}, default='fast'
    svd_algorithm : {'auto', 'dense', 'arpack'}, default='auto'
        How ``solver='svd'`` computes the top-c singular vectors of S̃ at each
        F update (ignored by 'fast').  'dense': a dense LAPACK SVD of the
        n × m matrix, O(n·m²) time and 8·n·m bytes on the driver — the
        original K-Multiple-Means, the baseline of the F-KMM paper.
        'arpack': ARPACK on the sparse S̃.  'auto': dense while
        n·m ≤ 4·10⁷, ARPACK above.  All three give the same F up to
        rounding (hence, in practice, the same clusters).
    svd_rank : int or None, default=None
        d′ of the lower bound; None: ⌈log2 d⌉ (at least 1).
    max_iter : int, default=30
        Outer iterations (prototype updates).
    max_inner_iter : int, default=30
        β updates per outer iteration.
    random_state : int, RandomState instance or None
    persist : 'auto', bool, default='auto'
    split_every : int or None, default=None
        Fan-in of the tree reductions (None: 8).
    verbose : int, default=0
        Progress shown during fit, as :class:`dqkm.KMeans` (see :mod:`dqkm.progress`).

    Attributes
    ----------
    labels_ : ndarray or Dask array of shape (n_samples,)
        Connected component of each point, 0 … b − 1 (−1: outlier).
    prototypes_ : ndarray of shape (m, n_features)
    prototype_labels_ : ndarray of shape (m,)
        Cluster of each prototype (−1: a prototype with no point).
    similarity_ : tuple (neighbors, weights) of arrays of shape (n_samples, n_neighbors)
        The rows of S: neighbour prototype indices (int32) and CAN weights,
        aligned with X (Dask in → Dask out).
    beta_ : float
        β at the end.
    alpha_ : float
        α (text below eq. 12), from the β = 0 graph.
    n_components_ : int
        b of the final graph (= n_clusters unless a ConvergenceWarning was issued).
    n_outliers_ : int
    history_ : list of dict
        One dict per outer iteration: ``objective`` (Σ s_ij·D_ij + α‖S‖², the
        objective of eq. 4 at the final S of the iteration), ``shift`` (Σ of
        squared prototype moves), ``seconds``, ``empty_clusters`` (prototypes
        with no point), ``beta`` and ``n_components`` (β and b at the end of the
        iteration, as :func:`dqkm.monitor.plot_history` reads them),
        ``beta_steps`` and ``n_components_steps`` (one entry per pass),
        ``step_seconds``, ``n_changed`` (points whose nearest prototype
        changed), ``inner_steps``, ``distances_exact`` / ``distances_total``,
        ``eig_lemma`` / ``eig_computed`` / ``eig_naive`` / ``eig_pruned``,
        ``f_updates`` (computations of F, i.e. steps with b < c) and
        ``spectral_seconds`` (driver time in them: Algorithm 2 or the SVD).
    n_iter_ : int
    n_features_in_ : int

    References
    ----------
    F. Nie, C.-L. Wang, X. Li, *K-Multiple-Means: A Multiple-Means Clustering
    Method with Specified K Clusters*, KDD 2019.
    Y. Fujiwara et al., *Efficient Algorithm for K-Multiple-Means*, SIGMOD 2024
    (eqs. 8, 10, 14, 32, 50, 56; Lemmas 4.1, 4.3, 4.5, 4.8, 4.10; Algorithms 1–7).

    Examples
    --------
    >>> import dqkm
    >>> from sklearn.datasets import make_moons
    >>> X, y = make_moons(500, noise=0.05, random_state=0)
    >>> kmm = dqkm.KMultipleMeans(2, random_state=0).fit(X)
    >>> sorted(set(kmm.labels_.tolist()))
    [0, 1]
    """

    _parameter_constraints = {
        "n_clusters": [Interval(Integral, 2, None, closed="left")],
        # n_clusters < n_prototypes <= n_samples and n_neighbors < m: checked by fit
        "n_prototypes": [Options(str, {"auto"}), Interval(Integral, 1, None, closed="left"),
                         None],
        "n_neighbors": [Interval(Integral, 1, None, closed="left")],
        "init": [Options(str, _INIT_OPTIONS), "array-like"],
        "detect_outliers": ["boolean"],
        "solver": [Options(str, _SOLVERS)],
        "svd_algorithm": [Options(str, set(SVD_ALGORITHMS))],
        "svd_rank": [Interval(Integral, 1, None, closed="left"), None],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "max_inner_iter": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
        "persist": PERSIST,
        "split_every": SPLIT_EVERY,
        "verbose": VERBOSE,
    }

    def __init__(self, n_clusters=2, *, n_prototypes=None, n_neighbors=5, init="random",
                 detect_outliers=False, solver="fast", svd_algorithm="auto", svd_rank=None,
                 max_iter=30, max_inner_iter=30, random_state=None, persist="auto",
                 split_every=None, verbose=0):
        self.n_clusters = n_clusters
        self.n_prototypes = n_prototypes
        self.n_neighbors = n_neighbors
        self.init = init
        self.detect_outliers = detect_outliers
        self.solver = solver
        self.svd_algorithm = svd_algorithm
        self.svd_rank = svd_rank
        self.max_iter = max_iter
        self.max_inner_iter = max_inner_iter
        self.random_state = random_state
        self.persist = persist
        self.split_every = split_every
        self.verbose = verbose

    # ------------------------------------------------------------------ params
    def _check_params(self, n_samples, n_features):
        """The data-dependent checks (after :func:`validate_params`): the number of
        prototypes m (or 'auto') and the rank d′ of the lower bound."""
        owner = type(self).__name__
        c = self.n_clusters
        init_m = None if isinstance(self.init, str) else int(np.asarray(self.init).shape[0])
        if self.n_prototypes is None:
            m = init_m if init_m is not None else int(math.isqrt(n_samples * c))
        elif isinstance(self.n_prototypes, str):  # 'auto'
            if init_m is not None:
                raise InvalidParameterError(
                    f"The 'n_prototypes' parameter of {owner} cannot be 'auto' with an init "
                    "array (which fixes the number of prototypes): pass n_prototypes=None.")
            m = "auto"
        else:
            m = check_value("n_prototypes", self.n_prototypes,
                            [Interval(Integral, c + 1, n_samples)], owner)
            if init_m is not None and init_m != m:
                raise InvalidParameterError(
                    f"The 'init' array of {owner} has {init_m} rows but n_prototypes={m}: "
                    "pass n_prototypes=None or an init array of n_prototypes rows.")
        if m != "auto" and not c < m <= n_samples:
            raise InvalidParameterError(
                f"The number of prototypes of {owner} must be in the range [n_clusters + 1, "
                f"n_samples] = [{c + 1}, {n_samples}]. Got {m} instead (n_prototypes=None "
                "uses floor(sqrt(n_samples * n_clusters))).")
        if m != "auto":
            check_value("n_neighbors", self.n_neighbors, [Interval(Integral, 1, m - 1)], owner)
        check_value("svd_rank", self.svd_rank, [Interval(Integral, 1, n_features), None], owner)
        rank = self.svd_rank if self.svd_rank is not None else \
            max(1, math.ceil(math.log2(n_features))) if n_features > 1 else 1
        return m, int(min(rank, n_features))

    # ---------------------------------------------------------------- fitting
    def _initial_prototypes(self, X, m, rank, rng):
        """Prototypes, the SVD basis and the seeding statistics."""
        n, d = X.shape
        c = self.n_clusters
        m_basis = m if m != "auto" else int(math.isqrt(n * c))
        basis_rows = sample_rows(X, max(m_basis, 2), rng).astype(np.float64)
        check_sample(basis_rows)  # NaN, infinity, or squares that overflow float64
        mu, V = svd_basis(basis_rows, rank)
        info = {"distances_exact": 0, "distances_total": 0}
        if not isinstance(self.init, str):
            A = check_array(self.init, dtype=[np.float64, np.float32], input_name="init")
            if A.shape != (m, d):
                raise ValueError(f"The 'init' array of {type(self).__name__} must have shape "
                                 f"(n_prototypes, n_features) = ({m}, {d}). Got {A.shape} "
                                 "instead.")
            return A.astype(np.float64), mu, V, info
        if self.init == "random" and m != "auto":
            return basis_rows, mu, V, info  # Algorithm 4, lines 1 and 5: A = X′
        cap = m if m != "auto" else n
        sample = sample_rows(X, max(20 * m_basis, 20_000), rng)
        check_sample(sample)
        seed = kmeanspp_pruned(sample, min(cap, sample.shape[0]), rng, mu=mu, V=V,
                               adaptive=m == "auto",
                               min_prototypes=max(c + 1, self.n_neighbors + 1))
        info = {"distances_exact": seed.n_exact, "distances_total": seed.n_pairs}
        A = np.asarray(sample[seed.indices], dtype=np.float64)
        if A.shape[0] <= max(c, self.n_neighbors):
            raise ValueError(f"k-means++ seeding found only {A.shape[0]} distinct prototypes; "
                             f"need more than max(n_clusters, n_neighbors) = "
                             f"{max(c, self.n_neighbors)}. X has too few distinct rows.")
        return A, mu, V, info

    def _warn_few_prototypes(self, m):
        c, ell = self.n_clusters, self.n_neighbors
        if c * ell > m:
            warnings.warn(f"n_clusters * n_neighbors = {c * ell} exceeds the {m} "
                          "prototypes: every point links to n_neighbors prototypes, so a "
                          "cluster needs at least that many and the graph can hardly split "
                          "into n_clusters components. Use more prototypes or fewer "
                          "neighbours.", UserWarning, stacklevel=5)

    @fill_doc
    def fit(self, X, y=None, sample_weight=None, *, callback=None, checkpoint=None,
            resume=False):
        """Compute the K-Multiple-Means clustering.

        Parameters
        ----------
        {X_fit}
        sample_weight : None or array-like of shape (n_samples,) of equal weights
            The K-Multiple-Means model defines no weight per sample (its
            similarity graph gives every sample the same total similarity):
            weights that differ are refused with an
            :class:`~dqkm.exceptions.InvalidParameterError`; equal weights
            change nothing and are accepted (checked as by :meth:`dqkm.KMeans.fit`).
        callback : callable, optional
            ``callback(record)`` after every outer iteration (``record`` is the
            iteration's ``history_`` entry).
        checkpoint : str or PathLike, optional
            A local directory where the state after every outer iteration is
            written as a Zarr group, atomically: the driver state (prototypes,
            β, α, θ, SᵀS, column sums and SᵀX of the current S, the RNG
            state, history, the SVD basis and seeding statistics) and, written
            by the workers, every chunk's rows of S with their reference
            nearest prototypes, outlier flags and (``solver='fast'``)
            projections.  On a multi-machine cluster the directory must be on
            a filesystem the driver and all workers share, like the Zarr data.
            The path rules, the lock and the identity (every parameter but
            ``persist`` and ``verbose``, and ``svd_algorithm`` with
            ``solver='fast'``; X's shape, dtype, row chunks and fingerprint:
            one extra pass over X, made only with a checkpoint) are those of
            :meth:`dqkm.KMeans.fit`.
        resume : bool, default=False
            Continue from ``checkpoint`` if it holds a state (without redoing
            the initialisation); the result is the same as an uninterrupted fit
            with the same seed.  A checkpoint of another estimator, of other
            parameters or of another data set (or the same data in other row
            chunks) is refused with a ``CheckpointMismatchError``; a damaged
            one (a missing or altered array, a missing or truncated file of
            the rows of S, a missing state) with a ``CheckpointError``.

        Returns
        -------
        self

        Examples
        --------
        {fitted_kmm}
        >>> kmm.prototypes_.shape, kmm.labels_.shape
        ((10, 2), (100,))
        """
        validate_params(self)
        Xd, lazy = self._validate_X(X, reset=True)
        m, rank = self._check_params(Xd.shape[0], Xd.shape[1])
        self._check_sample_weight(sample_weight, Xd)
        Xd, persisted = maybe_persist(Xd, self.persist)
        algorithm = _KMMAlgorithm(self, Xd, m, rank)
        run = run_fit(algorithm, Xd, random_state=self.random_state, verbose=self.verbose,
                      callback=None if callback is None else (lambda rec, state: callback(rec)),
                      checkpoint=checkpoint, resume=resume, inputs=X).result
        state = run.state
        res = algorithm.solver.result(state, run.n_iter)
        self.prototypes_ = res.prototypes.astype(Xd.dtype)
        self.prototype_labels_ = res.proto_comp
        self.n_prototypes_ = int(state.prototypes.shape[0])
        self.beta_ = res.beta
        self.alpha_ = res.alpha
        self.n_components_ = res.n_components
        self.n_outliers_ = res.n_outliers
        self.n_iter_ = run.n_iter
        self.history_ = run.history
        self.seeding_ = dict(state.seeding)
        self.labels_ = self._output(res.labels, lazy)
        self.similarity_ = (self._output(res.neighbors, lazy), self._output(res.weights, lazy))
        release_persisted(self, persisted)
        return self

    def _check_sample_weight(self, sample_weight, Xd):
        """Refuse weights that differ (see ``fit``); one pass over Dask weights."""
        w = validate_sample_weight(sample_weight, Xd, type(self).__name__)
        if w is None:
            return
        low, high = compute(w.min(), w.max())
        if low != high:
            raise InvalidParameterError(
                f"{type(self).__name__}.fit got sample_weight with different values (from "
                f"{float(low)!r} to {float(high)!r}); the K-Multiple-Means model (Nie, Wang "
                "& Li, KDD 2019) has no weight per sample: its similarity graph gives every "
                "sample the same total similarity. Fit without sample_weight, repeat rows to "
                "weigh them, or use dqkm.KMeans, which takes sample_weight.")

    def _checkpoint_identity(self, Xd, m):
        """What a checkpoint must match (see :func:`identity_from_params`): every
        constructor parameter but ``persist`` and ``verbose`` (and
        ``svd_algorithm``, which ``solver='fast'`` ignores), the resolved number
        of prototypes, and X's shape, dtype, row chunks and fingerprint (one
        extra pass over X, made only when a checkpoint is used)."""
        ignored = ("svd_algorithm",) if self.solver == "fast" else ()
        return identity_from_params(
            self, Xd, ignored=ignored, n_prototypes=m if isinstance(m, str) else int(m),
            random_state=(self.random_state
                          if isinstance(self.random_state, (int, np.integer)) else None),
            fingerprint=data_fingerprint(Xd, split_every=self.split_every))

    @fill_doc
    def predict(self, X):
        """Cluster of each new point's nearest prototype (squared Euclidean).

        Prototypes with no point (label −1) are ignored; outlier detection is
        not applied to new points.  A block of Dask input holding NaN or
        infinity raises :class:`~dqkm.exceptions.DataError` when it is computed.

        Parameters
        ----------
        {X_infer}

        Returns
        -------
        {labels}

        Examples
        --------
        {fitted_kmm}
        >>> sorted(set(kmm.predict(X).tolist()))
        [0, 1]
        """
        check_is_fitted(self)
        Xd, lazy = self._validate_X(X, reset=False)
        if lazy:  # in-memory input was checked whole by its validation
            Xd = checked_rows(Xd)
        return self._output(predict_labels(Xd, self.prototypes_, self.prototype_labels_), lazy)

    @fill_doc
    def transform(self, X):
        """Euclidean distances to every prototype, shape (n_samples, n_prototypes).

        Refuses NaN or infinity as :meth:`predict` does.

        Parameters
        ----------
        {X_infer}

        Returns
        -------
        distances : ndarray or Dask array of shape (n_samples, n_prototypes)

        Examples
        --------
        {fitted_kmm}
        >>> kmm.transform(X[:3]).shape  # one column per prototype
        (3, 10)
        """
        check_is_fitted(self)
        Xd, lazy = self._validate_X(X, reset=False)
        if lazy:
            Xd = checked_rows(Xd)
        return self._output(prototype_distances(Xd, self.prototypes_), lazy)

    # ------------------------------------------------------------- save/load
    def _get_state(self):
        """Arrays and JSON metadata for :func:`dqkm.save` (lazy labels are not saved)."""
        check_is_fitted(self)
        arrays = {"prototypes_": self.prototypes_, "prototype_labels_": self.prototype_labels_}
        if isinstance(getattr(self, "labels_", None), np.ndarray):
            arrays["labels_"] = self.labels_
            arrays["similarity_neighbors_"] = self.similarity_[0]
            arrays["similarity_weights_"] = self.similarity_[1]
        meta = {k: getattr(self, k) for k in (
            "beta_", "alpha_", "n_components_", "n_outliers_", "n_iter_", "n_features_in_",
            "n_prototypes_", "history_", "seeding_")}
        return arrays, meta

    def _set_state(self, arrays, meta):
        self.prototypes_ = arrays["prototypes_"]
        self.prototype_labels_ = arrays["prototype_labels_"]
        if "labels_" in arrays:
            self.labels_ = arrays["labels_"]
            self.similarity_ = (arrays["similarity_neighbors_"], arrays["similarity_weights_"])
        for k, v in meta.items():
            setattr(self, k, v)
        return self

    @property
    def _n_features_out(self):
        return self.prototypes_.shape[0]

    def __sklearn_is_fitted__(self):
        return hasattr(self, "prototypes_")
