"""What a fit leaves in memory: X persisted for the fit is released after it (the
labels kept as a small persisted array), unless ``dqkm.keep-persisted`` asks to
keep it; NumPy input with a distributed Client is scattered once, not embedded in
every graph."""

from __future__ import annotations

import logging
import re
import time
import warnings

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import make_blobs

import dqkm

ESTIMATORS = {
    "KMeans": lambda: dqkm.KMeans(4, random_state=0, persist=True, max_iter=10),
    "QKMeans": lambda: dqkm.QKMeans(4, sparsity=2, random_state=0, persist=True, max_iter=3),
}


@pytest.fixture(scope="module")
def blobs():
    X, _ = make_blobs(8000, 8, centers=4, random_state=0)
    return X


def _keys_on_workers(client):
    return {str(k) for keys in client.has_what().values() for k in keys}


def _x_chunks_on_workers(client, name, settle=True):
    """The chunks of the array ``name`` the workers hold, once the client's releases
    reached them (releases are asynchronous: waited for, up to a few seconds)."""
    deadline = time.monotonic() + (10 if settle else 0)
    while True:
        held = {k for k in _keys_on_workers(client) if name in k}
        if not held or time.monotonic() > deadline:
            return held
        time.sleep(0.05)


@pytest.mark.distributed
def test_persisted_x_is_released_after_fit(dist_client, blobs):
    X = da.from_array(blobs, chunks=2000)
    model = ESTIMATORS["KMeans"]().fit(X)
    assert not _x_chunks_on_workers(dist_client, X.name)
    # the labels stay: persisted on the workers, one small int block per chunk of X
    labels = model.labels_
    assert isinstance(labels, da.Array) and labels.chunks == ((2000,) * 4,)
    assert len(labels.dask) == 4  # only the persisted blocks, no graph on X
    ref = ESTIMATORS["KMeans"]().fit(blobs)
    np.testing.assert_array_equal(labels.compute(), ref.labels_)


@pytest.mark.distributed
def test_keep_persisted_keeps_x_while_the_labels_live(dist_client, blobs):
    X = da.from_array(blobs, chunks=2000)
    with dask.config.set({"dqkm.keep-persisted": True}):
        model = ESTIMATORS["KMeans"]().fit(X)
    assert len(_x_chunks_on_workers(dist_client, X.name, settle=False)) == 4
    del model
    assert not _x_chunks_on_workers(dist_client, X.name)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_local_fit_keeps_no_graph_on_the_persisted_x(blobs, name):
    """With local threads the persisted X lives in this process: the labels must not
    hold it (their graph holds only their own small blocks)."""
    X = da.from_array(blobs, chunks=2000)
    model = ESTIMATORS[name]().fit(X)
    blocks = list(dict(model.labels_.dask).values())
    assert len(blocks) == 4
    assert sum(np.asarray(getattr(b, "value", b)).nbytes for b in blocks) == \
        blobs.shape[0] * model.labels_.dtype.itemsize
    with dask.config.set({"dqkm.keep-persisted": True}):
        kept = ESTIMATORS[name]().fit(X)
    assert len(kept.labels_.dask) > 4  # a graph on the persisted X


@pytest.mark.distributed
def test_numpy_input_is_scattered_once_not_sent_with_every_graph(dist_client):
    X, _ = make_blobs(15000, 10, centers=4, random_state=0)  # 1.2 MB: above SCATTER_BYTES
    ref = dqkm.KMeans(4, random_state=0, max_iter=5, persist=False)
    with warnings.catch_warnings(record=True) as caught, \
            dask.config.set({"distributed.admin.large-graph-warning-threshold": "1MB"}):
        warnings.simplefilter("always")
        model = dqkm.KMeans(4, random_state=0, max_iter=5, persist=False).fit(X)
        labels = model.predict(X)
    assert not [w for w in caught if "large graph" in str(w.message)]
    with dask.config.set(scheduler="threads"):
        ref.fit(X)
    np.testing.assert_allclose(model.cluster_centers_, ref.cluster_centers_)
    np.testing.assert_array_equal(labels, ref.labels_)


# ------------------------------------------------------------------ the per-task budget
MIB = 2**20


def _worker(limit_mib, process_mib, nthreads=1):
    return {"memory_limit": limit_mib * MIB, "nthreads": nthreads,
            "metrics": {"memory": process_mib * MIB}}


