"""CSR input for KMeans and MiniBatchKMeans (in-memory scipy.sparse and Dask arrays
of CSR chunks) gives the results of the dense path; callable ``init``."""

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp

import dqkm
from dqkm.sparse import sparse_to_dask


def _sparse(n=240, d=30, seed=0):
    rng = np.random.default_rng(seed)
    S = sp.random(n, d, density=0.15, format="csr", random_state=seed, dtype=np.float64)
    S.data += rng.integers(0, 3, size=S.nnz)  # a few clusters of larger values
    return S


@pytest.mark.parametrize("container", [sp.csr_matrix, sp.csr_array, sp.coo_matrix])
@pytest.mark.parametrize("init", ["k-means++", "random", "k-means||", "array"])
def test_kmeans_csr_equals_dense(container, init):
    S = _sparse()
    X = S.toarray()
    init_ = X[:3].copy() if init == "array" else init
    sparse = dqkm.KMeans(3, init=init_, random_state=0).fit(container(S))
    dense = dqkm.KMeans(3, init=init_, random_state=0).fit(X)
    np.testing.assert_array_equal(sparse.labels_, dense.labels_)
    np.testing.assert_allclose(sparse.cluster_centers_, dense.cluster_centers_, rtol=1e-10,
                               atol=1e-12)
    assert sparse.inertia_ == pytest.approx(dense.inertia_, rel=1e-10)
    assert sparse.n_iter_ == dense.n_iter_
    np.testing.assert_array_equal(sparse.predict(container(S)), dense.predict(X))
    np.testing.assert_allclose(sparse.transform(container(S)), dense.transform(X), rtol=1e-10)
    assert sparse.score(container(S)) == pytest.approx(dense.score(X), rel=1e-10)


def test_kmeans_dask_csr_chunks_stay_lazy_and_equal_dense():
    S = _sparse(seed=1)
    X = S.toarray()
    w = np.random.default_rng(0).integers(0, 3, size=S.shape[0])
    Sd = sparse_to_dask(S, chunks=50)
    Xd = da.from_array(X, chunks=(50, -1))
    sparse = dqkm.KMeans(3, random_state=0).fit(Sd, sample_weight=w)
    dense = dqkm.KMeans(3, random_state=0).fit(Xd, sample_weight=w)
    assert isinstance(sparse.labels_, da.Array)
    assert sparse.labels_.chunks[0] == Sd.chunks[0]
    np.testing.assert_array_equal(sparse.labels_.compute(), dense.labels_.compute())
    np.testing.assert_allclose(sparse.cluster_centers_, dense.cluster_centers_, rtol=1e-10,
                               atol=1e-12)
    assert sparse.inertia_ == pytest.approx(dense.inertia_, rel=1e-10)
    out = sparse.predict(Sd)
    assert isinstance(out, da.Array)
    np.testing.assert_array_equal(out.compute(), dense.predict(X))


def test_minibatch_csr_equals_dense():
    S = _sparse(n=400, seed=2)
    X = S.toarray()
    kw = dict(n_clusters=3, batch_size=64, max_iter=3, random_state=0)
    sparse = dqkm.MiniBatchKMeans(**kw).fit(sparse_to_dask(S, chunks=100))
    dense = dqkm.MiniBatchKMeans(**kw).fit(da.from_array(X, chunks=(100, -1)))
    np.testing.assert_allclose(sparse.cluster_centers_, dense.cluster_centers_, rtol=1e-10,
                               atol=1e-12)
    assert sparse.n_steps_ == dense.n_steps_
    assert sparse.inertia_ == pytest.approx(dense.inertia_, rel=1e-10)
    np.testing.assert_array_equal(sparse.predict(S), dense.predict(X))
    part = dqkm.MiniBatchKMeans(**kw).partial_fit(S)
    assert part.cluster_centers_.shape == (3, 30)


def test_other_sparse_formats_are_refused_with_the_conversion():
    S = _sparse().tocsc()
    with pytest.raises(TypeError, match=r"CSR format.*X\.tocsr\(\)"):
        dqkm.KMeans(3).fit(S)


def test_qkmeans_keeps_dense_input():
    """QKMeans (a KMeans subclass with dense-only passes) does not inherit CSR input."""
    with pytest.raises(TypeError, match="[Ss]parse"):
        dqkm.QKMeans(3, sparsity=1).fit(_sparse())


# ------------------------------------------------------------------ callable init
def test_callable_init_gets_in_memory_x_and_a_random_state():
    S = _sparse(seed=3)
    calls = []

    def init(X, n_clusters, random_state):
        calls.append((X, n_clusters, random_state))
        return X[:n_clusters].toarray() if sp.issparse(X) else X[:n_clusters]

    for X in (S, S.toarray()):
        km = dqkm.KMeans(3, init=init, n_init=1, max_iter=1, random_state=0).fit(X)
        got, k, rs = calls[-1]
        assert k == 3 and isinstance(rs, np.random.RandomState)
        assert sp.issparse(got) == sp.issparse(X)
        np.testing.assert_array_equal(got.toarray() if sp.issparse(got) else got,
                                      S.toarray())
        ref = dqkm.KMeans(3, init=S[:3].toarray(), max_iter=1).fit(X)
        np.testing.assert_allclose(km.cluster_centers_, ref.cluster_centers_)


def test_callable_init_gets_a_sample_of_out_of_core_x_and_runs_ten_times():
    X = np.random.default_rng(0).standard_normal((12_000, 2))
    shapes = []

    def init(sample, n_clusters, random_state):
        shapes.append(sample.shape)
        return sample[random_state.choice(len(sample), n_clusters, replace=False)]

    dqkm.KMeans(2, init=init, max_iter=2, random_state=0).fit(
        da.from_array(X, chunks=(4000, -1)))
    assert shapes == [(10_000, 2)] * 10  # n_init='auto' is 10 for a callable, as sklearn


def test_callable_init_of_the_wrong_shape_is_refused():
    X = np.random.default_rng(0).standard_normal((50, 3))
    with pytest.raises(ValueError, match=r"must have shape \(n_clusters, n_features\)"):
        dqkm.KMeans(2, init=lambda X, k, random_state: X[:3], n_init=1).fit(X)
