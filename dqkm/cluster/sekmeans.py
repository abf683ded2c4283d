"""Sparse-embedded K-means (SE) and random-projection K-means (RP)."""

from __future__ import annotations

import logging
import math
from numbers import Integral

import numpy as np
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from .._docstrings import fill_doc
from ..kernels.embedding import (DenseEmbedding, SparseEmbedding, draw_dense_embedding,
                                 draw_sparse_embedding)
from ..parallel.embedding import embed, embed_assign, original_space_moments, pass_tile_bytes
from ..parallel.fingerprint import data_fingerprint
from ..parallel.finite import checked_rows
from .._validation import (VERBOSE, Interval, InvalidParameterError, Options, check_n_samples,
                           validate_params)
from ._base import DqkmClusterer, validate_sample_weight
from ._checkpoint import identity_from_params
from ._driver import Composed, stored_identity
from .kmeans import KMeans

logger = logging.getLogger(__name__)

__all__ = ["SparseEmbeddedKMeans", "default_n_components"]

# ε and δ of the default target dimension (Liu et al. 2017, Theorem 1).
DEFAULT_EPS = 0.5
DEFAULT_DELTA = 0.1
_EMBEDDINGS = {"sparse", "dense"}


def default_n_components(n_clusters, n_features, eps=DEFAULT_EPS, delta=DEFAULT_DELTA):
    """``⌈max((k + log₂(1/δ))/ε², 6/(ε²δ))⌉``, clipped to ``[k, n_features]``.

    The constant hidden in the paper's O(·) is taken as 1; with the defaults
    ε = 0.5, δ = 0.1 this is ``max(4(k + 3.32), 240)``.
    """
    d = math.ceil(max((n_clusters + math.log2(1.0 / delta)) / eps**2, 6.0 / (eps**2 * delta)))
    return int(max(n_clusters, min(d, n_features)))


class _EmbeddedKMeans(Composed):
    """KMeans's iterations on the embedding X̂, under the identity of the
    SparseEmbeddedKMeans fit: the embedded K-means's parameters, the
    embedding's (``owner``), the fingerprint of the original X and that of
    the weights, if any."""

    def __init__(self, algorithm, owner, X_original):
        super().__init__(algorithm)
        self.name = owner["estimator"]
        self.owner, self.X_original = owner, X_original

    def identity(self, X):
        fingerprint = data_fingerprint(self.X_original, split_every=self.inner.split_every)
        extra = {}
        weights = getattr(self.inner, "sample_weight", None)
        if weights is not None:
            extra["sample_weight"] = data_fingerprint(weights[:, None])
        identity = identity_from_params(self.inner.estimator, X, fingerprint=fingerprint,
                                        **extra)
        identity.update(self.owner)
        return identity


