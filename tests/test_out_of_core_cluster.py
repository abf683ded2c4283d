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
    # 2048-row (8 MiB) chunks: every estimator's task, the ClusterIndex shuffle's and KMM's
    # included, fits what the workers have left after the fits before it (on 32 MiB
    # chunks KMM and the shuffle were refused at 25-44 MiB of headroom, and a rechunk to
    # 2048 rows held whole 32 MiB chunks and their pieces: a worker passed 95 %).
    X, _ = datasets.make_blobs(300_000, 1024, 8, chunks=2048, random_state=0, path=path)
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
    X = big
    if name == "ClusterIndex":
        est.set_params(store=str(tmp_path / "index.zarr"))
    peaks, stop = {}, threading.Event()
    sampler = threading.Thread(target=_sample_peaks, args=(client, stop, peaks))
    sampler.start()
    try:
        est.fit(X)
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


@pytest.mark.slow  # compiles the pass's kernels from an empty numba cache
@pytest.mark.distributed
def test_workers_load_the_qkmeans_kernels_from_the_drivers_cache(tmp_path):
    """From an empty numba cache, the workers of a local cluster compile none of the
    QK-means pass's kernels: the driver compiled them into the cache the workers read
    (a worker compiling them itself kept ~110 MiB more, enough to hold a 450 MiB
    worker above distributed's pause threshold for good; see
    tests/cluster/test_checkpoint.py::test_out_of_core_fit_larger_than_cluster_memory)."""
    import json
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(dqkm.__file__)))
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"),
               PYTHONPATH=os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")]
                                                    if p]))
    script = os.path.join(os.path.dirname(__file__), "_cold_kernels_script.py")
    proc = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sum(out["counts"]) == 4000 and out["labels"] == 4000 and out["dist"] == [4000, 4]
    for stats in out["workers"]:
        assert stats["misses"] == 0, f"a worker compiled kernels itself: {out['workers']}"
        assert stats["hits"] > 0


def _vm_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/self/status")


def test_index_shuffle_spill_task_holds_its_block_and_one_tile(tmp_path):
    """Phase 1 of the ClusterIndex build's shuffle (one task per block of X) writes the
    block's rows sorted by destination a tile at a time: the task's memory beyond its
    input block stays a fraction of that block, whatever the block's size (a sorted copy
    of the block, as before, doubled it)."""
    from dqkm.data.spill import spill_block

    rng = np.random.default_rng(0)
    n = 400_000
    block = rng.random((n, 32), dtype=np.float32)  # 51 MB
    dest = rng.permutation(n).astype(np.int64)[:, None]
    try:
        with open("/proc/self/clear_refs", "w") as f:  # resets VmHWM to the current RSS
            f.write("5")
    except OSError as e:
        pytest.skip(f"the peak RSS of this process cannot be reset here ({e})")
    before = _vm_kib("VmRSS")
    spill_block(block, dest, str(tmp_path), block_id=(0, 0))
    extra = (_vm_kib("VmHWM") - before) * 1024
    assert extra < 0.25 * block.nbytes, f"{extra / 2**20:.0f} MiB beyond the block"
    order = np.argsort(dest.ravel(), kind="stable")
    np.testing.assert_array_equal(np.load(tmp_path / "part-000000.npy"), block[order])
    np.testing.assert_array_equal(np.load(tmp_path / "pos-000000.npy"), dest.ravel()[order])


def test_index_shuffle_worker_memory_does_not_grow_with_the_number_of_blocks(tmp_path):
    """Phase 1 of the shuffle on a real worker: its peak memory is about one block's
    task, however many blocks X has. (Each task carried its rows' destinations in the
    graph, 8 bytes a row, and a worker held those of every task sent to it: the peak
    grew with the number of blocks, +254 MiB over a 2 × 600 MiB cluster's baseline for
    28 blocks of 64 MiB, where one block took +84 MiB; the ClusterIndex build of 1.5×
    the workers' memory paused them. Now each task reads its slice from a file the
    driver wrote in the spill directory.)"""
    from distributed import Client, LocalCluster

    from dqkm.parallel.shuffle import permute_rows, remove_spill, spill_directory

    if not os.path.exists("/proc/self/clear_refs"):
        pytest.skip("the peak RSS of a worker cannot be reset on this system (no clear_refs)")
    rows, blocks = 65_536, 48  # 1 MiB blocks of X; their destinations 0.5 MiB each
    with dask.config.set({"scheduler": "threads"}):
        X, _ = datasets.make_blobs(rows * blocks, 4, 3, chunks=rows, random_state=0,
                                   path=tmp_path / "X.zarr")
    order = np.random.default_rng(0).permutation(X.shape[0])
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=None, silence_logs=logging.ERROR) as cluster, \
            Client(cluster) as client:
        warm = spill_directory(tmp_path / "warm")  # the worker loads dqkm and the kernels
        permute_rows(X[: 2 * rows], np.random.default_rng(1).permutation(2 * rows), warm,
                     out_rows=rows)
        remove_spill(warm, 2)
        start = client.run(_reset_peak_rss)
        spill = spill_directory(tmp_path / "index")
        Xs = permute_rows(X, order, spill, out_rows=rows)
        peak = client.run(_peak_rss)
        growth = max(peak[w] - start[w] for w in peak)
        np.testing.assert_array_equal(Xs[:rows].compute(), X.compute()[order[:rows]])
        remove_spill(spill, blocks)
    # one block (1 MiB), its destinations, order and norms (2 MiB) and one tile; the
    # destinations of all 48 blocks are 24 MiB
    assert growth < 12 * 2**20, f"the worker grew by {growth / 2**20:.1f} MiB in phase 1"
    assert not os.path.exists(spill)


