"""Silent wrong numbers: values whose squares overflow, and NaN/inf in lazy input.

* float32 data with |x| ~ 1e21 must give the labels of the unscaled data (the
  norms and products overflow float32, not float64); float64 data whose
  squares overflow float64 is refused with a ``DataError`` naming the largest
  magnitude (not "contains infinity").
* NaN or infinity in a Dask array is refused by every method that reads X,
  lazy outputs when their block is computed, with the row it was found at.
"""

import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

import dqkm
from dqkm.exceptions import DataError
from dqkm.kernel_approximation import FactorNystroem
from dqkm.neighbors import ClusterIndex

SCALE32 = np.float32(1e20)
SCALE64 = 1e160


@pytest.fixture(scope="module")
def blobs():
    X, _ = make_blobs(600, 4, centers=3, cluster_std=0.5, random_state=0)
    return X.astype(np.float32)


def _same_partition(a, b):
    assert adjusted_rand_score(np.asarray(a), np.asarray(b)) == 1.0


# ------------------------------------------------------------------ 8: overflow
def test_kernel_assign_float32_large_values_same_labels(blobs):
    from dqkm.kernels.lloyd import assign_labels, lloyd_partials

    C = blobs[[0, 1, 2, 3, 4]]
    lab, mind = assign_labels(blobs, C)
    lab_s, mind_s = assign_labels(blobs * SCALE32, C * SCALE32)
    np.testing.assert_array_equal(lab_s, lab)
    np.testing.assert_allclose(mind_s, mind * 1e40, rtol=1e-4, atol=1e34)
    _, counts, obj, lab_p, _ = lloyd_partials(blobs, C)
    _, counts_s, obj_s, lab_ps, _ = lloyd_partials(blobs * SCALE32, C * SCALE32)
    np.testing.assert_array_equal(lab_ps, lab_p)
    np.testing.assert_array_equal(counts_s, counts)
    np.testing.assert_allclose(obj_s, obj * 1e40, rtol=1e-4)


def test_kernel_float32_products_overflow_tile_reassigned_in_float64(blobs):
    """½‖c‖² fits float32 but x·c does not: the tile is assigned again in float64."""
    import scipy.sparse as sp

    from dqkm.kernels.lloyd import assign_labels
    from dqkm.kernels.lloyd_sparse import assign_labels_csr

    X = blobs * np.float32(1e21)
    C = blobs[[0, 1, 2, 3, 4]] * np.float32(1e18)
    ref, ref_d = assign_labels(X.astype(np.float64), C.astype(np.float64))
    for lab, mind in (assign_labels(X, C), assign_labels_csr(sp.csr_matrix(X), C)):
        np.testing.assert_array_equal(lab, ref)
        np.testing.assert_allclose(mind, ref_d, rtol=1e-5)


def test_kernel_csr_float32_large_values_same_labels(blobs):
    import scipy.sparse as sp

    from dqkm.kernels.lloyd_sparse import assign_labels_csr

    C = blobs[[0, 1, 2, 3, 4]]
    lab, mind = assign_labels_csr(sp.csr_matrix(blobs), C)
    lab_s, mind_s = assign_labels_csr(sp.csr_matrix(blobs * SCALE32), C * SCALE32)
    np.testing.assert_array_equal(lab_s, lab)
    np.testing.assert_allclose(mind_s, mind * 1e40, rtol=1e-3, atol=1e36)


@pytest.mark.parametrize("init", ["k-means++", "k-means||"])
def test_kmeans_float32_large_values_same_labels(blobs, init):
    Xd = da.from_array(blobs, chunks=(200, -1))
    Xs = da.from_array(blobs * SCALE32, chunks=(200, -1))
    km = dqkm.KMeans(3, init=init, random_state=0).fit(Xd)
    ks = dqkm.KMeans(3, init=init, random_state=0).fit(Xs)
    _same_partition(ks.labels_.compute(), km.labels_.compute())
    _same_partition(ks.predict(Xs).compute(), km.labels_.compute())
    assert len(np.unique(ks.labels_.compute())) == 3
    np.testing.assert_allclose(ks.inertia_, km.inertia_ * 1e40, rtol=1e-3)
    np.testing.assert_allclose(-ks.score(Xs), km.inertia_ * 1e40, rtol=1e-3)
    # in-memory input takes the same path
    _same_partition(ks.predict(blobs * SCALE32), km.labels_.compute())


