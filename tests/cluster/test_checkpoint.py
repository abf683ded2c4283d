"""Checkpoint/resume, a killed worker, and out-of-core fits (issue 8)."""

import logging
import os

import dask
import numpy as np
import pytest
from sklearn.datasets import make_blobs

import dqkm
from dqkm import datasets
from dqkm.cluster._checkpoint import CheckpointMismatchError


class Interrupt(Exception):
    pass


def _interrupt_after(n):
    count = {"n": 0}

    def cb(rec, state):
        count["n"] += 1
        if count["n"] == n:
            raise Interrupt(f"stopped after {n} iterations")

    return cb


@pytest.fixture(scope="module")
def X():
    return make_blobs(4000, 6, centers=7, cluster_std=3.0, random_state=0)[0]


@pytest.mark.parametrize("make", [
    lambda: dqkm.KMeans(7, init="random", n_init=3, max_iter=40, random_state=0),
    lambda: dqkm.KMeans(7, init="k-means||", max_iter=40, random_state=1),
    lambda: dqkm.KMeansL1(7, radius=40.0, max_iter=40, random_state=2),
])
@pytest.mark.parametrize("stop_at", [1, 5])
def test_resume_equals_uninterrupted(tmp_path, X, make, stop_at):
    full = make().fit(X)
    with pytest.raises(Interrupt):
        make().fit(X, checkpoint=tmp_path / "ck", callback=_interrupt_after(stop_at))
    assert sorted(os.listdir(tmp_path / "ck"))[-1] == "zarr.json"
    resumed = make().fit(X, checkpoint=tmp_path / "ck", resume=True)
    np.testing.assert_array_equal(resumed.cluster_centers_, full.cluster_centers_)
    np.testing.assert_array_equal(resumed.labels_, full.labels_)
    assert resumed.inertia_ == full.inertia_ and resumed.n_iter_ == full.n_iter_
    assert [h["objective"] for h in resumed.history_] == [h["objective"] for h in full.history_]


@pytest.mark.parametrize("embedding", ["sparse", "dense"])
@pytest.mark.parametrize("random_state", [3, None])
def test_sparse_embedded_kmeans_resume_equals_uninterrupted(tmp_path, embedding, random_state):
    Xs = make_blobs(3000, 40, centers=6, cluster_std=4.0, random_state=1)[0]
    make = lambda: dqkm.SparseEmbeddedKMeans(  # noqa: E731
        6, n_components=12, embedding=embedding, random_state=random_state,
        kmeans={"init": "random", "n_init": 2, "max_iter": 30})
    with pytest.raises(Interrupt):
        make().fit(Xs, checkpoint=tmp_path / "ck", callback=_interrupt_after(3))
    resumed = make().fit(Xs, checkpoint=tmp_path / "ck", resume=True)
    if random_state is None:  # the uninterrupted fit with the seed the checkpoint recorded
        from dqkm.cluster import sekmeans
        from dqkm.cluster._checkpoint import Checkpoint

        seed = Checkpoint(tmp_path / "ck", {}).stored_identity()["embedding_seed"]

        class Drawn:  # a random_state=None draw that happens to give the recorded seed
            def randint(self, *args, **kwargs):
                return seed

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(sekmeans, "check_random_state", lambda rs: Drawn())
            full = make().fit(Xs)
    else:
        full = make().fit(Xs)
    np.testing.assert_array_equal(resumed.embedded_centers_, full.embedded_centers_)
    np.testing.assert_array_equal(resumed.cluster_centers_, full.cluster_centers_)
    np.testing.assert_array_equal(resumed.labels_, full.labels_)
    assert resumed.inertia_ == full.inertia_ and resumed.n_iter_ == full.n_iter_
    assert [h["objective"] for h in resumed.history_] == [h["objective"] for h in full.history_]
    # another embedding or another estimator's checkpoint is refused
    other = "dense" if embedding == "sparse" else "sparse"
    with pytest.raises(CheckpointMismatchError, match=f"embedding={embedding!r}, but this fit "
                                                      f"has embedding={other!r}"):
        dqkm.SparseEmbeddedKMeans(6, n_components=12, embedding=other, random_state=3).fit(
            Xs, checkpoint=tmp_path / "ck", resume=True)
    with pytest.raises(CheckpointMismatchError, match="estimator='SparseEmbeddedKMeans', but "
                                                      "this fit has estimator='KMeans'"):
        dqkm.KMeans(6, random_state=0).fit(resumed.transform(Xs), checkpoint=tmp_path / "ck",
                                           resume=True)


