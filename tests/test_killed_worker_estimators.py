"""A worker killed mid-fit (from inside one of its tasks) does not change the result.

The KMeans version (tests/cluster/test_checkpoint.py) kills a worker from a
timed thread; here a task of the pass kills its own worker process the
``KILL_AT``-th time it reads chunk 3, so the fault falls inside a pass on
every run.
"""

import contextlib
import logging
import os
import signal

import dask
import numpy as np
import pytest

import dqkm
from dqkm import datasets

KILL_AT = 4


def _die_on_nth_read(block, block_info=None, counter=None):
    if block_info is not None and block_info[0]["chunk-location"][0] == 3:
        with open(counter, "a") as f:
            f.write("x")
        with open(counter) as f:
            n = len(f.read())
        if n == KILL_AT:
            os.kill(os.getpid(), signal.SIGKILL)
    return block


def _estimators():
    return {
        "QKMeans": lambda: dqkm.QKMeans(5, sparsity=2, max_iter=6, tol=0, persist=False,
                                        palm_iter=5, palm_iter_init=20, random_state=0),
        "SparseEmbeddedKMeans": lambda: dqkm.SparseEmbeddedKMeans(
            5, n_components=6, random_state=0,
            kmeans={"max_iter": 6, "tol": 0, "persist": False}),
        "KMultipleMeans": lambda: dqkm.KMultipleMeans(5, n_prototypes=30, max_iter=3,
                                                      persist=False, random_state=0),
    }


@contextlib.contextmanager
def _two_workers():
    """A client of a LocalCluster of two single-thread worker processes."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None, silence_logs=logging.CRITICAL) as cluster, \
            Client(cluster) as client:
        yield client


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("name", list(_estimators()))
def test_killed_worker_does_not_change_the_result(tmp_path, name):
    X, _ = datasets.make_blobs(20_000, 8, 5, cluster_std=2.0, chunks=2000, random_state=0,
                               path=tmp_path / "d.zarr")
    reference = _estimators()[name]().fit(X)
    counter = str(tmp_path / "reads")
    Xk = X.map_blocks(_die_on_nth_read, counter=counter, dtype=X.dtype)
    with _two_workers() as client:
        pids = set(client.run(os.getpid).values())
        est = _estimators()[name]().fit(Xk)
        labels = np.asarray(dask.compute(est.labels_)[0])
        assert set(client.run(os.getpid).values()) != pids, "no worker was killed"
    with open(counter) as f:
        assert len(f.read()) > KILL_AT  # the chunk was read again after the kill
    centers = "prototypes_" if name == "KMultipleMeans" else "cluster_centers_"
    np.testing.assert_allclose(getattr(est, centers), getattr(reference, centers), rtol=1e-6,
                               atol=1e-6)
    np.testing.assert_array_equal(labels, np.asarray(reference.labels_))
    assert est.n_iter_ == reference.n_iter_


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_killed_worker_does_not_change_the_cluster_index(tmp_path):
    """The ClusterIndex build (its clusterer's fit, the spill-file shuffle of X's rows
    by cluster, the store write) with a worker killed mid-build: the same clusters,
    the same stored order and the same neighbours as the build without a fault."""
    from dqkm.neighbors import ClusterIndex

    X, _ = datasets.make_blobs(20_000, 8, 5, cluster_std=2.0, chunks=2000, random_state=0,
                               path=tmp_path / "d.zarr")
    Q = np.asarray(X[:50])

    def build(data, store):
        return ClusterIndex(dqkm.KMeans(5, max_iter=4, tol=0, persist=False, random_state=0),
                            n_probe=2, store=str(store)).fit(data)

    reference = build(X, tmp_path / "ref.zarr")
    counter = str(tmp_path / "reads")
    Xk = X.map_blocks(_die_on_nth_read, counter=counter, dtype=X.dtype)
    with _two_workers() as client:
        pids = set(client.run(os.getpid).values())
        index = build(Xk, tmp_path / "index.zarr")
        assert set(client.run(os.getpid).values()) != pids, "no worker was killed"
        dist, ind = index.kneighbors(Q, 3)
    with open(counter) as f:
        assert len(f.read()) > KILL_AT  # the chunk was read again after the kill
    np.testing.assert_array_equal(index.cluster_sizes_, reference.cluster_sizes_)
    np.testing.assert_array_equal(np.asarray(index.index_.offsets),
                                  np.asarray(reference.index_.offsets))
    ref_dist, ref_ind = reference.kneighbors(Q, 3)
    np.testing.assert_array_equal(ind, ref_ind)
    np.testing.assert_allclose(dist, ref_dist, rtol=1e-6)