def test_task_budget_is_the_headroom_below_the_pause_line_not_half_the_limit():
    """A 600 MiB worker already at 280 MiB pauses at 480 MiB: a task may take what is
    left below that (less the margin), not half the limit (300 MiB, which paused or
    restarted it)."""
    from dqkm.parallel.memory import MARGIN_FRACTION, worker_headroom

    with dask.config.set({"distributed.worker.memory.pause": 0.8}):
        room = worker_headroom(_worker(600, 280))
        assert room == pytest.approx((0.8 * 600 - 280 - MARGIN_FRACTION * 600) * MIB)
        assert room < 0.5 * 600 * MIB
        # a fresh worker: never more than TASK_FRACTION of the limit
        assert worker_headroom(_worker(600, 10)) == pytest.approx(0.5 * 600 * MIB)
        # tasks side by side share it; a worker above its line gives nothing
        assert worker_headroom(_worker(600, 280, nthreads=2)) == pytest.approx(room / 2)
        assert worker_headroom(_worker(600, 500)) == 0
        assert worker_headroom({"memory_limit": 0, "nthreads": 1}) is None
    off = {"distributed.worker.memory.pause": False,
           "distributed.worker.memory.terminate": False}
    with dask.config.set(off):  # no line to keep below: the static fraction
        assert worker_headroom(_worker(600, 500)) == pytest.approx(0.5 * 600 * MIB)


def test_row_tile_fits_the_budget_or_names_what_it_needs():
    from dqkm.parallel.memory import MemoryBudgetError, row_tile

    kw = dict(what="a pass", per_row=1000, fixed=10 * MIB, knobs="Rechunk X.")
    assert row_tile(rows=50_000, budget=None, **kw) == 50_000
    assert row_tile(rows=50_000, budget=100 * MIB, **kw) == 50_000  # the chunk fits whole
    tile = row_tile(rows=50_000, budget=20 * MIB, **kw)
    assert tile == (20 * MIB - 10 * MIB) // 1000 and 10 * MIB + tile * 1000 <= 20 * MIB
    with pytest.raises(MemoryBudgetError,
                       match=r"a pass: one task needs about 10 MiB \(the chunk and fixed "
                             r"state 10 MiB, a tile of 256 rows 250 KiB\), but a worker "
                             r"can give a task 9\.0 MiB .*Rechunk X\."):
        row_tile(rows=50_000, budget=9 * MIB, min_rows=256, **kw)


# ------------------------------------------------------------------ nothing held after fit
def _held(client):
    """key -> bytes of every result the workers hold (spilled ones included)."""
    nbytes = client.nbytes(summary=False)  # also lists released keys: filtered here
    return {str(k): int(nbytes.get(k, 0)) for keys in client.has_what().values() for k in keys}


@pytest.mark.distributed
@pytest.mark.parametrize("persist", [False, True])
def test_sparse_embedded_fit_leaves_only_its_small_labels_on_the_cluster(
        dist_client, tmp_path, monkeypatch, persist):
    """After a SparseEmbeddedKMeans fit the workers hold what they held before, plus
    at most the embedded K-means's labels (one small int block per chunk): not the
    embedded X, nor a pass's inputs.  Every wait polls (a poll's timeout, when a pass
    outlasts it, used to leave a reference cycle holding the pass's futures until
    Python's cyclic collector ran; it is kept off here so that it cannot hide one)."""
    import gc

    from distributed import futures_of

    from dqkm import datasets
    from dqkm.data import execute

    monkeypatch.setattr(execute, "_POLL", 1e-4)  # every wait times out at least once
    X, _ = datasets.make_blobs(40_000, 32, 4, chunks=10_000, random_state=0,
                               path=tmp_path / "X.zarr")
    gc.collect()
    before = _held(dist_client)
    gc.disable()
    try:
        se = dqkm.SparseEmbeddedKMeans(4, n_components=8, random_state=0, kmeans={
            "max_iter": 3, "tol": 0, "persist": persist}).fit(X)
        kept = {str(f.key) for f in futures_of(se.kmeans_.labels_)} if persist else set()
        deadline = time.monotonic() + 10  # releases reach the scheduler asynchronously
        while True:
            extra = {k: v for k, v in _held(dist_client).items() if k not in before}
            if set(extra) <= kept or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        gc.enable()
    assert set(extra) <= kept, sorted(set(extra) - kept)[:5]
    assert sum(extra.values()) <= X.shape[0] * 4  # int32 labels at most
    assert isinstance(se.labels_, da.Array)