def test_resume_of_finished_fit_and_fresh_start(tmp_path, X):
    a = dqkm.KMeans(5, random_state=0).fit(X, checkpoint=tmp_path / "ck")
    b = dqkm.KMeans(5, random_state=0).fit(X, checkpoint=tmp_path / "ck", resume=True)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    assert a.n_iter_ == b.n_iter_
    # resume=False starts over and overwrites
    c = dqkm.KMeans(5, random_state=0, max_iter=2).fit(X, checkpoint=tmp_path / "ck")
    assert c.n_iter_ == 2


def test_checkpoint_of_other_estimator_or_data_is_refused(tmp_path, X):
    dqkm.KMeans(5, random_state=0, max_iter=3).fit(X, checkpoint=tmp_path / "ck")
    with pytest.raises(CheckpointMismatchError, match="estimator='KMeans', but this fit has "
                                                      "estimator='KMeansL1'"):
        dqkm.KMeansL1(5, random_state=0).fit(X, checkpoint=tmp_path / "ck", resume=True)
    with pytest.raises(ValueError, match="n_samples=4000, but this fit has n_samples=3000"):
        dqkm.KMeans(5, random_state=0).fit(X[:3000], checkpoint=tmp_path / "ck", resume=True)
    with pytest.raises(ValueError, match="n_features=6, but this fit has n_features=5"):
        dqkm.KMeans(5, random_state=0).fit(X[:, :5], checkpoint=tmp_path / "ck", resume=True)
    with pytest.raises(ValueError, match="n_clusters=5, but this fit has n_clusters=4"):
        dqkm.KMeans(4, random_state=0).fit(X, checkpoint=tmp_path / "ck", resume=True)


def _cluster(trim_memory=False, **kw):
    from distributed import LocalCluster

    # Without malloc trimming reads are faster but each worker keeps ~100 MB
    # more (measured on the project machine); the tight-memory test keeps the nanny's default.
    cfg = {} if trim_memory else {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}
    with dask.config.set(cfg):
        return LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                            dashboard_address=None, silence_logs=logging.ERROR, **kw)


def _install_kill_switch(flag):
    """In a worker process: the Lloyd chunk step kills its own process (SIGKILL, no
    clean-up) the first time it runs while ``flag`` exists; the flag is taken by an
    atomic rename, so exactly one task of the cluster does it.  Patched where the
    task looks the name up (``dqkm.parallel.lloyd._partials``, read at call time)."""
    import dqkm.parallel.lloyd as lloyd

    real = lloyd._partials

    def partials(*args, **kwargs):
        if os.path.exists(flag):
            taken = f"{flag}.{os.getpid()}"
            try:
                os.rename(flag, taken)
            except FileNotFoundError:  # another worker's task took it
                pass
            else:
                os.kill(os.getpid(), 9)
        return real(*args, **kwargs)

    lloyd._partials = partials


@pytest.fixture(scope="module")
def killed_worker_case(tmp_path_factory):
    """The Zarr store of the killed-worker tests, their init, and the uninterrupted
    fit on it (local threads): made once for both of them."""
    path = tmp_path_factory.mktemp("killed-worker") / "d.zarr"
    Xz, _ = datasets.make_blobs(40_000, 8, 6, cluster_std=2.0, chunks=4000, random_state=0,
                                path=path)
    init = Xz[:6].compute()
    reference = dqkm.KMeans(6, init=init, max_iter=15, tol=0).fit(Xz)
    return Xz, init, reference, reference.labels_.compute()


@pytest.mark.parametrize("persist", [False, True])
def test_killed_worker_does_not_change_the_result(tmp_path, persist, killed_worker_case):
    """A worker is killed inside a chunk task of the pass after iteration 3: the
    callback arms the switch between passes, the first task of the next pass that
    sees it kills its own worker.  The fit ends with the uninterrupted result."""
    from distributed import Client

    Xz, init, reference, reference_labels = killed_worker_case
    flag = str(tmp_path / "kill-now")
    with _cluster() as cluster, Client(cluster) as client:
        pids = set(client.run(os.getpid).values())
        client.run(_install_kill_switch, flag)

        def arm_after_third(rec, centers):
            if rec["iteration"] == 3:
                open(flag, "w").close()

        km = dqkm.KMeans(6, init=init, max_iter=15, tol=0, persist=persist).fit(
            Xz, callback=arm_after_third)
        labels = km.labels_.compute()
    killed = [int(f.name.rsplit(".", 1)[1]) for f in tmp_path.glob("kill-now.*")]
    assert len(killed) == 1 and killed[0] in pids and not os.path.exists(flag)
    np.testing.assert_array_equal(km.cluster_centers_, reference.cluster_centers_)
    np.testing.assert_array_equal(labels, reference_labels)
    assert km.inertia_ == reference.inertia_


