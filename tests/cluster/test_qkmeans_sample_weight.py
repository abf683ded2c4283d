"""QKMeans sample_weight: the weights enter D_√n, the sums, the objective and the tolerance."""

import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import load_digits

import dqkm
from dqkm.exceptions import DataError


@pytest.fixture(scope="module")
def data():
    X = load_digits().data[:300]
    w = np.random.default_rng(0).integers(0, 4, len(X))
    return X, w


def _model(init, **kw):
    params = dict(sparsity=3, init=init, max_iter=3, palm_iter=5, palm_iter_init=5,
                  random_state=0)
    return dqkm.QKMeans(8, **{**params, **kw})


def _same_fit(a, b):
    assert a.n_iter_ == b.n_iter_
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, rtol=1e-10, atol=1e-10)
    assert a.inertia_ == pytest.approx(b.inertia_, rel=1e-12)
    for ra, rb in zip(a.history_, b.history_):
        assert ra["objective"] == pytest.approx(rb["objective"], rel=1e-12)


def test_integer_weights_equal_repeated_rows(data):
    X, w = data
    init = X[np.flatnonzero(w > 0)[:8]]
    # tol > 0: the weighted variance sets the same absolute tolerance as the repeated rows
    weighted = _model(init, tol=1e-4).fit(X, sample_weight=w)
    repeated = _model(init, tol=1e-4).fit(np.repeat(X, w, axis=0))
    _same_fit(weighted, repeated)
    assert weighted.score(X, sample_weight=w) == pytest.approx(
        repeated.score(np.repeat(X, w, axis=0)), rel=1e-12)


def test_zero_weights_equal_removed_rows_and_dask_equals_numpy(data):
    X, w = data
    init = X[np.flatnonzero(w > 0)[:8]]
    numpy_fit = _model(init).fit(X, sample_weight=w)
    removed = _model(init).fit(X[w > 0], sample_weight=w[w > 0])
    _same_fit(numpy_fit, removed)
    dask_fit = _model(init).fit(da.from_array(X, chunks=70),
                                sample_weight=da.from_array(w.astype(float), chunks=100))
    _same_fit(numpy_fit, dask_fit)


def test_weighted_kmeans_plus_plus_never_starts_on_zero_weight_rows(data):
    X, _ = data
    w = np.zeros(len(X))
    w[:40] = 1.0
    qk = _model("k-means++", max_iter=1).fit(X, sample_weight=w)
    assert qk.score(X[:40]) == pytest.approx(qk.score(X, sample_weight=w), rel=1e-12)
    # the initial centers are rows of positive weight: the first iteration's objective
    # (against them) counts only those 40 rows, each at its nearest centre
    assert np.isfinite(qk.history_[0]["objective"])


@pytest.mark.parametrize("weights, match", [
    (lambda n: -np.ones(n), r"sample_weight must be non-negative; got negative values \(the first "
                            r"at index 0: -1.0\)"),
    (lambda n: np.r_[np.ones(n - 1), np.nan],
     r"sample_weight must be finite; got NaN or infinity \(the first at index 299\)"),
    (lambda n: np.ones(n - 1), r"sample_weight must have shape \(300,\) like X's rows"),
    (lambda n: np.zeros(n), "sample_weight must contain at least one non-zero number"),
    (lambda n: np.array(["a"] * n), "sample_weight must hold real numbers"),
    (lambda n: da.from_array(np.r_[np.ones(n - 5), -np.ones(5)], chunks=100),
     r"sample_weight must be non-negative; got negative values"),
    (lambda n: da.zeros(n, chunks=100), "sample_weight must contain at least one non-zero number"),
])
def test_bad_weights_are_refused(data, weights, match):
    X, _ = data
    with pytest.raises(DataError, match=match):
        _model(X[:8]).fit(X, sample_weight=weights(len(X)))


def test_kmeans_parallel_init_refuses_weights(data):
    X, w = data
    with pytest.raises(DataError, match=r"init='k-means\|\|'\) does not take sample_weight"):
        _model("k-means||").fit(X, sample_weight=w)


def test_checkpoint_identity_holds_the_weights(tmp_path, data):
    X, w = data
    init = X[np.flatnonzero(w > 0)[:8]]
    ck = tmp_path / "ck"
    _model(init, max_iter=1).fit(X, sample_weight=w, checkpoint=ck)
    from dqkm.exceptions import CheckpointError

    with pytest.raises(CheckpointError, match="sample_weight"):
        _model(init, max_iter=1).fit(X, sample_weight=w + 1, checkpoint=ck, resume=True)


def test_weighted_fit_on_a_local_cluster_agrees(dist_client, data):
    """Dask weights with Dask X through worker processes: the fit of the threads."""
    X, w = data
    init = X[np.flatnonzero(w > 0)[:8]]
    local = _model(init).fit(X, sample_weight=w)
    Xd = da.from_array(X, chunks=(100, -1))
    remote = _model(init).fit(Xd, sample_weight=da.from_array(w.astype(float), chunks=100))
    _same_fit(local, remote)
    assert -remote.score(Xd, sample_weight=w) == pytest.approx(local.inertia_, rel=1e-12)
