"""Out-of-core fits on a real LocalCluster for every estimator (issue item 15).

The data is larger than the workers' total memory and read from Zarr on
every pass (``persist=False``); every fit must end with the workers it
started with (none killed by its nanny) and their peak RSS under the limit.
The per-task memory bounds behind this are unit-tested in test_out_of_core.py.

The ClusterIndex build writes its index to Zarr through the two-phase shuffle of
dqkm/parallel/shuffle.py (no task holds more than about two blocks of X).
KMultipleMeans keeps its rows of S on the workers between passes (a few
hundred bytes per sample, checked against the workers' memory before the first
pass) and reads X again on every pass.
"""

import logging
import os
import threading
import time

import dask
import numpy as np
import pytest

import dqkm
from dqkm import datasets
from dqkm.neighbors import ClusterIndex

LIMIT = 550 * 2**20  # see tests/cluster/test_checkpoint.py: a worker itself takes ~250 MiB


def _estimators():
    return {
        "QKMeans": lambda: dqkm.QKMeans(8, sparsity=2, max_iter=2, tol=0, persist=False,
                                        palm_iter=5, palm_iter_init=20, random_state=0),
        "SparseEmbeddedKMeans": lambda: dqkm.SparseEmbeddedKMeans(
            8, n_components=16, random_state=0,
            kmeans={"max_iter": 2, "tol": 0, "persist": False}),
        # n_neighbors=2: the 8 blobs split the β = 0 graph already
        "KMultipleMeans": lambda: dqkm.KMultipleMeans(8, n_prototypes=40, n_neighbors=2,
                                                      max_iter=1, max_inner_iter=2,
                                                      persist=False, random_state=0),
        "ClusterIndex": lambda: ClusterIndex(
            dqkm.KMeans(8, max_iter=2, tol=0, persist=False, random_state=0)),
    }


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """1.14 GiB of float32 blobs on disk (more than 2 workers x 550 MiB)."""
    path = tmp_path_factory.mktemp("ooc") / "X.zarr"
    X, _ = datasets.make_blobs(300_000, 1024, 8, chunks=8192, random_state=0, path=path)
    assert X.nbytes > 2 * LIMIT
    # numba caches the kernels on disk: compile them here, not in the tight workers
    small = X[:3000].compute()
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for make in _estimators().values():
            make().fit(small)
    return X


@pytest.fixture(scope="module")
def tight_client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None, silence_logs=logging.ERROR,
                      memory_limit=LIMIT) as cluster, Client(cluster) as client:
        yield client


def _sample_peaks(client, stop, peaks):
    import psutil

    def rss():
        return psutil.Process().memory_info().rss

    while not stop.is_set():
        try:
            for w, v in client.run(rss).items():
                peaks[w] = max(peaks.get(w, 0), v)
        except Exception:  # a worker going away shows in the pid check
            pass
        time.sleep(0.25)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("name", ["QKMeans", "SparseEmbeddedKMeans", "KMultipleMeans",
                                  "ClusterIndex"])
def test_out_of_core_fit_keeps_its_workers(name, big, tight_client, tmp_path, record_property):
    client = tight_client
    pids = client.run(os.getpid)
    est = _estimators()[name]()
    if name == "ClusterIndex":
        est.set_params(store=str(tmp_path / "index.zarr"))
    peaks, stop = {}, threading.Event()
    sampler = threading.Thread(target=_sample_peaks, args=(client, stop, peaks))
    sampler.start()
    try:
        est.fit(big)
    finally:
        stop.set()
        sampler.join()
    assert client.run(os.getpid) == pids, "a worker was restarted"
    if name == "ClusterIndex":
        assert int(est.cluster_sizes_.sum()) == big.shape[0]
    else:
        labels = np.asarray(dask.compute(est.labels_)[0]) if hasattr(est.labels_, "dask") \
            else est.labels_
        assert labels.shape == (big.shape[0],)
        assert len(np.unique(labels[labels >= 0])) >= 2
    peak = max(peaks.values()) / 2**20
    record_property("peak_worker_rss_mb", round(peak))
    assert peak < LIMIT / 2**20