def test_qkmeans_float32_large_values_same_labels(blobs):
    Xd = da.from_array(blobs, chunks=(200, -1))
    Xs = da.from_array(blobs * SCALE32, chunks=(200, -1))
    kw = dict(sparsity=2, n_factors=2, random_state=0, max_iter=10, palm_iter=10,
              palm_iter_init=20)
    qk = dqkm.QKMeans(3, **kw).fit(Xd)
    qs = dqkm.QKMeans(3, **kw).fit(Xs)
    ref = qk.labels_.compute()
    _same_partition(qs.labels_.compute(), ref)
    _same_partition(qs.predict(Xs).compute(), ref)
    assert len(np.unique(qs.labels_.compute())) == 3
    np.testing.assert_allclose(qs.inertia_, qk.inertia_ * 1e40, rtol=1e-2)
    np.testing.assert_allclose(-qs.score(Xs), -qk.score(Xd) * 1e40, rtol=1e-2)
    d = qs.transform(Xs).compute()
    assert np.isfinite(d).all()
    np.testing.assert_array_equal(d.argmin(axis=1), qs.predict(Xs).compute())


def _too_large():
    return pytest.raises(DataError, match=r"too large.*magnitude is \d\.\d+e\+16\d")


def _assert_not_infinity(excinfo):
    assert "infinity" not in str(excinfo.value)
    assert "rescale" in str(excinfo.value).lower()


@pytest.mark.parametrize("init", ["k-means++", "k-means||", "array"])
def test_kmeans_float64_overflow_is_refused_with_the_magnitude(blobs, init):
    X = blobs.astype(np.float64) * SCALE64
    Xd = da.from_array(X, chunks=(200, -1))
    km = dqkm.KMeans(3, init=X[:3] if init == "array" else init, random_state=0)
    with _too_large() as e:
        km.fit(Xd)
    _assert_not_infinity(e)
    with _too_large() as e:
        dqkm.KMeans(3, init=X[:3] if init == "array" else init, random_state=0).fit(X)
    _assert_not_infinity(e)


def test_kmeans_predict_score_float64_overflow_refused(blobs):
    X = blobs.astype(np.float64)
    km = dqkm.KMeans(3, random_state=0).fit(X)
    Xs = da.from_array(X * SCALE64, chunks=(200, -1))
    with _too_large() as e:
        km.predict(Xs).compute()
    _assert_not_infinity(e)
    with _too_large() as e:
        km.score(Xs)
    _assert_not_infinity(e)
    with _too_large():
        km.transform(Xs).compute()
    with _too_large():
        km.predict(X * SCALE64)


def test_qkmeans_float64_overflow_refused(blobs):
    X = blobs.astype(np.float64)
    Xs = X * SCALE64
    kw = dict(sparsity=2, n_factors=2, random_state=0, max_iter=5, palm_iter=5,
              palm_iter_init=10)
    for init in ("k-means++", "k-means||", "array"):
        init = Xs[:3] if init == "array" else init
        with _too_large() as e:
            dqkm.QKMeans(3, init=init, **kw).fit(da.from_array(Xs, chunks=(200, -1)))
        _assert_not_infinity(e)
    qk = dqkm.QKMeans(3, **kw).fit(X)
    with _too_large():
        qk.predict(da.from_array(Xs, chunks=(200, -1))).compute()
    with _too_large():
        qk.score(Xs)


# ------------------------------------------------------------------ 9: NaN / inf
NAN_ROW, INF_ROW = 123, 456
BAD = r"Input X contains (NaN|infinity) \(first at row (123|456)"