def test_index_write_holds_no_gathered_block_for_a_second_consumer(tmp_path, monkeypatch):
    """The ClusterIndex write stores the gathered rows and their squared norms from tasks
    of their own: no gathered block of X feeds two stores (the norms taken from the
    gathered rows made the scheduler keep each block until both had run: up to all of X
    on the workers, a working set that grew with the number of rows)."""
    import dqkm.parallel.neighbors as pn

    with dask.config.set({"scheduler": "threads"}):  # not the module's tight cluster
        X, _ = datasets.make_blobs(6000, 8, 4, chunks=1000, random_state=0,
                                   path=tmp_path / "X.zarr")
    seen = {}
    real = pn.write_index_store

    def spy(arrays, path, **kw):
        seen.update(arrays)
        return real(arrays, path, **kw)

    monkeypatch.setattr(pn, "write_index_store", spy)
    with dask.config.set({"scheduler": "threads"}):
        index = ClusterIndex(dqkm.KMeans(4, max_iter=3, random_state=0),
                             store=str(tmp_path / "index.zarr")).fit(X)
    rows = set(seen["X"].__dask_graph__().keys())
    norms = set(seen["sq_norms"].__dask_graph__().keys())
    gathered = {k for k in rows if "gather" in str(k)}
    assert gathered and not gathered & norms
    Xi, ids, sq = (np.asarray(a[...]) for a in pn.open_index_arrays(index.index_.path))
    np.testing.assert_array_equal(Xi, X.compute()[ids])
    np.testing.assert_allclose(sq, np.einsum("ij,ij->i", Xi, Xi, dtype=np.float64),
                               rtol=1e-12)


def _reset_peak_rss():
    """VmHWM back to the current RSS; returns that RSS (bytes)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _vm_kib("VmRSS") * 1024


def _peak_rss():
    return _vm_kib("VmHWM") * 1024


def test_index_build_that_cannot_fit_is_refused_before_it_pauses_a_worker(tmp_path):
    """A ClusterIndex build whose shuffle task cannot fit the workers is refused with
    MemoryBudgetError, naming the memory that task needs, before any of its passes: no
    worker reads a block of X (its peak RSS, the kernel's high-water mark reset before
    the fit, stays within a quarter block of where it started) and none is restarted.
    Two 128 MiB chunks on 520 MiB workers (pause line 416 MiB; a worker itself holds
    280–390 MiB: 388 MiB in a fresh clone, where 450 MiB workers were paused before any
    task): a shuffle task holds its block, the rows' destinations, order and norms and a
    sorted tile (~150 MiB), more than any such worker has left below its pause line.
    (Before, the build ran anyway and each task reading its block paused its worker;
    later, the check read the scheduler's last heartbeat, which under pytest could
    still report the workers at ~65 MiB, before the test's first call loaded dqkm on
    them, and the build was let through and its workers killed.)
    That a build which fits completes below the limit is
    test_out_of_core_fit_keeps_its_workers[ClusterIndex]."""
    from distributed import Client, LocalCluster

    from dqkm.parallel.memory import MemoryBudgetError

    if not os.path.exists("/proc/self/clear_refs"):
        pytest.skip("the peak RSS of a worker cannot be reset on this system (no clear_refs)")
    with dask.config.set({"scheduler": "threads"}):
        X, _ = datasets.make_blobs(2 * 1_048_576, 32, 8, chunks=1_048_576, random_state=0,
                                   path=tmp_path / "X.zarr")
        # on the driver, whatever client an earlier test left as the default
        km = dqkm.KMeans(8, max_iter=3, random_state=0).fit(X[:20_000].compute())
    limit = 520 * 2**20
    pause = dask.config.get("distributed.worker.memory.pause") * limit
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None, silence_logs=logging.ERROR,
                      memory_limit=limit) as cluster, Client(cluster) as client:
        pids = client.run(os.getpid)
        start = client.run(_reset_peak_rss)
        index = ClusterIndex(km, store=str(tmp_path / "index.zarr"))
        with pytest.raises(MemoryBudgetError, match=r"ClusterIndex build .*one task needs "
                                                    r"about .*block of X 128 MiB.*Store X in "
                                                    r"chunks of fewer rows"):
            index.fit(X)
        peaks = client.run(_peak_rss)
        assert client.run(os.getpid) == pids, "a worker was restarted"
    # No block of X (128 MiB) was read: a worker grew by less than a quarter of one. (Its
    # absolute peak is not the measure: in an environment whose dask imports pull in
    # xarray, pandas and pyarrow a worker can start near or above the 360 MiB pause line
    # on its own; that is what the refusal's headroom sees.)
    growth = max(peaks[w] - start[w] for w in peaks)
    assert growth < 32 * 2**20, \
        f"a worker grew by {growth / 2**20:.0f} MiB during the refused build (pause line " \
        f"{pause / 2**20:.0f} MiB)"
    assert [p.name for p in tmp_path.iterdir()] == ["X.zarr"]  # no store, no spill files
