"""K-means with ℓ1-ball projected centroids (Sculley 2010), a QK-means baseline."""

from __future__ import annotations

from numbers import Real

import numpy as np

from ..kernels.l1 import project_rows_l1_ball
from ..parallel.lloyd import lloyd_step
from .._validation import Interval
from .kmeans import KMeans, LloydAlgorithm

__all__ = ["KMeansL1"]


class _ProjectedLloyd(LloydAlgorithm):
    """Lloyd's iterations whose centers are projected on the ℓ1 ball: the
    initial centers, and the cluster means of every step (weighted means with
    ``sample_weight``)."""

    supports_sample_weight = True

    def init_state(self, X, rng):
        return self.estimator._project(super().init_state(X, rng)).astype(X.dtype)

    def step(self, X, state, iteration, tol_abs):
        return lloyd_step(X, state, iteration, tol=self.tol, tol_abs=tol_abs,
                          split_every=self.split_every, update=self.estimator._project,
                          sample_weight=self.sample_weight)


class KMeansL1(KMeans):
    """K-means whose centroids are projected on an ℓ1 ball every iteration.

    After each Lloyd update every centroid is replaced by its ε-accurate
    projection on ``{‖c‖₁ ≤ radius}`` (Sculley 2010), which makes centroids
    sparse — the ℓ1 baseline of the QK-means journal paper.  The initial
    centroids are projected too.  One pass over X per iteration.

    Parameters
    ----------
    n_clusters : int, default=8
    radius : float, default=1.0
        ℓ1 radius λ of the ball.
    tol_l1 : float, default=1e-3
        ε of the projection: projected norms lie in [λ, λ(1 + ε)].
    init, n_init, max_iter, tol, random_state, persist, split_every,
    oversampling_factor, init_max_iter, verbose : as :class:`dqkm.KMeans`.

    ``fit`` and ``score`` take ``sample_weight`` and X may be sparse (CSR), as
    for :class:`dqkm.KMeans`.

    Attributes
    ----------
    cluster_centers_, labels_, inertia_, n_iter_, history_ : as :class:`dqkm.KMeans`
    nnz_ : int
        Non-zeros of the projected centroids.

    References
    ----------
    Sculley, "Web-scale k-means clustering", WWW 2010 (Algorithm 2).
    Giffon et al., QuicK-means (Machine Learning, 2021), Sect. 4 baselines.

    Examples
    --------
    >>> import numpy as np, dqkm
    >>> X = np.array([[0., 0.], [0., 1.], [10., 10.], [10., 11.]])
    >>> km = dqkm.KMeansL1(n_clusters=2, radius=5.0, random_state=0).fit(X)
    >>> bool(np.all(np.abs(km.cluster_centers_).sum(axis=1) <= 5.0 * (1 + 1e-3)))
    True
    """

    _accept_sparse = True

    _parameter_constraints = {
        **{k: v for k, v in KMeans._parameter_constraints.items() if k != "algorithm"},
        "radius": [Interval(Real, 0, None, closed="neither")],
        "tol_l1": [Interval(Real, 0, None, closed="left")],
    }

    def __init__(self, n_clusters=8, *, radius=1.0, tol_l1=1e-3, init="k-means++",
                 n_init="auto", max_iter=300, tol=1e-4, random_state=None, persist="auto",
                 split_every=None, oversampling_factor=2.0, init_max_iter=None, verbose=0):
        super().__init__(n_clusters, init=init, n_init=n_init, max_iter=max_iter, tol=tol,
                         random_state=random_state, persist=persist, split_every=split_every,
                         oversampling_factor=oversampling_factor, init_max_iter=init_max_iter,
                         verbose=verbose)
        self.radius = radius
        self.tol_l1 = tol_l1

    def _project(self, C):
        return project_rows_l1_ball(C, self.radius, self.tol_l1)

    def _algorithm(self, n_features):
        return _ProjectedLloyd(self)

    def _set_fitted(self, Xd, lazy, value, res, labels=None):
        super()._set_fitted(Xd, lazy, value, res, labels=labels)
        self.nnz_ = int(np.count_nonzero(res.state))

    def _get_state(self):
        arrays, meta = super()._get_state()
        meta["nnz_"] = self.nnz_
        return arrays, meta
