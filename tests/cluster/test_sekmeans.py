"""SparseEmbeddedKMeans: the embedding, ε-approximation, accuracy, API and bad input."""

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.ndimage import zoom
from sklearn.cluster import KMeans as SkKMeans
from sklearn.datasets import load_digits
from sklearn.exceptions import NotFittedError
from sklearn.metrics import normalized_mutual_info_score as nmi
from threadpoolctl import threadpool_limits

import dqkm
from dqkm.cluster.sekmeans import SparseEmbeddedKMeans, default_n_components
from dqkm.kernels.embedding import (DenseEmbedding, SparseEmbedding, draw_dense_embedding,
                                    draw_sparse_embedding, embed_chunk)
from dqkm.sparse import make_sparse_blobs, sparse_to_dask


@pytest.fixture(autouse=True)
def _one_blas_thread():
    # The test machine is shared and loaded; tiny GEMMs with many BLAS threads
    # spin instead of computing.  Results do not depend on the thread count.
    with threadpool_limits(limits=1, user_api="blas"):
        yield


@pytest.fixture(scope="module")
def digits28():
    """scikit-learn's digits upsampled 8×8 → 28×28 (bilinear): 1797 × 784."""
    X, y = load_digits(return_X_y=True)
    return zoom(X.reshape(-1, 8, 8), (1, 3.5, 3.5), order=1).reshape(len(X), -1), y


@pytest.fixture(scope="module")
def sparse_blobs():
    X, y = make_sparse_blobs(1500, 3000, density=0.01, centers=5, signal=0.5, chunks=400,
                             random_state=0, dtype=np.float64)
    return X, y.compute()


def _explicit(emb):
    if isinstance(emb, DenseEmbedding):
        return emb.matrix
    QPhi = np.zeros((emb.n_features, emb.n_components))
    QPhi[np.arange(emb.n_features), emb.hash] = emb.signs
    return QPhi


def _cost(X, labels, k):
    X = X.toarray() if sp.issparse(X) else np.asarray(X, dtype=np.float64)
    return sum(((X[labels == c] - X[labels == c].mean(0)) ** 2).sum()
               for c in range(k) if np.any(labels == c))