@pytest.fixture(scope="module")
def bad(blobs):
    X = blobs.astype(np.float64)
    B = X.copy()
    B[NAN_ROW, 1] = np.nan
    B[INF_ROW, 2] = np.inf
    return X, da.from_array(B, chunks=(100, -1))


@pytest.mark.parametrize("make", [
    lambda: dqkm.KMeans(3, random_state=0),
    lambda: dqkm.KMeansL1(3, radius=50.0, random_state=0),
    lambda: dqkm.QKMeans(3, sparsity=2, n_factors=2, random_state=0, max_iter=3, palm_iter=5,
                         palm_iter_init=10),
], ids=["KMeans", "KMeansL1", "QKMeans"])
def test_kmeans_family_inference_refuses_nonfinite(bad, make):
    X, B = bad
    est = make().fit(X)
    for method in (est.predict, est.transform):
        out = method(B)  # lazy: nothing read yet
        with pytest.raises(DataError, match=BAD):
            out.compute()
    with pytest.raises(DataError, match=r"Input X contains NaN \(first at row 123, "):
        est.score(B)


@pytest.mark.parametrize("make", [
    lambda: dqkm.SparseEmbeddedKMeans(3, n_components=3, random_state=0),
    lambda: dqkm.KMultipleMeans(3, n_prototypes=30, n_neighbors=3, random_state=0),
], ids=["SparseEmbeddedKMeans", "KMultipleMeans"])
def test_other_estimators_inference_refuses_nonfinite(bad, make):
    X, B = bad
    est = make().fit(X)
    for method in (est.predict, est.transform):
        out = method(B)
        with pytest.raises(DataError, match=BAD):
            out.compute()


def test_cluster_index_kneighbors_refuses_nonfinite(bad):
    X, B = bad
    for n_probe in (1, 2):
        index = ClusterIndex(dqkm.KMeans(3, random_state=0), n_probe=n_probe).fit(X)
        dist, ind = index.kneighbors(B, 2)
        with pytest.raises(DataError, match=BAD):
            ind.compute()
        with pytest.raises(DataError, match=BAD):
            dist.compute()


def test_factor_nystroem_refuses_nonfinite(bad):
    X, B = bad
    with pytest.raises(DataError, match="Input X contains (NaN|infinity)"):
        FactorNystroem(n_components=X.shape[0], random_state=0).fit(B)
    with pytest.raises(DataError, match="Input X contains (NaN|infinity)"):
        FactorNystroem("hadamard", n_components=12, random_state=0).fit(B[455:458])
    ny = FactorNystroem(n_components=20, random_state=0).fit(X)
    out = ny.transform(B)
    with pytest.raises(DataError, match=BAD):
        out.compute()


def test_one_message_for_every_pass():
    from dqkm.parallel import finite, kmm, lloyd, qkmeans

    assert not hasattr(lloyd, "_raise_nonfinite") or lloyd._raise_nonfinite is \
        finite.raise_nonfinite
    assert not hasattr(qkmeans, "_raise_nonfinite") or qkmeans._raise_nonfinite is \
        finite.raise_nonfinite
    assert not hasattr(kmm, "_raise_nonfinite") or kmm._raise_nonfinite is \
        finite.raise_nonfinite
    with pytest.raises(DataError, match=r"^Input X contains NaN\. dqkm estimators need "
                                        "finite values; drop or impute them first\\.$"):
        finite.raise_nonfinite("NaN")


def test_refusal_crosses_worker_processes(bad, dist_client):
    """On a distributed cluster the DataError raised in a worker's task and the one
    raised on the driver after a reduction keep their type and message."""
    X, B = bad
    km = dqkm.KMeans(3, random_state=0).fit(X)
    with pytest.raises(DataError, match=BAD):
        km.predict(B).compute()
    with pytest.raises(DataError, match=r"Input X contains NaN \(first at row 123, "):
        dqkm.KMeans(3, init=X[:3], random_state=0).fit(B)
