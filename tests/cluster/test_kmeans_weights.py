"""sample_weight in KMeans, KMeansL1 and SparseEmbeddedKMeans: integer weights
are repeated rows, zero weights are removed rows, Dask and NumPy weights agree,
bad weights are refused naming ``sample_weight``."""

import dask.array as da
import numpy as np
import pytest

import dqkm
from dqkm.cluster.kmeans import LloydAlgorithm
from dqkm.exceptions import DataError, InvalidParameterError


def _data(n=240, d=4, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=6.0, size=(4, d))
    X = centers[rng.integers(4, size=n)] + rng.normal(size=(n, d))
    w = rng.integers(0, 4, size=n)
    return X, w


ESTIMATORS = [
    lambda init: dqkm.KMeans(4, init=init, random_state=0, tol=1e-6),
    lambda init: dqkm.KMeansL1(4, radius=8.0, init=init, random_state=0, tol=1e-6),
]


@pytest.mark.parametrize("make", ESTIMATORS, ids=["KMeans", "KMeansL1"])
def test_integer_weights_equal_repeated_rows(make):
    X, w = _data()
    init = X[[0, 60, 120, 180]].copy()
    weighted = make(init).fit(X, sample_weight=w)
    repeated = make(init).fit(np.repeat(X, w, axis=0))
    np.testing.assert_allclose(weighted.cluster_centers_, repeated.cluster_centers_,
                               rtol=1e-12, atol=1e-12)
    assert weighted.n_iter_ == repeated.n_iter_
    assert weighted.inertia_ == pytest.approx(repeated.inertia_, rel=1e-12)
    assert weighted.score(X, sample_weight=w) == pytest.approx(
        repeated.score(np.repeat(X, w, axis=0)), rel=1e-12)
    # the tolerance is weighted too: same history of shifts
    assert [r["shift"] for r in weighted.history_] == pytest.approx(
        [r["shift"] for r in repeated.history_], rel=1e-9, abs=1e-12)


def test_zero_weights_equal_removed_rows():
    X, w = _data(seed=1)
    w = (w > 0).astype(float) * 2.5
    init = X[np.flatnonzero(w)[:4]].copy()
    weighted = dqkm.KMeans(4, init=init, random_state=0).fit(X, sample_weight=w)
    removed = dqkm.KMeans(4, init=init, random_state=0).fit(X[w > 0])
    np.testing.assert_allclose(weighted.cluster_centers_, removed.cluster_centers_,
                               rtol=1e-12, atol=1e-12)
    assert weighted.inertia_ == pytest.approx(2.5 * removed.inertia_, rel=1e-12)
    np.testing.assert_array_equal(weighted.labels_[w > 0], removed.labels_)


@pytest.mark.parametrize("init", ["k-means++", "random", "k-means||"])
def test_dask_and_numpy_weights_agree(init):
    X, w = _data(seed=2)
    Xd = da.from_array(X, chunks=(50, -1))
    a = dqkm.KMeans(4, init=init, random_state=3).fit(Xd, sample_weight=w)
    b = dqkm.KMeans(4, init=init, random_state=3).fit(
        Xd, sample_weight=da.from_array(w.astype(float), chunks=70))  # rechunked to X's
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    assert a.inertia_ == b.inertia_
    assert isinstance(a.labels_, da.Array)
    # in-memory X and Dask X give the same fit from the same centers
    c = dqkm.KMeans(4, init=a.cluster_centers_, random_state=0).fit(X, sample_weight=w)
    d = dqkm.KMeans(4, init=a.cluster_centers_, random_state=0).fit(
        Xd, sample_weight=da.from_array(w, chunks=33))
    np.testing.assert_allclose(c.cluster_centers_, d.cluster_centers_, rtol=1e-12)
    assert c.inertia_ == pytest.approx(d.inertia_, rel=1e-12)


@pytest.mark.parametrize("init", ["k-means++", "random", "k-means||"])
def test_initialisation_never_starts_from_zero_weight_rows(init):
    """Rows of weight 0 (far outliers here) are never drawn as initial centers."""
    X, _ = _data(seed=3)
    X[:40] += 1e3
    w = np.r_[np.zeros(40), np.ones(len(X) - 40)]
    est = dqkm.KMeans(4, init=init, random_state=0)
    algo = LloydAlgorithm(est)
    Xd = da.from_array(X, chunks=(60, -1))
    algo.sample_weight = da.from_array(w, chunks=(60,))
    for seed in range(3):
        centers = algo.init_state(Xd, np.random.default_rng(seed))
        assert np.abs(centers).max() < 100


def test_score_and_inertia_are_weighted():
    X, w = _data(seed=4)
    km = dqkm.KMeans(4, random_state=0).fit(X, sample_weight=w)
    d2 = ((X - km.cluster_centers_[km.labels_]) ** 2).sum(axis=1)
    assert km.inertia_ == pytest.approx(float(w @ d2), rel=1e-10)
    assert km.score(X, sample_weight=w) == pytest.approx(-float(w @ d2), rel=1e-10)
    assert km.score(da.from_array(X, chunks=(50, -1)),
                    sample_weight=da.from_array(w, chunks=50)) == pytest.approx(
        -float(w @ d2), rel=1e-10)


def test_sample_weight_stored_on_the_algorithm():
    """The fit hands the weights to the algorithm as ``sample_weight`` (a float Dask
    array with X's row chunks), where the passes read them."""
    X, w = _data(seed=5)
    seen = []
    km = dqkm.KMeans(4, random_state=0, max_iter=2)
    real = km._algorithm

    def spy(n_features):
        algo = real(n_features)
        seen.append(algo)
        return algo

    km._algorithm = spy
    km.fit(da.from_array(X, chunks=(50, -1)), sample_weight=w)
    sw = seen[0].sample_weight
    assert isinstance(sw, da.Array) and sw.dtype == np.float64
    assert sw.chunks[0] == (50, 50, 50, 50, 40)
    np.testing.assert_array_equal(sw.compute(), w)


