import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import load_digits

import dqkm


@pytest.fixture(scope="module")
def digits():
    return load_digits().data


def test_centroids_in_ball_and_sparse(digits):
    km = dqkm.KMeansL1(10, radius=200.0, tol_l1=1e-3, random_state=0).fit(digits)
    l1 = np.abs(km.cluster_centers_).sum(1)
    assert np.all(l1 <= 200.0 * (1 + 1e-3) + 1e-9)
    dense = dqkm.KMeans(10, random_state=0).fit(digits)
    assert km.nnz_ < np.count_nonzero(dense.cluster_centers_)
    assert km.inertia_ >= dense.inertia_ * 0.99  # a constrained problem cannot do much better
    np.testing.assert_array_equal(km.predict(digits), km.labels_)


def test_large_radius_is_plain_kmeans(digits):
    init = digits[:10]
    a = dqkm.KMeansL1(10, radius=1e9, init=init).fit(digits)
    b = dqkm.KMeans(10, init=init).fit(digits)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    assert a.inertia_ == pytest.approx(b.inertia_)


def test_dask_input_and_save_load(tmp_path, digits):
    km = dqkm.KMeansL1(8, radius=150.0, random_state=1).fit(da.from_array(digits, chunks=500))
    assert isinstance(km.labels_, da.Array)
    dqkm.save(km, tmp_path / "l1.npz")
    km2 = dqkm.load(tmp_path / "l1.npz")
    assert km2.radius == 150.0 and km2.nnz_ == km.nnz_
    np.testing.assert_array_equal(km2.predict(digits), km.labels_.compute())


@pytest.mark.parametrize("kw,match", [
    ({"radius": 0.0}, r"'radius' parameter of KMeansL1 must be a float in the range \(0, inf\)"),
    ({"radius": -1.0}, "'radius' parameter of KMeansL1"),
    ({"tol_l1": -0.1}, "'tol_l1' parameter of KMeansL1"),
])
def test_bad_params(kw, match, digits):
    with pytest.raises(ValueError, match=match):
        dqkm.KMeansL1(3, **kw).fit(digits[:50])