def test_sparse_embedded_passes_tile_to_the_headroom_or_refuse(monkeypatch):
    """SE's passes over X size their row tiles from the tightest worker's headroom less
    one chunk of X: a smaller headroom gives smaller tiles and the same model; one that
    cannot hold the chunk and a tile of MIN_TILE_ROWS rows is refused before any pass
    (no embedded K-means run first),
    naming the memory needed and available."""
    from dqkm.parallel import memory
    from dqkm.parallel.embedding import MIN_TILE_ROWS, pass_tile_bytes
    from dqkm.parallel.memory import MemoryBudgetError

    X, _ = make_blobs(4000, 64, centers=3, random_state=0)
    Xd = da.from_array(X.astype(np.float32), chunks=1000)
    chunk = 1000 * 64 * 4
    per_row = 3 * 8 * 64 + 2 * 8 * 8 + 64

    def fit():
        return dqkm.SparseEmbeddedKMeans(3, n_components=8, random_state=0).fit(Xd)

    ref = fit()
    monkeypatch.setattr(memory, "task_budget", lambda fresh=False: chunk + 100 * per_row)
    assert pass_tile_bytes(Xd, 8, "a pass") == 100 * per_row
    small = fit()
    np.testing.assert_allclose(small.cluster_centers_, ref.cluster_centers_, rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(small.labels_), np.asarray(ref.labels_))
    monkeypatch.setattr(memory, "task_budget",
                        lambda fresh=False: chunk + (MIN_TILE_ROWS - 1) * per_row)
    est = dqkm.SparseEmbeddedKMeans(3, n_components=8, random_state=0)
    with pytest.raises(MemoryBudgetError, match=r"SparseEmbeddedKMeans moments pass: one task "
                       r"needs about .* but a worker can give a task .*Store X in chunks of "
                       r"fewer rows"):
        est.fit(Xd)
    assert not hasattr(est, "kmeans_")


@pytest.mark.distributed
def test_no_chunk_read_from_zarr_is_held_as_a_result_of_its_own(dist_client, tmp_path):
    """On a cluster, a KMeans fit and a ClusterIndex build over Zarr (chunks above
    INLINE_BYTES) never hold a chunk of X as a result waiting for its consumer: the
    reads run inside the tasks that use them (a one-thread worker handed a read ahead
    held two 64 MiB chunks, and was restarted past 95 % of its memory_limit).  The
    centers start from an array: the k-means|| sample of X is dask's fancy indexing,
    whose split tasks still take the reads as results of their own."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    from dqkm import datasets
    from dqkm.neighbors import ClusterIndex
    from dqkm.parallel.engine import INLINE_BYTES

    class InMemory(SchedulerPlugin):
        def __init__(self):
            self.keys = set()

        def transition(self, key, start, finish, *args, **kwargs):
            if finish == "memory":
                self.keys.add(str(key))

    rows = INLINE_BYTES // (8 * 4)
    X, _ = datasets.make_blobs(4 * rows, 8, 3, chunks=rows, random_state=0,
                               path=tmp_path / "X.zarr")
    plugin = InMemory()
    scheduler = dist_client.cluster.scheduler
    scheduler.add_plugin(plugin, name="dqkm-test-in-memory")
    try:
        init = X[:3].compute()
        km = dqkm.KMeans(3, init=init, n_init=1, max_iter=3, tol=0, persist=False).fit(X)
        ClusterIndex(dqkm.KMeans(3, init=init, n_init=1, max_iter=2, tol=0, persist=False),
                     store=str(tmp_path / "index.zarr")).fit(X)
    finally:
        scheduler.remove_plugin(name="dqkm-test-in-memory")
    assert plugin.keys  # the plugin saw the passes' results
    assert not [k for k in plugin.keys if X.name in k], X.name
    assert np.asarray(km.labels_.compute()).shape == (X.shape[0],)


def _headroom_now(client, workers=None):
    """The tightest worker's headroom computed from its memory measured now."""
    from dqkm.parallel import memory

    now = client.run(memory.worker_rss)
    workers = memory.scheduler_workers(client) if workers is None else workers
    return min(memory.worker_headroom(dict(w, metrics={"memory": now[a]}))
               for a, w in workers.items())