# ----------------------------------------------------------------------------- embedding
@pytest.mark.parametrize("embedding", ["sparse", "dense"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_transform_is_the_explicit_product_for_every_input_kind(embedding, dtype):
    rng = np.random.default_rng(0)
    A = sp.random(240, 50, density=0.2, format="csr", dtype=dtype, random_state=rng)
    se = SparseEmbeddedKMeans(3, n_components=12, embedding=embedding, random_state=1).fit(A)
    ref = A.toarray().astype(np.float64) @ _explicit(se.embedding_)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    inputs = [A, A.tocoo(), A.toarray(), sparse_to_dask(A, chunks=100),
              sparse_to_dask(A, chunks=(7, 200, 33)), da.from_array(A.toarray(), chunks=(50, -1))]
    for X in inputs:
        out = se.transform(X)
        lazy = isinstance(X, da.Array)
        assert isinstance(out, da.Array) == lazy and not sp.issparse(out)
        if lazy:
            assert out.chunks[0] == X.chunks[0]
            out = out.compute()
        assert out.dtype == dtype and out.shape == (240, 12)
        np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)


def test_sparse_embedding_is_two_vectors_and_seeded():
    X = np.random.default_rng(0).random((60, 40))
    a = SparseEmbeddedKMeans(2, n_components=8, random_state=3).fit(X)
    b = SparseEmbeddedKMeans(2, n_components=8, random_state=3).fit(X)
    assert isinstance(a.embedding_, SparseEmbedding)
    assert a.embedding_.hash.shape == (40,) and a.embedding_.signs.shape == (40,)
    np.testing.assert_array_equal(a.embedding_.hash, b.embedding_.hash)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    r = SparseEmbeddedKMeans(2, n_components=8, embedding="dense", random_state=3).fit(X)
    assert isinstance(r.embedding_, DenseEmbedding) and r.embedding_.matrix.shape == (40, 8)
    np.testing.assert_allclose(np.abs(r.embedding_.matrix), 1 / np.sqrt(8))


# ----------------------------------------------------------------------------- fitting
@pytest.mark.parametrize("embedding", ["sparse", "dense"])
def test_fitted_attributes_sparse_and_dense_paths_agree(sparse_blobs, embedding):
    X, _ = sparse_blobs
    kw = dict(n_components=64, embedding=embedding, random_state=0)
    lazy = SparseEmbeddedKMeans(5, **kw).fit(X)
    A = X.compute()
    eager = SparseEmbeddedKMeans(5, **kw).fit(A)
    dense = SparseEmbeddedKMeans(5, **kw).fit(A.toarray())
    assert isinstance(lazy.labels_, da.Array) and lazy.labels_.chunks[0] == X.chunks[0]
    assert isinstance(eager.labels_, np.ndarray)
    labels = lazy.labels_.compute()
    np.testing.assert_array_equal(labels, eager.labels_)
    np.testing.assert_array_equal(labels, dense.labels_)
    assert lazy.n_features_in_ == 3000 and lazy.n_components_ == 64
    assert lazy.embedded_centers_.shape == (5, 64) and lazy.cluster_centers_.shape == (5, 3000)
    # centers: means of the original rows; inertia: the cost of the partition there
    for c in range(5):
        np.testing.assert_allclose(lazy.cluster_centers_[c], A[labels == c].mean(0).A1,
                                   rtol=1e-9, atol=1e-12)
    assert lazy.inertia_ == pytest.approx(_cost(A, labels, 5), rel=1e-9)
    assert eager.inertia_ == pytest.approx(lazy.inertia_, rel=1e-9)
    assert lazy.empty_clusters_ == []
    for rec in lazy.history_:
        assert {"objective", "shift", "seconds", "empty_clusters"} <= set(rec)
    assert lazy.n_iter_ == len(lazy.history_)
    assert lazy.embedded_inertia_ == pytest.approx(lazy.kmeans_.inertia_)
    # predict = embed + nearest embedded center; on the training data it is labels_
    np.testing.assert_array_equal(lazy.predict(A), labels)
    np.testing.assert_array_equal(lazy.predict(X).compute(), labels)
    np.testing.assert_array_equal(lazy.fit_predict(A), labels)


def test_kmeans_parameters_reach_the_embedded_run():
    X = np.random.default_rng(1).random((200, 30))
    se = SparseEmbeddedKMeans(3, n_components=10, random_state=0,
                              kmeans={"max_iter": 2, "tol": 0.0, "init": "random",
                                      "n_init": 1}).fit(X)
    assert se.kmeans_.max_iter == 2 and se.n_iter_ <= 2 and se.kmeans_.init == "random"
    a = SparseEmbeddedKMeans(3, n_components=10, random_state=0, kmeans={"random_state": 5})
    b = SparseEmbeddedKMeans(3, n_components=10, random_state=0, kmeans={"random_state": 5})
    np.testing.assert_array_equal(a.fit(X).embedded_centers_, b.fit(X).embedded_centers_)


def test_inputs_are_not_mutated():
    A = sp.random(100, 20, density=0.3, format="csr", random_state=np.random.default_rng(2))
    B = A.copy()
    SparseEmbeddedKMeans(2, n_components=5, random_state=0).fit(A)
    assert (A != B).nnz == 0


# ----------------------------------------------------------------------------- the paper
def _embedded_to_original_cost_ratio(X, labels, k, d, embedding, seed):
    n_features = X.shape[1]
    emb = (draw_sparse_embedding(n_features, d, seed) if embedding == "sparse"
           else draw_dense_embedding(n_features, d, seed))
    return _cost(embed_chunk(X, emb), labels, k) / _cost(X, labels, k)


@pytest.mark.parametrize("data", ["digits28", "sparse_blobs"])
def test_epsilon_approximation_of_the_full_kmeans_partition(request, data):
    """Definition 2 / Theorem 1: ‖X̂ − DDᵀX̂‖² in (1 ± ε)‖X − DDᵀX‖², ε = 0.2."""
    X, y = request.getfixturevalue(data)
    if isinstance(X, da.Array):
        X = X.compute()
    k = len(np.unique(y))
    labels = SkKMeans(k, n_init=1, random_state=0).fit(X).labels_
    for d in (400, 800):
        for embedding in ("sparse", "dense"):
            ratios = [_embedded_to_original_cost_ratio(X, labels, k, d, embedding, s)
                      for s in range(3)]
            assert all(0.8 <= r <= 1.2 for r in ratios), (d, embedding, ratios)


def test_nmi_on_digits_close_to_full_kmeans_and_at_least_rp(digits28):
    """Paper Fig. 1 trend at d̃ = 256, averaged over 5 seeds."""
    X, y = digits28
    full = np.mean([nmi(y, SkKMeans(10, n_init=1, random_state=s).fit(X).labels_)
                    for s in range(5)])
    se = np.mean([nmi(y, SparseEmbeddedKMeans(10, n_components=256, random_state=s)
                      .fit(X).labels_) for s in range(5)])
    rp = np.mean([nmi(y, SparseEmbeddedKMeans(10, n_components=256, embedding="dense",
                                              random_state=s).fit(X).labels_)
                  for s in range(5)])
    assert abs(se - full) <= 0.05, (se, full)
    assert se >= rp, (se, rp)


def test_default_n_components_follows_theorem_1():
    # max((k + log2(1/δ))/ε², 6/(ε²δ)) with ε = 0.5, δ = 0.1
    assert default_n_components(10, 10_000) == 240
    assert default_n_components(100, 10_000) == int(np.ceil(4 * (100 + np.log2(10))))
    assert default_n_components(10, 100) == 100
    assert default_n_components(10, 5) == 10
    X = np.random.default_rng(0).random((30, 500))
    assert SparseEmbeddedKMeans(3, random_state=0).fit(X).n_components_ == 240


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("params, err, match", [
    ({"n_components": 2}, ValueError,
     r"'n_components' parameter of SparseEmbeddedKMeans must be 'auto' or an int in the range "
     r"\[n_clusters, inf\) = \[3, inf\) for embedding='sparse'. Got 2 instead."),
    ({"n_components": 41, "embedding": "dense"}, ValueError,
     r"range \[n_clusters, n_features\] = \[3, 40\] for embedding='dense'. Got 41 instead."),
    ({"n_components": 2.5}, ValueError, "Got 2.5 instead"),
    ({"n_clusters": 45, "embedding": "dense"}, ValueError,
     r"\[n_clusters, n_features\] = \[45, 40\] for embedding='dense'; n_clusters exceeds"),
    ({"n_components": [4]}, TypeError, r"Got \[4\] instead"),
    ({"embedding": "gaussian"}, ValueError,
     r"'embedding' parameter of SparseEmbeddedKMeans must be one of \['dense', 'sparse'\]"),
    ({"n_clusters": 0}, ValueError, "'n_clusters' parameter of SparseEmbeddedKMeans"),
    ({"kmeans": {"n_clusters": 4}}, ValueError, r"unknown dqkm.KMeans parameters \['n_clusters'\]"),
    ({"kmeans": {"max_iters": 4}}, ValueError, r"\['max_iters'\]; allowed"),
    ({"kmeans": [("max_iter", 4)]}, TypeError, "'kmeans' parameter .* must be a dict"),
    ({"kmeans": {"max_iter": 0}}, ValueError, "'max_iter' parameter of KMeans"),
])
def test_bad_parameters(params, err, match):
    X = np.random.default_rng(0).random((50, 40))
    kw = {"n_clusters": 3, **params}
    with pytest.raises(err, match=match):
        SparseEmbeddedKMeans(**kw).fit(X)


def test_bad_data():
    A = sp.random(50, 40, density=0.2, format="csr", random_state=np.random.default_rng(0))
    with pytest.raises(TypeError, match="CSR format .COO is converted.; got format 'csc'"):
        SparseEmbeddedKMeans(3, n_components=5).fit(A.tocsc())
    with pytest.raises(TypeError, match="got format 'lil'"):
        SparseEmbeddedKMeans(3, n_components=5).fit(sparse_to_dask(A, chunks=20).map_blocks(
            lambda b: b.tolil(), meta=sp.lil_matrix((0, 0))))
    se = SparseEmbeddedKMeans(3, n_components=5, random_state=0)
    with pytest.raises(NotFittedError, match="not fitted"):
        se.predict(A)
    se.fit(A.tocoo())
    np.testing.assert_array_equal(se.labels_, SparseEmbeddedKMeans(
        3, n_components=5, random_state=0).fit(A).labels_)
    with pytest.raises(ValueError, match="X has 41 features, but SparseEmbeddedKMeans is "
                                         "expecting 40 features"):
        se.predict(sp.random(5, 41, density=0.5, format="csr"))
    with pytest.raises(ValueError, match="X has 39 features"):
        se.transform(sparse_to_dask(A[:, :39].tocsr(), chunks=20))
    with pytest.raises(ValueError, match="n_samples=2 should be >= n_clusters=3"):
        SparseEmbeddedKMeans(3, n_components=5).fit(A[:2])


def test_on_a_local_cluster(dist_client, sparse_blobs):
    X, _ = sparse_blobs
    ref = SparseEmbeddedKMeans(5, n_components=32, random_state=2).fit(X.compute())
    se = SparseEmbeddedKMeans(5, n_components=32, random_state=2).fit(X)
    np.testing.assert_array_equal(se.labels_.compute(), ref.labels_)
    assert se.inertia_ == pytest.approx(ref.inertia_, rel=1e-9)


# ----------------------------------------------------------------------------- KMeans on CSR
@pytest.mark.parametrize("init", ["array", "k-means++", "k-means||", "random"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kmeans_on_csr_chunks_equals_kmeans_on_dense(sparse_blobs, init, dtype):
    X, _ = sparse_blobs
    X = X.astype(dtype)
    A = X.compute()
    D = da.from_array(A.toarray(), chunks=(400, -1))
    kw = {"init": A[:5].toarray()} if init == "array" else {"init": init}
    ref = dqkm.KMeans(5, random_state=0, **kw).fit(D)
    km = dqkm.KMeans(5, random_state=0, **kw).fit(X)
    labels = km.labels_.compute()
    np.testing.assert_array_equal(labels, ref.labels_.compute())
    tol = 1e-4 if dtype == np.float32 else 1e-9
    assert km.inertia_ == pytest.approx(ref.inertia_, rel=tol)
    np.testing.assert_allclose(km.cluster_centers_, ref.cluster_centers_, rtol=tol, atol=tol)
    assert km.n_iter_ == ref.n_iter_
    if init == "array":
        np.testing.assert_array_equal(km.predict(X).compute(), labels)
        assert km.score(X) == pytest.approx(ref.score(D), rel=tol)
        np.testing.assert_allclose(km.transform(X).compute(), ref.transform(D).compute(),
                                   rtol=tol, atol=tol)


@pytest.mark.parametrize("embedding", ["sparse", "dense"])
@pytest.mark.parametrize("name", ["m.npz", "m.zarr"])
def test_save_load_round_trip(tmp_path, embedding, name):
    from dqkm.io import load, save

    A = sp.random(120, 30, density=0.3, format="csr", random_state=np.random.default_rng(4))
    se = SparseEmbeddedKMeans(3, n_components=8, embedding=embedding, random_state=0,
                              kmeans={"max_iter": 50}).fit(A)
    save(se, tmp_path / name)
    back = load(tmp_path / name)
    assert type(back) is SparseEmbeddedKMeans and back.get_params() == se.get_params()
    np.testing.assert_array_equal(back.predict(A), se.predict(A))
    np.testing.assert_array_equal(back.transform(A), se.transform(A))
    np.testing.assert_array_equal(back.labels_, se.labels_)
    np.testing.assert_array_equal(back.cluster_centers_, se.cluster_centers_)
    assert back.inertia_ == se.inertia_ and back.history_ == se.history_
    assert type(back.embedding_) is type(se.embedding_)
    assert dqkm.SparseEmbeddedKMeans is SparseEmbeddedKMeans


def test_check_estimator():
    from sklearn.utils.estimator_checks import check_estimator

    check_estimator(
        SparseEmbeddedKMeans(n_clusters=3, random_state=0, kmeans={"max_iter": 30}),
        expected_failed_checks={
            # scikit-learn sets n_components=1 with n_clusters=2 for this check; a
            # target dimension below the number of clusters is refused by design
            # (the bad-input rule: n_components < n_clusters is an error).
            "check_methods_sample_order_invariance":
                "n_components=1 < n_clusters=2 is rejected on purpose",
        })