def _bad(n):
    return [
        (-np.ones(n), "sample_weight must be non-negative.*index 0"),
        (np.r_[np.ones(n - 1), np.nan], "sample_weight must be finite.*index"),
        (np.r_[np.inf, np.ones(n - 1)], "sample_weight must be finite"),
        (np.ones(n + 1), rf"sample_weight must have shape \({n},\)"),
        (np.ones((n, 2)), rf"sample_weight must have shape \({n},\)"),
        (np.zeros(n), "sample_weight must contain at least one non-zero"),
    ]


@pytest.mark.parametrize("case", range(6))
@pytest.mark.parametrize("as_dask", [False, True])
def test_bad_weights_are_refused(case, as_dask):
    X, _ = _data(n=60)
    weights, match = _bad(60)[case]
    if as_dask:
        weights = da.from_array(weights)
        match = match.split(".*")[0]  # Dask weights are checked without naming the index
    with pytest.raises(DataError, match=match):
        dqkm.KMeans(2, random_state=0).fit(X, sample_weight=weights)


def test_bad_weights_are_refused_by_score():
    X, _ = _data(n=60)
    km = dqkm.KMeans(2, random_state=0).fit(X)
    with pytest.raises(DataError, match="sample_weight must be non-negative"):
        km.score(X, sample_weight=-np.ones(60))


def test_a_step_that_does_not_declare_weights_is_refused_weights():
    """An algorithm that replaces the step without ``supports_sample_weight``
    would drop the weights silently: the fit refuses them instead."""
    from dqkm.cluster.kmeans import LloydAlgorithm

    class _Unweighted(LloydAlgorithm):
        def step(self, X, state, iteration, tol_abs):
            return super().step(X, state, iteration, tol_abs)

    class _Custom(dqkm.KMeans):
        def _algorithm(self, n_features):
            return _Unweighted(self)

    X, w = _data(n=60)
    with pytest.raises(InvalidParameterError, match="_Custom.fit does not take sample_weight"):
        _Custom(2, max_iter=2, random_state=0).fit(X, sample_weight=w)
    assert _Custom(2, max_iter=2, random_state=0).fit(X).n_iter_ >= 1


def _sorted_rows(A):
    return A[np.lexsort(A.T[::-1])]


@pytest.mark.parametrize("sparse", [False, True])
def test_sparse_embedded_kmeans_weights_equal_repeated_rows(sparse):
    """Well-separated blobs: the weighted and the repeated fits find the same
    partition, so the same original-space centers and inertia."""
    import scipy.sparse as sp

    rng = np.random.default_rng(6)
    centers = np.eye(4, 12) * 40.0
    X = centers[np.arange(160) % 4] + rng.normal(size=(160, 12))
    w = rng.integers(1, 4, size=160)
    w[::9] = 0
    Xr = np.repeat(X, w, axis=0)
    conv = sp.csr_matrix if sparse else np.asarray
    kw = dict(n_clusters=4, n_components=6, random_state=0, kmeans={"n_init": 3})
    weighted = dqkm.SparseEmbeddedKMeans(**kw).fit(conv(X), sample_weight=w)
    repeated = dqkm.SparseEmbeddedKMeans(**kw).fit(conv(Xr))
    np.testing.assert_allclose(_sorted_rows(weighted.cluster_centers_),
                               _sorted_rows(repeated.cluster_centers_), rtol=1e-10)
    assert weighted.inertia_ == pytest.approx(repeated.inertia_, rel=1e-10)
    with pytest.raises(DataError, match="sample_weight must be non-negative"):
        dqkm.SparseEmbeddedKMeans(**kw).fit(X, sample_weight=-w)


def test_kmultiplemeans_refuses_weights_that_differ():
    X, w = _data(n=80)
    kmm = dict(n_clusters=2, n_neighbors=3, max_iter=2, max_inner_iter=3, random_state=0)
    with pytest.raises(InvalidParameterError,
                       match="KMultipleMeans.fit got sample_weight with different values"):
        dqkm.KMultipleMeans(**kmm).fit(X, sample_weight=w + 1)
    with pytest.raises(DataError, match="sample_weight must be finite"):
        dqkm.KMultipleMeans(**kmm).fit(X, sample_weight=np.full(80, np.nan))
    equal = dqkm.KMultipleMeans(**kmm).fit(X, sample_weight=np.full(80, 2.0))
    plain = dqkm.KMultipleMeans(**kmm).fit(X)
    np.testing.assert_array_equal(equal.labels_, plain.labels_)


def test_checkpoint_identity_holds_the_weights(tmp_path):
    from dqkm.cluster._checkpoint import CheckpointMismatchError

    X, w = _data(n=120)
    ck = tmp_path / "ck"
    full = dqkm.KMeans(4, random_state=0, max_iter=3).fit(X, sample_weight=w, checkpoint=ck)
    again = dqkm.KMeans(4, random_state=0, max_iter=3).fit(X, sample_weight=w, checkpoint=ck,
                                                          resume=True)
    np.testing.assert_array_equal(again.cluster_centers_, full.cluster_centers_)
    with pytest.raises(CheckpointMismatchError, match="sample_weight"):
        dqkm.KMeans(4, random_state=0, max_iter=3).fit(X, sample_weight=w + 1, checkpoint=ck,
                                                      resume=True)