def _peak_rss():
    """This process's peak resident set size in bytes (``VmHWM`` of
    /proc/self/status).  Not ``getrusage``'s ``ru_maxrss``: that one survives
    ``execve`` and so carries the peak of the process that spawned the worker."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/self/status")


def test_out_of_core_fit_larger_than_cluster_memory(tmp_path, record_property):
    """1.2 GiB of data on 2 workers × 512 MiB: completes, no worker restarted.

    distributed pauses a worker at 80 % of its limit and restarts it at 95 %.  A
    worker process starts at ~280 MiB here (dask.array imports xarray, pandas,
    pyarrow and pydata/sparse, with numba, when they are installed, as in the test
    extra) and peaked at 360–378 MiB in these fits: on 450 MiB workers that is the
    pause line itself (360 MiB), where a worker that cannot drop below it stays
    paused and the fit ends in WorkersPausedError.  512 MiB leaves that margin; the
    data is still more than the cluster's total memory (2 × 512 MiB < 1.19 GiB).
    """
    from distributed import Client

    limit = 512 * 2**20
    n, d = 5_000_000, 64
    # 8 MiB chunks: each pass's task is checked against the worker's headroom below the
    # pause line, which with ~380 MiB of the worker's own memory was 16 MiB in one
    # fresh-clone run, the size of a 62,500-row task (refused there, as it should be).
    Xz, _ = datasets.make_blobs(n, d, 16, chunks=31_250, random_state=0,
                                path=tmp_path / "big.zarr")
    assert Xz.nbytes > 2 * limit
    estimators = [dqkm.KMeans(16, max_iter=3, tol=0, persist=False, random_state=0),
                  dqkm.QKMeans(16, sparsity=2, max_iter=2, tol=0, persist=False,
                               palm_iter=5, palm_iter_init=20, random_state=0)]
    # Compile the kernels here first: numba caches them on disk, so the workers load machine
    # code instead of running LLVM (a one-off ~100 MiB per process on a fresh checkout, which
    # is not what this test measures and alone can cross the 95 % restart line).
    from sklearn.base import clone

    for est in estimators:  # the workers' path: lazy blocks read from the store
        clone(est).fit(Xz[:8000].rechunk(4000))
    with _cluster(trim_memory=True, memory_limit=limit) as cluster, Client(cluster) as client:
        pids = client.run(os.getpid)
        for est in estimators:
            est.fit(Xz)
            assert np.isfinite(est.inertia_)
        assert client.run(os.getpid) == pids, "a worker was restarted"
        # each worker's own high-water mark: exact, no sampling (a worker not restarted
        # is the process that ran every task)
        peaks = client.run(_peak_rss)
    peak = max(peaks.values()) / 2**20
    record_property("peak_worker_rss_mb", round(peak))
    print(f"\nout-of-core: {Xz.nbytes / 2**30:.2f} GiB on 2 x {limit / 2**20:.0f} MiB; "
          f"peak worker RSS {peak:.0f} MiB")
    assert peak < limit / 2**20


def test_scheduler_loss_is_reported_and_the_fit_resumes(tmp_path):
    """A separate-process scheduler is killed mid-fit; a new cluster resumes the fit."""
    import signal
    import sys

    from distributed import Client

    sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
    from _multiprocess_cluster import MultiprocessCluster

    from dqkm.parallel.engine import SchedulerLostError

    Xz, _ = datasets.make_blobs(60_000, 8, 6, cluster_std=6.0, chunks=6000, random_state=0,
                                path=tmp_path / "d.zarr")
    make = lambda: dqkm.KMeans(6, max_iter=12, tol=0, random_state=0, persist=False)  # noqa: E731
    reference = make().fit(Xz)
    assert reference.n_iter_ > 3
    (tmp_path / "c1").mkdir()
    first = MultiprocessCluster(tmp_path / "c1", n_workers=2).start()
    try:
        with Client(first.address, set_as_default=True):
            def kill_scheduler(rec, state):
                if rec["iteration"] == 2:
                    for name, proc in first.procs:
                        if name == "scheduler":
                            os.killpg(proc.pid, signal.SIGKILL)

            with pytest.raises(SchedulerLostError, match=r"(?s)lost the connection to the Dask "
                               r"scheduler .* resume=True"):
                make().fit(Xz, checkpoint=tmp_path / "ck", callback=kill_scheduler)
    finally:
        first.close()
    (tmp_path / "c2").mkdir()
    second = MultiprocessCluster(tmp_path / "c2", n_workers=2).start()
    try:
        with Client(second.address, set_as_default=True):
            resumed = make().fit(Xz, checkpoint=tmp_path / "ck", resume=True)
            labels = resumed.labels_.compute()
    finally:
        second.close()
    np.testing.assert_array_equal(resumed.cluster_centers_, reference.cluster_centers_)
    np.testing.assert_array_equal(labels, reference.labels_.compute())
    assert resumed.n_iter_ == reference.n_iter_
