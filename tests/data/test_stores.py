"""Reading stores safely: relative paths on workers started elsewhere, a store a
worker cannot see, and Dask input whose chunk sizes are unknown."""

import shutil

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp

from dqkm import KMeans, cli, io
from dqkm.exceptions import DataError, StoreError
from dqkm.sparse import save_csr

from .._multiprocess_cluster import MultiprocessCluster


def _data(n=600, d=4, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-10, 10, (3, d))
    return (centers[rng.integers(0, 3, n)] + rng.standard_normal((n, d))).astype("f8")


# ------------------------------------------------------------------ relative paths
@pytest.fixture(scope="module")
def far_cluster(tmp_path_factory, request):
    """A scheduler and two workers as subprocesses, each in its own working directory."""
    cluster = MultiprocessCluster(tmp_path_factory.mktemp("far"), n_workers=2, timeout=60,
                                  own_cwds=True)
    request.addfinalizer(cluster.close)
    return cluster.start()


@pytest.fixture
def far_client(far_cluster):
    from distributed import Client

    with Client(far_cluster.address, timeout=30) as client:
        yield client


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """The test's cwd: a directory holding data.zarr (zstd, the fast reader), plain.zarr
    (chunked along features: zarr-python's reader) and csr.zarr (a CSR group)."""
    X = _data()
    io.save_array(da.from_array(X, chunks=(150, 4)), tmp_path / "data.zarr")
    import zarr

    z = zarr.create_array(tmp_path / "plain.zarr", shape=X.shape, chunks=(150, 2), dtype="f8")
    z[...] = X
    save_csr(sp.csr_matrix(np.where(X > 0, X, 0.0)), tmp_path / "csr.zarr")
    monkeypatch.chdir(tmp_path)
    return X


def _fit(X):
    return KMeans(n_clusters=3, random_state=0, max_iter=20).fit(X)


@pytest.mark.parametrize("store", ["data.zarr", "plain.zarr"])
def test_a_relative_path_fits_the_same_on_workers_started_elsewhere(data_dir, far_client,
                                                                    store):
    with dask.config.set(scheduler="threads"):
        local = _fit(io.as_dask_array(store))
    assert local.inertia_ > 0
    far = _fit(io.as_dask_array(store))  # far_client is the default scheduler
    np.testing.assert_allclose(far.cluster_centers_, local.cluster_centers_, rtol=1e-10)
    assert far.inertia_ == pytest.approx(local.inertia_, rel=1e-10)


def test_a_relative_csr_path_reads_the_same_on_workers_started_elsewhere(data_dir,
                                                                         far_client):
    got = io.as_dask_array("csr.zarr").compute()
    np.testing.assert_array_equal(got.toarray(), np.where(data_dir > 0, data_dir, 0.0))


def test_cli_fit_and_predict_of_a_relative_path_with_a_remote_scheduler(data_dir, far_cluster,
                                                                        capsys):
    with dask.config.set(scheduler="threads"):
        local = _fit(io.as_dask_array("data.zarr"))
    assert cli.main(["fit", "--algorithm", "kmeans", "--n-clusters", "3", "--max-iter", "20",
                     "--random-state", "0", "data.zarr", "--out", "model.zarr",
                     "--scheduler", far_cluster.address, "--no-progress"]) == 0
    out = capsys.readouterr().out
    inertia = float(out.split("inertia=")[1].split()[0])
    assert inertia == pytest.approx(local.inertia_, rel=1e-5)
    assert cli.main(["predict", "model.zarr", "data.zarr", "--out", "labels.zarr",
                     "--scheduler", far_cluster.address, "--no-progress"]) == 0
    labels = io.load_array("labels.zarr").compute()
    np.testing.assert_array_equal(labels, local.predict(data_dir))


@pytest.mark.parametrize("store", ["data.zarr", "plain.zarr", "csr.zarr"])
def test_a_store_the_worker_cannot_see_is_a_store_error(data_dir, far_client, store):
    X = io.as_dask_array(store)
    shutil.rmtree(store)  # the graph is built; the workers find nothing
    with pytest.raises(StoreError, match=rf"{store}.*not visible on worker tcp://127\.0\.0\.1"):
        X.compute()


def test_a_missing_chunk_file_is_still_the_fill_value(tmp_path):
    import zarr

    z = zarr.create_array(tmp_path / "f.zarr", shape=(8, 2), chunks=(4, 2), dtype="f8",
                          fill_value=3.0, compressors=None)
    z[4:] = 1.0
    X = io.load_array(tmp_path / "f.zarr").compute()
    np.testing.assert_array_equal(X, np.r_[np.full((4, 2), 3.0), np.ones((4, 2))])


# ------------------------------------------------------------------ unknown chunk sizes
def _masked(axis):
    X = da.from_array(_data(), chunks=(100, 4))
    if axis == 0:
        return X[X[:, 0] > -100]  # keeps every row, but Dask cannot know that
    return X[:, da.from_array(np.array([True, True, False, True]))]


@pytest.mark.parametrize("axis", [0, 1])
def test_fit_with_unknown_chunk_sizes_says_how_to_fix_it(axis):
    X = _masked(axis)
    with pytest.raises(DataError, match=rf"unknown chunk sizes along axis {axis}.*"
                                        r"X\.compute_chunk_sizes\(\).*lengths=True"):
        KMeans(n_clusters=3, random_state=0).fit(X)
    fitted = KMeans(n_clusters=3, random_state=0, max_iter=5).fit(X.compute_chunk_sizes())
    assert fitted.n_features_in_ == (4 if axis == 0 else 3)


def test_predict_with_unknown_chunk_sizes_says_how_to_fix_it():
    model = KMeans(n_clusters=3, random_state=0, max_iter=5).fit(_data())
    with pytest.raises(DataError, match=r"unknown chunk sizes along axis 0.*compute_chunk_sizes"):
        model.predict(_masked(0))


@pytest.mark.parametrize("axis", [0, 1])
def test_as_dask_array_with_unknown_chunk_sizes_says_how_to_fix_it(axis):
    with pytest.raises(DataError, match=rf"unknown chunk sizes along axis {axis}.*"
                                        r"compute_chunk_sizes"):
        io.as_dask_array(_masked(axis))


def test_a_relative_index_store_is_searched_the_same_on_workers_started_elsewhere(
        data_dir, far_client):
    """A ClusterIndex written to a relative store path: the index enters the search graph
    with its absolute path, so workers started in other directories read the same rows."""
    import os

    from dqkm.neighbors import ClusterIndex

    queries = da.from_array(data_dir[:60], chunks=20)
    with dask.config.set(scheduler="threads"):
        km = _fit(data_dir)
        local = ClusterIndex(km, n_probe=2).fit(data_dir)
        want_d, want_i = (np.asarray(a) for a in
                          dask.compute(*local.kneighbors(queries, n_neighbors=4)))
    far = ClusterIndex(km, n_probe=2, store="index.zarr").fit(da.from_array(data_dir,
                                                                             chunks=150))
    assert far.index_.path == os.path.abspath("index.zarr")
    got_d, got_i = (np.asarray(a) for a in dask.compute(*far.kneighbors(queries,
                                                                         n_neighbors=4)))
    np.testing.assert_array_equal(got_i, want_i)
    np.testing.assert_allclose(got_d, want_d, rtol=1e-12)
