import dask.array as da
import numpy as np
import pytest

from dqkm import datasets


def test_make_blobs_is_deterministic_per_chunk():
    X1, y1 = datasets.make_blobs(5000, 6, 4, chunks=1200, random_state=3)
    X2, y2 = datasets.make_blobs(5000, 6, 4, chunks=1200, random_state=3)
    assert isinstance(X1, da.Array) and X1.dtype == np.float32 and y1.dtype == np.int32
    assert X1.chunks == ((1200,) * 4 + (200,), (6,))
    np.testing.assert_array_equal(X1.compute(), X2.compute())
    # a chunk is computed alone without the others (generated on the workers)
    np.testing.assert_array_equal(X1.blocks[2].compute(), X1.compute()[2400:3600])
    X3, _ = datasets.make_blobs(5000, 6, 4, chunks=1200, random_state=4)
    assert not np.array_equal(X1.compute(), X3.compute())


def test_make_blobs_structure_and_zarr(tmp_path):
    X, y, centers = datasets.make_blobs(4000, 3, 5, cluster_std=0.1, chunks=1000,
                                        random_state=0, return_centers=True,
                                        path=tmp_path / "b.zarr")
    Xc, yc = X.compute(), y.compute()
    assert np.abs(Xc - centers[yc]).max() < 1.0
    assert set(np.unique(yc)) == set(range(5))
    assert "from-zarr" in X.name or "zarr" in X.name
    with pytest.raises(FileExistsError):
        datasets.make_blobs(10, 3, 2, path=tmp_path / "b.zarr")


def test_bundled_and_generated():
    X, y = datasets.load_digits()
    assert X.shape == (1797, 64) and y.shape == (1797,)
    for f, shape in [(datasets.load_breast_cancer, (569, 30)), (datasets.load_wine, (178, 13)),
                     (datasets.load_iris, (150, 4))]:
        assert f()[0].shape == shape
    Xm, ym = datasets.make_moons(1000, noise=0.05, chunks=250, random_state=0)
    assert Xm.shape == (1000, 2) and set(np.unique(ym.compute())) == {0, 1}
    Xc, _ = datasets.make_circles(600, noise=0.01, chunks=200, random_state=0)
    r = np.linalg.norm(Xc.compute(), axis=1)
    assert ((r > 0.9) | (r < 0.9)).all() and r.max() < 1.1


def test_bad_arguments():
    with pytest.raises(ValueError, match="'n_samples' parameter must be an int >= 1"):
        datasets.make_blobs(0, 2, 2)
    with pytest.raises(ValueError, match="'centers' parameter must be an int or an array"):
        datasets.make_blobs(10, 2, np.zeros((3, 4)))
    with pytest.raises(ValueError, match="'random_state'"):
        datasets.make_blobs(10, 2, 2, random_state=-1)