class SparseEmbeddedKMeans(DqkmClusterer):
    """K-means on a random low-dimensional embedding of X (SE, or the RP baseline).

    ``embedding='sparse'`` (SE, Liu, Shen & Tsang 2017, Algorithm 1) embeds
    ``X̂ = X·Q·Φ``: Q = diag(±1) Rademacher signs, Φ the d×d̃ hashing matrix
    of a uniform hash h: [d] → [d̃].  Each chunk is embedded in
    O(nnz(chunk)) — column j of X is added, times its sign, into column h(j)
    — and the d×d̃ matrix is never formed.  ``embedding='dense'`` is the RP
    method of Boutsidis et al. (2015): ``X̂ = X·R`` with i.i.d. ±1/√d̃
    entries, one GEMM per chunk.  K-means (``dqkm.KMeans``) then runs on the
    dense n×d̃ X̂; the centers in the original space are the means of the
    original rows of each embedded cluster (one more pass over X).

    X may be dense (NumPy / Dask / Zarr) or sparse: a ``scipy.sparse`` CSR
    or COO matrix, or a Dask array of CSR row chunks (see :mod:`dqkm.sparse`).

    Parameters
    ----------
    n_clusters : int, default=8
    n_components : 'auto' or int, default='auto'
        The target dimension d̃.  'auto': ``⌈max((k + log₂(1/δ))/ε²,
        6/(ε²δ))⌉`` with ε = 0.5 and δ = 0.1 (Theorem 1, constant 1),
        clipped to ``[n_clusters, n_features]``.  An int must be at least
        ``n_clusters``, and at most ``n_features`` for ``'dense'``.
    embedding : {'sparse', 'dense'}, default='sparse'
        'sparse': SE (hash and signs); 'dense': RP (±1/√d̃ matrix).
    kmeans : dict or None, default=None
        Parameters of the :class:`dqkm.KMeans` run in the embedded space
        (``init``, ``n_init``, ``max_iter``, ``tol``, ``persist``,
        ``split_every``, …; not ``n_clusters``).  Its ``random_state``
        defaults to one derived from ``random_state``; ``split_every`` is
        also used for the pass back to the original space.
    random_state : int, RandomState instance or None
        Seeds the embedding and, unless given in ``kmeans``, the K-means run.
    verbose : int, default=0
        Progress of the embedded K-means's iterations, as :class:`dqkm.KMeans`
        shows it (unless ``kmeans`` sets its own ``verbose``).

    Attributes
    ----------
    embedding_ : SparseEmbedding or DenseEmbedding
        SE: ``hash`` (int64, shape (n_features,)) and ``signs`` (±1.0, shape
        (n_features,)); RP: ``matrix`` of shape (n_features, n_components).
    n_components_ : int
    embedded_centers_ : ndarray of shape (n_clusters, n_components)
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        Means of the original rows of each cluster (zero for a cluster that
        ends empty, listed in ``empty_clusters_``).
    labels_ : ndarray of shape (n_samples,) or Dask array (lazy, aligned with X)
    inertia_ : float
        ``‖X − D̂D̂ᵀX‖²_F``: the K-means cost, in the original space, of the
        partition found in the embedded space (exact, float64).
    embedded_inertia_ : float
        The embedded K-means's inertia (cost of the partition on X̂).
    n_iter_ : int
    history_ : list of dict
        The embedded K-means's history (``objective``, ``shift``,
        ``seconds``, ``empty_clusters`` per iteration).
    empty_clusters_ : list of int
    kmeans_ : dqkm.KMeans
        The fitted K-means on X̂.
    n_features_in_ : int

    References
    ----------
    Liu, Shen & Tsang (2017), Sparse Embedded k-Means Clustering, NeurIPS,
    Algorithm 1 and Theorem 1.
    Boutsidis, Zouzias, Mahoney & Drineas (2015), Randomized dimensionality
    reduction for k-means clustering, IEEE Trans. Inf. Theory 61(2).

    Examples
    --------
    >>> import numpy as np, dqkm
    >>> rng = np.random.default_rng(0)
    >>> X = np.vstack([rng.normal(0, 1, (50, 300)), rng.normal(6, 1, (50, 300))])
    >>> se = dqkm.SparseEmbeddedKMeans(2, n_components=32, random_state=0).fit(X)
    >>> se.embedded_centers_.shape, se.cluster_centers_.shape
    ((2, 32), (2, 300))
    >>> len(set(se.labels_[:50])), len(set(se.labels_[50:]))
    (1, 1)
    """

    _parameter_constraints = {
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "n_components": [Options(str, {"auto"}), Interval(Integral, 1, None, closed="left")],
        "embedding": [Options(str, _EMBEDDINGS)],
        "kmeans": [dict, None],
        "random_state": ["random_state"],
        "verbose": VERBOSE,
    }

    def __init__(self, n_clusters=8, *, n_components="auto", embedding="sparse", kmeans=None,
                 random_state=None, verbose=0):
        self.n_clusters = n_clusters
        self.n_components = n_components
        self.embedding = embedding
        self.kmeans = kmeans
        self.random_state = random_state
        self.verbose = verbose

    # Sparse input (scipy.sparse CSR/COO, Dask arrays of CSR chunks) stays CSR-chunked:
    # see dqkm.cluster._base.validate_input.
    _accept_sparse = True

    def _check_params(self, n_samples, n_features):
        """The data-dependent checks (after :func:`validate_params`): the target
        dimension d̃ and the embedded K-means's parameters."""
        owner = type(self).__name__
        check_n_samples(n_samples, self.n_clusters)
        if isinstance(self.n_components, str):  # 'auto'
            d = default_n_components(self.n_clusters, n_features)
            if self.embedding == "dense" and d > n_features:
                raise InvalidParameterError(
                    f"The 'n_components' parameter of {owner} must be an int in the range "
                    f"[n_clusters, n_features] = [{self.n_clusters}, {n_features}] for "
                    "embedding='dense'; n_clusters exceeds n_features: lower n_clusters or "
                    "use embedding='sparse'.")
        else:
            d = self._check_n_components(n_features)
        kmeans = {} if self.kmeans is None else self.kmeans
        allowed = set(KMeans().get_params()) - {"n_clusters"}
        bad = sorted(set(kmeans) - allowed)
        if bad:
            raise InvalidParameterError(
                f"The 'kmeans' parameter of {owner} got unknown dqkm.KMeans parameters {bad}; "
                f"allowed: {sorted(allowed)} (n_clusters is {owner}'s own).")
        return d, dict(kmeans)

    def _check_n_components(self, n_features):
        c = int(self.n_components)
        if self.n_clusters <= c and (self.embedding != "dense" or c <= n_features):
            return c
        if self.embedding == "dense":
            what = f"[n_clusters, n_features] = [{self.n_clusters}, {n_features}]"
        else:
            what = f"[n_clusters, inf) = [{self.n_clusters}, inf)"
        raise InvalidParameterError(
            f"The 'n_components' parameter of {type(self).__name__} must be 'auto' or an int in "
            f"the range {what} for embedding={self.embedding!r}. Got {self.n_components!r} "
            "instead.")

    # ---------------------------------------------------------------- fitting
    def fit(self, X, y=None, sample_weight=None, *, callback=None, checkpoint=None,
            resume=False):
        """Embed X, run K-means on the embedding, map the clusters back.

        Passes over X: the embedded K-means's passes over X̂ (X̂ computed
        once and persisted when it fits in memory, ``kmeans['persist']``),
        plus one pass for the original-space centers and cost, plus one for
        ``labels_`` when X is in memory.

        Parameters
        ----------
        X : array-like, scipy.sparse (CSR/COO), Dask array (dense or CSR chunks)
            or Zarr array, of shape (n_samples, n_features)
        y : ignored
        sample_weight : array-like or Dask array of shape (n_samples,), optional
            Non-negative row weights (checked as by :meth:`dqkm.KMeans.fit`):
            the embedded K-means is weighted, and so are the original-space
            centers and ``inertia_``.
        callback : callable, optional
            ``callback(record, centers)`` after every iteration of the
            embedded K-means (centers in the embedded space).
        checkpoint : str or PathLike, optional
            A local directory where the embedded K-means's driver state
            (embedded centers, iteration, RNG state, history) is written
            as a Zarr group after every iteration, atomically, with the
            seed of the embedding (see :meth:`dqkm.KMeans.fit`).
        resume : bool, default=False
            Continue from ``checkpoint``: the embedding is drawn again from
            the recorded seed and the K-means continues where it stopped,
            giving the result of an uninterrupted fit.  A checkpoint of
            another estimator, other parameters (of this estimator or of
            ``kmeans``) or other data is refused; its identity holds the
            fingerprint of X itself (one extra pass over X, only with a
            checkpoint).  See :meth:`dqkm.KMeans.fit` for the rules on the
            checkpoint path, its lock and damaged checkpoints.

        Returns
        -------
        self

        Examples
        --------
        >>> import numpy as np, scipy.sparse as sp, dqkm
        >>> X = sp.random(40, 1000, density=0.01, format="csr", random_state=0)
        >>> se = dqkm.SparseEmbeddedKMeans(2, n_components=16, random_state=0).fit(X)
        >>> se.embedded_centers_.shape, se.cluster_centers_.shape
        ((2, 16), (2, 1000))
        """
        validate_params(self)
        Xd, lazy = self._validate_X(X, reset=True)
        d, km_params = self._check_params(Xd.shape[0], Xd.shape[1])
        rs = check_random_state(self.random_state)
        seed = int(rs.randint(2**31 - 1))
        if checkpoint and resume and not isinstance(self.random_state, (int, np.integer)):
            # The embedding must be the one the checkpoint was written with.
            stored = stored_identity(checkpoint)
            if stored.get("estimator") == type(self).__name__:
                seed = int(stored.get("embedding_seed", seed))
        root = np.random.SeedSequence(seed)
        emb_seed, km_seed = root.spawn(2)
        if self.embedding == "sparse":
            emb = draw_sparse_embedding(Xd.shape[1], d, emb_seed)
        else:
            emb = draw_dense_embedding(Xd.shape[1], d, emb_seed, dtype=Xd.dtype)
        km_params.setdefault("random_state", int(km_seed.generate_state(1)[0] >> 1))
        km_params.setdefault("verbose", self.verbose)
        # the pass back to the original space must fit: refused before any pass if not
        pass_tile_bytes(Xd, d, "SparseEmbeddedKMeans moments pass")
        Xh = embed(Xd, emb)
        km = KMeans(self.n_clusters, **km_params)
        owner = {"estimator": type(self).__name__, "embedding": self.embedding,
                 "n_components": d, "n_features_original": int(Xd.shape[1]),
                 "embedding_seed": seed}
        w = validate_sample_weight(sample_weight, Xd, type(self).__name__)
        km._fit(Xh, callback=callback, checkpoint=checkpoint, resume=resume, inputs=X,
                compose=lambda algorithm: _EmbeddedKMeans(algorithm, owner, Xd),
                sample_weight=w)
        counts, means, m2 = original_space_moments(Xd, emb, km.cluster_centers_,
                                                   split_every=km_params.get("split_every"),
                                                   sample_weight=w)
        self.embedding_ = emb
        self.n_components_ = d
        self.kmeans_ = km
        self.embedded_centers_ = km.cluster_centers_
        self.cluster_centers_ = means.astype(Xd.dtype)
        self.inertia_ = float(m2.sum())
        self.embedded_inertia_ = float(km.inertia_)
        self.empty_clusters_ = np.flatnonzero(counts == 0).tolist()
        self.n_iter_ = km.n_iter_
        self.history_ = km.history_
        self.labels_ = self._output(embed_assign(Xd, emb, km.cluster_centers_), lazy)
        logger.info("SparseEmbeddedKMeans(%s, d̃=%d): inertia %.6g (embedded %.6g)",
                    self.embedding, d, self.inertia_, self.embedded_inertia_)
        return self

    # ------------------------------------------------------------- inference
    @fill_doc
    def transform(self, X):
        """The embedding ``X·Q·Φ`` (SE) or ``X·R`` (RP), shape (n_samples, n_components).

        A block of Dask input holding NaN or infinity raises
        :class:`~dqkm.exceptions.DataError` when it is computed.

        Parameters
        ----------
        {X_infer}

        Returns
        -------
        embedding : ndarray or Dask array of shape (n_samples, n_components)

        Examples
        --------
        {fitted_sekmeans}
        >>> se.transform(X[:3]).shape
        (3, 8)
        """
        check_is_fitted(self)
        Xd, lazy = self._validate_X(X, reset=False)
        if lazy:  # in-memory input was checked whole by its validation
            Xd = checked_rows(Xd)
        return self._output(embed(Xd, self.embedding_), lazy)

    @fill_doc
    def predict(self, X):
        """Embed X, then the index of the nearest embedded center of each sample.

        Refuses NaN or infinity as :meth:`transform` does.

        Parameters
        ----------
        {X_infer}

        Returns
        -------
        {labels}

        Examples
        --------
        {fitted_sekmeans}
        >>> a, b = se.predict(X[[0, 20]])
        >>> bool(a != b)
        True
        """
        check_is_fitted(self)
        Xd, lazy = self._validate_X(X, reset=False)
        if lazy:
            Xd = checked_rows(Xd)
        centers = self.embedded_centers_
        return self._output(embed_assign(Xd, self.embedding_, centers), lazy)

    # ------------------------------------------------------------- save/load
    def _get_state(self):
        """Arrays and JSON scalars for ``dqkm.save`` (no pickle); ``kmeans_`` is not kept."""
        check_is_fitted(self)
        arrays = {"embedded_centers_": self.embedded_centers_,
                  "cluster_centers_": self.cluster_centers_}
        emb = self.embedding_
        if isinstance(emb, SparseEmbedding):
            arrays.update({"embedding_hash": emb.hash, "embedding_signs": emb.signs})
        else:
            arrays["embedding_matrix"] = emb.matrix
        if isinstance(getattr(self, "labels_", None), np.ndarray):
            arrays["labels_"] = self.labels_
        meta = {k: getattr(self, k) for k in ("n_components_", "inertia_", "embedded_inertia_",
                                              "empty_clusters_", "n_iter_", "history_",
                                              "n_features_in_")}
        return arrays, meta

    def _set_state(self, arrays, meta):
        arrays = dict(arrays)
        if "embedding_hash" in arrays:
            self.embedding_ = SparseEmbedding(hash=arrays.pop("embedding_hash").astype(np.int64),
                                              signs=arrays.pop("embedding_signs"),
                                              n_components=int(meta["n_components_"]))
        else:
            self.embedding_ = DenseEmbedding(matrix=arrays.pop("embedding_matrix"))
        for k, v in {**arrays, **meta}.items():
            setattr(self, k, v)
        return self

    def __sklearn_is_fitted__(self):
        return hasattr(self, "embedded_centers_")

    @property
    def _n_features_out(self):
        return self.n_components_