@pytest.mark.distributed
@pytest.mark.parametrize("reported", ["at its pause line", "empty"])
def test_the_budget_is_the_memory_measured_now_not_the_last_heartbeat(dist_client,
                                                                      monkeypatch, reported):
    """The scheduler's last heartbeat may be stale both ways: right after a pass it may
    still report that pass's peak (a refusal of a task that fits), and a worker just
    started reports its memory before any task loaded dqkm (a pass let through that
    then pauses or kills it). The budget is the headroom measured on the workers now,
    whatever the heartbeat says. (Each worker's memory_limit is reported as twice its
    memory now, so that neither the cap at half the limit nor the line hides it.)"""
    from dqkm.parallel import memory

    real = memory.scheduler_workers
    rss = dist_client.run(memory.worker_rss)
    fraction = 0.8 if reported == "at its pause line" else 0.0

    def limited(client):
        return {a: dict(w, memory_limit=2 * rss[a]) for a, w in real(client).items()}

    def stale(client):
        return {a: dict(w, metrics=dict(w["metrics"], memory=fraction * w["memory_limit"]))
                for a, w in limited(client).items()}

    with dask.config.set({"distributed.worker.memory.pause": 0.8}):
        truth = _headroom_now(dist_client, limited(dist_client))
        monkeypatch.setattr(memory, "scheduler_workers", stale)
        stale_budget = min(memory.worker_headroom(w) for w in stale(dist_client).values())
        budget = memory.task_budget()
        assert budget == pytest.approx(truth, abs=16 * MIB)
        assert abs(stale_budget - truth) > 32 * MIB  # the heartbeat alone was wrong
        assert memory.check_task_memory("a pass", {"chunk": int(budget // 2)}, "") \
            == budget // 2
        assert memory.row_tile("a pass", rows=1000, per_row=8, fixed=0, knobs="") == 1000


@pytest.mark.distributed
def test_a_worker_that_ran_no_dqkm_task_is_measured_with_dqkm_loaded():
    """A worker started moments ago holds tens of MB; the first dqkm task loads dqkm's
    modules (hundreds of MB) before it reads a block. The budget is measured after
    that load, as the task will find the worker (before, a ClusterIndex build that
    could not fit was let through on such a report and its workers were killed)."""
    from distributed import Client, LocalCluster

    from dqkm.parallel import memory

    def loaded():
        import sys

        return "dqkm" in sys.modules

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=None, silence_logs=logging.ERROR,
                      memory_limit=1024 * MIB) as cluster, Client(cluster) as client:
        assert not any(client.run(loaded).values())  # a fresh worker process
        with dask.config.set({"distributed.worker.memory.pause": 0.8}):
            budget = memory.task_budget()
            assert all(client.run(loaded).values())
            assert budget == pytest.approx(_headroom_now(client), abs=16 * MIB)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("name,what", [("KMeans", "KMeans (Lloyd) pass"),
                                       ("QKMeans", "QKMeans pass")])
def test_lloyd_and_qk_passes_are_refused_when_their_task_cannot_fit(monkeypatch, name, what):
    """A KMeans (Lloyd) or QKMeans pass over dense chunks is checked before it starts:
    its task (the chunk, its labels and distances, the centers and the float64 sums) is
    held against the tightest worker's headroom; with room for it the fit runs as
    without a budget, without, it is refused naming the memory needed and the knob."""
    from dqkm.parallel import memory
    from dqkm.parallel.memory import MemoryBudgetError

    X, _ = make_blobs(4000, 16, centers=3, random_state=0)
    Xd = da.from_array(X.astype(np.float32), chunks=1000)
    chunk, per_row = 1000 * 16 * 4, 4 + 8
    fixed = 3 * 16 * (4 + 8) + 16 * 3

    def make():
        if name == "KMeans":
            return dqkm.KMeans(3, max_iter=3, random_state=0, persist=False)
        return dqkm.QKMeans(3, sparsity=2, max_iter=2, palm_iter=5, random_state=0,
                            persist=False)

    ref = make().fit(Xd)
    monkeypatch.setattr(memory, "task_budget",
                        lambda fresh=False: chunk + 1000 * per_row + fixed)
    fits = make().fit(Xd)
    np.testing.assert_array_equal(np.asarray(fits.labels_), np.asarray(ref.labels_))
    monkeypatch.setattr(memory, "task_budget", lambda fresh=False: chunk + 999 * per_row)
    with pytest.raises(MemoryBudgetError, match=rf"{re.escape(what)}: one task needs about "
                       r".*chunk of X 62 KiB.*but a worker can give a task .*Store X in "
                       r"chunks of fewer rows"):
        make().fit(Xd)


def test_cluster_index_build_is_refused_before_its_clusterer_is_fitted(monkeypatch, tmp_path):
    """A ClusterIndex written to a local store whose shuffle task (a block of X with its
    rows' destinations, order and norms, and one sorted tile) cannot fit a worker is
    refused before the clusterer's fit and before any pass, naming what that task holds;
    no store is left behind."""
    from dqkm.data.spill import spill_task_parts
    from dqkm.neighbors import ClusterIndex
    from dqkm.parallel import memory
    from dqkm.parallel.memory import MemoryBudgetError

    X, _ = make_blobs(4000, 16, centers=3, random_state=0)
    Xd = da.from_array(X.astype(np.float32), chunks=1000)
    need = sum(spill_task_parts(1000, 16 * 4, sq_norms=True).values())
    assert need == 1000 * 64 + 1000 * 32 + 1000 * 64
    monkeypatch.setattr(memory, "task_budget", lambda fresh=False: need - 1)
    fitted = []
    km = dqkm.KMeans(3, max_iter=3, random_state=0, persist=False)
    monkeypatch.setattr(dqkm.KMeans, "fit", lambda self, *a, **k: fitted.append(self))
    index = ClusterIndex(km, store=str(tmp_path / "index.zarr"))
    with pytest.raises(MemoryBudgetError, match=r"ClusterIndex build \(shuffle of X's rows by "
                       r"cluster\): one task needs about 156 KiB \(block of X 62 KiB, "
                       r"destinations, sort order and norms 31 KiB, one sorted tile 62 KiB\)"):
        index.fit(Xd)
    assert fitted == [] and list(tmp_path.iterdir()) == []


@pytest.mark.distributed
def test_labels_reach_the_driver_a_wave_of_blocks_at_a_time(dist_client, monkeypatch):
    """gather_rows (the ClusterIndex build's labels) fetches a 1-D array's blocks in waves
    of two per worker thread and concatenates them on the driver: no task concatenates
    the whole array on one worker (a compute of the array did: twice its size there)."""
    from dqkm.parallel import memory

    calls = []
    real = memory.compute

    def spy(*objs):
        calls.append(len(objs))
        for o in objs:  # blocks, never the array or its concatenation
            assert not isinstance(o, da.Array)
        return real(*objs)

    monkeypatch.setattr(memory, "compute", spy)
    arr = da.arange(1000, chunks=50, dtype=np.int32)
    out = memory.gather_rows(arr)
    threads = sum(w["nthreads"] for w in dist_client.scheduler_info()["workers"].values())
    np.testing.assert_array_equal(out, np.arange(1000, dtype=np.int32))
    assert sum(calls) == 20 and max(calls) == 2 * threads


def test_a_read_counts_beside_what_is_held_during_it_not_beside_what_comes_after(monkeypatch):
    """A read's buffers (compressed chunk, zarr-python's copies) are freed before the
    task allocates its later parts, so they count only beyond those; the parts the
    task is given (the broadcast state, the previous per-row state) are in memory
    during the read and are not subtracted from it."""
    from dqkm.parallel import memory

    monkeypatch.setattr(memory, "compressed_read_bytes", lambda X: 60)
    monkeypatch.setattr(memory, "zarr_python_read_bytes", lambda X: 0)
    parts = {"chunk of X": 100, "state": 50, "per-row results": 30}
    total = lambda p: sum(p.values())  # noqa: E731
    # held during the read: the task peaks at chunk + state + read = 210
    assert total(memory.with_compressed_read(parts, None, held=("state",))) == 210
    # all after the read: max(chunk + read, chunk + state + results) = 180
    assert total(memory.with_compressed_read(parts, None)) == 180
    # a read smaller than what comes after adds nothing
    assert memory.with_compressed_read(parts, None, held=("state",)) != parts
    monkeypatch.setattr(memory, "compressed_read_bytes", lambda X: 20)
    assert memory.with_compressed_read(parts, None, held=("state",)) == parts
    # the larger of the two reads is counted, under its own name
    monkeypatch.setattr(memory, "zarr_python_read_bytes", lambda X: 90)
    grown = memory.with_compressed_read(parts, None, held=("state",))
    assert grown["zarr-python's read buffers of its block"] == 60


def test_a_lloyd_pass_counts_its_broadcast_centers_as_held_during_the_read(monkeypatch):
    """The Lloyd pass's check: with a read larger than the per-row results, the need is
    the chunk, the centers and sums and the whole read (the centers are on the worker
    before the task reads its chunk)."""
    from dqkm.parallel import memory
    from dqkm.parallel.lloyd import check_lloyd_memory

    read = 8 * 2**20
    monkeypatch.setattr(memory, "compressed_read_bytes", lambda X: read)
    monkeypatch.setattr(memory, "task_budget", lambda: 2**40)
    X = da.zeros((100_000, 64), dtype=np.float32, chunks=(50_000, 64))
    K = 512
    need = check_lloyd_memory("KMeans (Lloyd) pass", X, K)
    chunk, state = 50_000 * 64 * 4, K * 64 * (4 + 8) + 16 * K
    assert need >= chunk + state + read
