"""KMeans(algorithm='hamerly' | 'elkan') gives exactly the fit of algorithm='lloyd'.

The bounds are per-row state beside X's row chunks (worker memory when X is
persisted, files beside the data when it is re-read); losing it (a dropped
block, a killed worker, a resume from a checkpoint) only costs a full scan of
the blocks concerned.  Every test compares labels, centers, inertia and n_iter
with the Lloyd fit, exactly.
"""

import logging
import os
import signal
import struct
import time

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_digits, make_blobs

import dqkm
from dqkm._validation import InvalidParameterError
from dqkm.cluster import kmeans as kmeans_module
from dqkm.exceptions import DataError
from dqkm.parallel import bounds as pbounds
from dqkm.parallel.bounds import (AUTO_MAX_FEATURES, AUTO_MIN_CLUSTERS, AUTO_MIN_CLUSTERS_LOW,
                                  AUTO_MIN_CLUSTERS_MID, AUTO_MIN_FEATURES, AUTO_MIN_FEATURES_LOW,
                                  BoundedPasses, choose_algorithm)

BOUNDED = ["hamerly", "elkan"]


class Interrupt(Exception):
    pass


def _fit(X, algorithm, **kw):
    params = dict(n_clusters=8, random_state=0, tol=1e-6, max_iter=60)
    params.update(kw)
    return dqkm.KMeans(algorithm=algorithm, **params).fit(X)


def _assert_same(a, b):
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    np.testing.assert_array_equal(np.asarray(a.labels_), np.asarray(b.labels_))
    assert a.inertia_ == b.inertia_
    assert a.n_iter_ == b.n_iter_
    assert [h["objective"] for h in a.history_] == [h["objective"] for h in b.history_]


@pytest.fixture(scope="module")
def blobs():
    X, _ = make_blobs(4000, 6, centers=10, cluster_std=2.0, random_state=0)
    return X.astype(np.float32)


@pytest.mark.parametrize("algorithm", BOUNDED)
@pytest.mark.parametrize("as_dask", [False, True])
def test_bounds_equal_lloyd_on_blobs(blobs, algorithm, as_dask):
    X = da.from_array(blobs, chunks=700) if as_dask else blobs
    ref = _fit(X, "lloyd")
    got = _fit(X, algorithm)
    _assert_same(got, ref)
    assert ref.n_iter_ > 3
    # the bounds do skip distances once the centers settle
    assert max(h["skipped"] for h in got.history_) > 0.5
    assert got.history_[0]["skipped"] == 0.0  # the first pass has no bounds yet


@pytest.mark.parametrize("algorithm", BOUNDED)
def test_bounds_equal_lloyd_on_digits(algorithm):
    X = load_digits().data  # float64, 64 features
    _assert_same(_fit(X, algorithm, n_clusters=10, init="random", n_init=2),
                 _fit(X, "lloyd", n_clusters=10, init="random", n_init=2))


@pytest.mark.parametrize("algorithm", BOUNDED)
def test_bounds_equal_lloyd_on_uneven_and_empty_chunks(blobs, algorithm):
    X = da.from_array(blobs, chunks=((1500, 0, 37, 2000, 0, 463), (blobs.shape[1],)))
    _assert_same(_fit(X, algorithm, init="k-means||"), _fit(X, "lloyd", init="k-means||"))


@pytest.mark.parametrize("algorithm", BOUNDED)
def test_bounds_on_reread_zarr_keep_state_in_files_they_remove(tmp_path, blobs, algorithm):
    da.from_array(blobs, chunks=900).to_zarr(str(tmp_path / "x.zarr"))
    X = da.from_zarr(str(tmp_path / "x.zarr"))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    seen = []

    def look(record, state):
        seen.append(sorted(f for _, _, fs in os.walk(scratch) for f in fs))

    ref = _fit(X, "lloyd", persist=False)
    with dask.config.set({"temporary-directory": str(scratch)}):
        got = dqkm.KMeans(8, algorithm=algorithm, random_state=0, tol=1e-6, max_iter=60,
                          persist=False).fit(X, callback=look)
    _assert_same(got, ref)
    # between passes: the fit's one Zarr array, one chunk per block (5 blocks), and from
    # the second pass on the chunk each replaced (the next pass's spare)
    chunks = [f"c.{i}.0.0" for i in range(5)]
    assert seen[0] == sorted(["zarr.json"] + chunks)
    assert seen[1] == seen[-1] == sorted(["zarr.json"] + chunks
                                         + [c + ".dqkm-spare" for c in chunks])
    assert list(scratch.iterdir()) == []  # the fit removed what it wrote
    assert max(h["skipped"] for h in got.history_) > 0.5
    # persisted, the same fit keeps the state in memory and writes no file
    with dask.config.set({"temporary-directory": str(scratch)}):
        _assert_same(_fit(X, algorithm, persist=True), ref)
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize("in_memory", [True, False])
@pytest.mark.parametrize("algorithm", BOUNDED)
def test_lost_block_state_mid_fit_is_recomputed_exactly(monkeypatch, tmp_path, blobs, algorithm,
                                                        in_memory):
    X = da.from_array(blobs, chunks=700)
    ref = _fit(X, "lloyd")
    step = BoundedPasses.step
    dropped = []

    def dropping_step(self, centers, iteration, **kw):
        if iteration in (3, 4):
            self.drop_block(iteration - 2)
            dropped.append(iteration)
        return step(self, centers, iteration, **kw)

    monkeypatch.setattr(BoundedPasses, "step", dropping_step)
    monkeypatch.setattr(BoundedPasses, "__init__", _forced_init(in_memory, tmp_path))
    _assert_same(_fit(X, algorithm), ref)
    assert dropped == [3, 4]
    assert [p for p in tmp_path.iterdir()] == []


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("in_memory", [True, False])
@pytest.mark.parametrize("algorithm", BOUNDED)
def test_last_pass_spares_the_rows_its_bounds_settle(monkeypatch, tmp_path, blobs, algorithm,
                                                     in_memory, weighted):
    """The labels and inertia of the final centers come from one more bounded pass (no
    sums) instead of a full Lloyd pass: the same labels and inertia, bit for bit, with
    most distances skipped; the bounds are then used up."""
    X = da.from_array(blobs, chunks=700)
    w = np.random.default_rng(0).uniform(0.5, 2.0, len(blobs)) if weighted else None
    kw = dict(max_iter=8, tol=0.0, persist=True)  # stops on max_iter: the centers moved
    ref = _fit(X, "lloyd", **kw) if w is None else \
        dqkm.KMeans(8, random_state=0, **kw).fit(X, sample_weight=w)
    assert ref.history_[-1]["shift"] > 0
    name = f"{algorithm}_partials"
    kernel, last = getattr(pbounds, name), []

    def spy(block, centers, *args, with_sums=True, **kwargs):
        res = kernel(block, centers, *args, with_sums=with_sums, **kwargs)
        if not with_sums:
            last.append((res[7], block.shape[0] * centers.shape[0]))
        return res

    def lloyd_final(*args, **kwargs):
        raise AssertionError("a full Lloyd pass for the final labels and inertia")

    monkeypatch.setattr(pbounds, name, spy)
    monkeypatch.setattr(kmeans_module, "labels_and_inertia", lloyd_final)
    monkeypatch.setattr(kmeans_module, "inertia", lloyd_final)
    monkeypatch.setattr(BoundedPasses, "__init__", _forced_init(in_memory, tmp_path))
    got = dqkm.KMeans(8, algorithm=algorithm, random_state=0, **kw).fit(X, sample_weight=w)
    _assert_same(got, ref)
    assert len(last) == X.numblocks[0]  # one bounded pass, every block
    assert sum(s for s, _ in last) > 0.5 * sum(n for _, n in last)
    assert list(tmp_path.iterdir()) == []  # bounds in files: removed after the last pass


@pytest.mark.parametrize("algorithm", BOUNDED)
def test_last_pass_for_the_inertia_alone_spares_settled_rows(monkeypatch, blobs, algorithm):
    """X persisted by the user stays so after the fit and its labels stay lazy: the last
    bounded pass gives only the inertia (Lloyd's ``inertia`` pass is not run)."""
    X = da.from_array(blobs, chunks=700).persist()
    ref = _fit(X, "lloyd", max_iter=8, tol=0.0)

    def lloyd_final(*args, **kwargs):
        raise AssertionError("a full Lloyd pass for the final inertia")

    monkeypatch.setattr(kmeans_module, "inertia", lloyd_final)
    got = _fit(X, algorithm, max_iter=8, tol=0.0)
    assert isinstance(got.labels_, da.Array)  # lazy: the fit kept no labels
    _assert_same(got, ref)


def _forced_init(in_memory, directory):
    init = BoundedPasses.__init__

    def forced(self, X, kind, **kw):
        init(self, X, kind, **{**kw, "in_memory": in_memory, "directory": str(directory)})
    return forced


def _interrupt_after(n):
    def cb(record, state):
        if record["iteration"] == n:
            raise Interrupt
    return cb


@pytest.mark.parametrize("first, then", [("hamerly", "hamerly"), ("elkan", "lloyd"),
                                         ("lloyd", "elkan")])
def test_checkpoint_resume_mid_fit_equals_uninterrupted(tmp_path, blobs, first, then):
    X = da.from_array(blobs, chunks=700)
    full = _fit(X, "lloyd", init="random", n_init=2)
    make = lambda a: dqkm.KMeans(8, algorithm=a, init="random", n_init=2,  # noqa: E731
                                 random_state=0, tol=1e-6, max_iter=60)
    with pytest.raises(Interrupt):
        make(first).fit(X, checkpoint=tmp_path / "ck", callback=_interrupt_after(4))
    # the algorithm is not part of the checkpoint's identity: the bounds are rebuilt
    resumed = make(then).fit(X, checkpoint=tmp_path / "ck", resume=True)
    _assert_same(resumed, full)


@pytest.mark.parametrize("algorithm", BOUNDED)
def test_bounds_equal_lloyd_on_local_cluster(dist_client, blobs, algorithm):
    X = da.from_array(blobs, chunks=700)
    ref = _fit(X, "lloyd", persist=True)
    _assert_same(_fit(X, algorithm, persist=True), ref)


KILL_AT = 4


def _die_on_nth_read(block, block_info=None, counter=None):
    if block_info is not None and block_info[0]["chunk-location"][0] == 3:
        with open(counter, "a") as f:
            f.write("x")
        with open(counter) as f:
            if len(f.read()) == KILL_AT:
                os.kill(os.getpid(), signal.SIGKILL)
    return block


def test_killed_worker_mid_fit_with_bounds_in_files(tmp_path, blobs):
    from distributed import Client, LocalCluster

    da.from_array(blobs, chunks=700).to_zarr(str(tmp_path / "x.zarr"))
    X = da.from_zarr(str(tmp_path / "x.zarr"))
    ref = _fit(X, "lloyd", persist=False)
    counter = str(tmp_path / "reads")
    Xk = X.map_blocks(_die_on_nth_read, counter=counter, dtype=X.dtype)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None, silence_logs=logging.CRITICAL) as cluster, \
            Client(cluster) as client, dask.config.set({"temporary-directory": str(scratch)}):
        pids = set(client.run(os.getpid).values())
        got = _fit(Xk, "hamerly", persist=False)
        labels = np.asarray(dask.compute(got.labels_)[0])
        assert set(client.run(os.getpid).values()) != pids, "no worker was killed"
    with open(counter) as f:
        assert len(f.read()) > KILL_AT  # chunk 3 was read again after the kill
    np.testing.assert_array_equal(got.cluster_centers_, ref.cluster_centers_)
    np.testing.assert_array_equal(labels, np.asarray(ref.labels_))
    assert got.inertia_ == ref.inertia_ and got.n_iter_ == ref.n_iter_
    assert list(scratch.iterdir()) == []


def test_killed_worker_mid_fit_with_bounds_in_memory(tmp_path, blobs):
    """X persisted on a cluster keeps the bounds in the workers' memory; a worker killed
    between passes takes its blocks' bounds (and its share of X) with it: the next
    pass reads those blocks again and scans them in full, and the fit is Lloyd's."""
    from distributed import Client, LocalCluster

    da.from_array(blobs, chunks=700).to_zarr(str(tmp_path / "x.zarr"))
    X = da.from_zarr(str(tmp_path / "x.zarr"))
    ref = _fit(X, "lloyd", persist=True)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None, silence_logs=logging.CRITICAL) as cluster, \
            Client(cluster) as client:
        address, pid = sorted(client.run(os.getpid).items())[0]

        def kill_one_worker(record, state):
            if record["iteration"] == 3:
                os.kill(pid, signal.SIGKILL)
                deadline = time.monotonic() + 60
                while address in client.scheduler_info()["workers"]:  # until it is seen
                    assert time.monotonic() < deadline, "the scheduler kept the dead worker"
                    time.sleep(0.05)

        got = dqkm.KMeans(8, algorithm="hamerly", random_state=0, tol=1e-6, max_iter=60,
                          persist=True).fit(X, callback=kill_one_worker)
        labels = np.asarray(dask.compute(got.labels_)[0])
        assert pid not in client.run(os.getpid).values()
    assert got.history_[3]["blocks_without_bounds"] > 0  # the dead worker's blocks
    assert sum(h["blocks_without_bounds"] for h in got.history_[4:]) == 0
    np.testing.assert_array_equal(got.cluster_centers_, ref.cluster_centers_)
    np.testing.assert_array_equal(labels, np.asarray(ref.labels_))
    assert got.inertia_ == ref.inertia_ and got.n_iter_ == ref.n_iter_


def test_weighted_bounded_step_weights_sums_counts_and_objective(blobs):
    rng = np.random.default_rng(0)
    w = rng.uniform(0.1, 3.0, len(blobs))
    X = da.from_array(blobs, chunks=700)
    C = blobs[rng.choice(len(blobs), 8, replace=False)]
    passes = BoundedPasses(X, "elkan", sample_weight=da.from_array(w, chunks=700))
    new, rec, tol_abs = passes.step(C, 1, tol=1e-4, tol_abs=None)
    X64, C64 = blobs.astype(np.float64), C.astype(np.float64)
    d2 = ((X64[:, None, :] - C64[None]) ** 2).sum(-1)
    labels = d2.argmin(1)
    expect = np.stack([np.average(X64[labels == j], axis=0, weights=w[labels == j])
                       for j in range(8)])
    np.testing.assert_allclose(new, expect.astype(np.float32), rtol=1e-5)
    np.testing.assert_allclose(rec["objective"], (w * d2.min(1)).sum(), rtol=1e-10)
    # the second step's bounds (weights do not enter them) skip distances
    _, rec2, _ = passes.step(new, 2, tol=1e-4, tol_abs=tol_abs)
    assert rec2["skipped"] > 0.5
    passes.close()


def test_nonfinite_row_is_refused_as_lloyd_refuses_it(blobs):
    X = blobs.copy()
    X[1234, 2] = np.nan
    X = da.from_array(X, chunks=700)  # Dask input: found by the pass, not checked ahead
    with pytest.raises(DataError, match="row 1234") as lloyd_error:
        _fit(X, "lloyd", init=blobs[:8])
    with pytest.raises(DataError, match="row 1234") as bound_error:
        _fit(X, "hamerly", init=blobs[:8])
    assert str(bound_error.value) == str(lloyd_error.value)


def test_unknown_algorithm_is_refused(blobs):
    with pytest.raises(InvalidParameterError, match="algorithm"):
        dqkm.KMeans(3, algorithm="yinyang").fit(blobs)
    with pytest.raises(ValueError, match="kind must be one of"):
        BoundedPasses(da.from_array(blobs), "lloyd")


def test_auto_rule_and_inputs_that_run_lloyd():
    dense = lambda d, dtype=np.float64: da.zeros((100, d), chunks=50, dtype=dtype)  # noqa: E731
    big, mid, f = AUTO_MIN_CLUSTERS, AUTO_MIN_CLUSTERS_MID, AUTO_MIN_FEATURES
    assert choose_algorithm("auto", dense(2), big) == "hamerly"  # many clusters: any D
    assert choose_algorithm("auto", dense(2), big - 1) == "lloyd"
    assert choose_algorithm("auto", dense(f), mid) == "hamerly"
    assert choose_algorithm("auto", dense(f - 1), mid) == "lloyd"
    assert choose_algorithm("auto", dense(AUTO_MAX_FEATURES), mid - 1) == "hamerly"
    low, fl = AUTO_MIN_CLUSTERS_LOW, AUTO_MIN_FEATURES_LOW  # few clusters: from fl features
    assert choose_algorithm("auto", dense(fl), low) == "hamerly"
    assert choose_algorithm("auto", dense(fl - 1), low) == "lloyd"
    assert choose_algorithm("auto", dense(fl), low - 1) == "lloyd"
    assert choose_algorithm("auto", dense(AUTO_MAX_FEATURES + 1), low) == "lloyd"
    assert choose_algorithm("auto", dense(AUTO_MAX_FEATURES), 256) == "hamerly"
    assert choose_algorithm("auto", dense(AUTO_MAX_FEATURES + 1), 256) == "lloyd"
    assert choose_algorithm("elkan", dense(300), 16) == "elkan"
    assert choose_algorithm("hamerly", dense(32, np.float32), 16) == "hamerly"
    # float32 beyond the direct kernel: Lloyd's float32 GEMM rounding cannot be promised
    assert choose_algorithm("hamerly", dense(33, np.float32), 16) == "lloyd"
    csr = da.from_array(sp.random(100, 5, density=0.3, format="csr", random_state=0),
                        chunks=(50, 5), asarray=False)
    assert choose_algorithm("elkan", csr, 4) == "lloyd"


def test_algorithm_is_not_in_the_checkpoint_identity(blobs):
    algo = dqkm.KMeans(4, algorithm="elkan")._algorithm(blobs.shape[1])
    assert algo.algorithm == "elkan"
    X = da.from_array(blobs, chunks=1000)
    assert "algorithm" not in algo.identity(X)
    assert pbounds.held_in_memory(X.persist())


@pytest.mark.distributed
def test_sidecar_is_zarr_aligned_with_x_and_survives_a_killed_worker(tmp_path, blobs):
    """With X re-read, the bounds are a Zarr array whose chunks are X's row blocks,
    each rewritten by every pass with its stamp; a worker killed mid-pass (before
    the block's task wrote) loses none of them: the retried task reads the
    previous pass's chunk from disk, so no block is scanned in full after the
    first pass, and the fit is Lloyd's."""
    import zarr
    from distributed import Client, LocalCluster

    da.from_array(blobs, chunks=700).to_zarr(str(tmp_path / "x.zarr"))
    X = da.from_zarr(str(tmp_path / "x.zarr"))
    ref = _fit(X, "lloyd", persist=False)
    counter = str(tmp_path / "reads")
    Xk = X.map_blocks(_die_on_nth_read, counter=counter, dtype=X.dtype)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    layouts, stamps = [], []

    def look(record, state):
        (state_dir,) = scratch.iterdir()
        (array,) = state_dir.iterdir()
        z = zarr.open_array(str(array), mode="r")
        rows = z.attrs["row_chunks"]
        heads = {struct.unpack("<QI", z[i, 0].tobytes()) for i in range(len(rows))}
        stamps.append(sorted(heads))
        layouts.append((z.shape, z.chunks, z.dtype,
                        any(np.isnan(z[i, 1:1 + n]).any() for i, n in enumerate(rows))))

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None, silence_logs=logging.CRITICAL) as cluster, \
            Client(cluster) as client, dask.config.set({"temporary-directory": str(scratch)}):
        pids = set(client.run(os.getpid).values())
        got = dqkm.KMeans(8, algorithm="hamerly", random_state=0, tol=1e-6, max_iter=60,
                          persist=False).fit(Xk, callback=look)
        assert set(client.run(os.getpid).values()) != pids, "no worker was killed"
    with open(counter) as f:
        assert len(f.read()) > KILL_AT  # chunk 3 was read again after the kill
    # one header row, then the block's rows: float32 rounded outward, no NaN
    assert set(layouts) == {((6, 701, 3), (1, 701, 3), np.dtype(np.float32), False)}
    # every block's chunk holds its rows and the stamp of the pass just done
    assert stamps == [[(g, 500), (g, 700)] for g in range(1, got.n_iter_ + 1)]
    assert got.history_[0]["blocks_without_bounds"] == 6
    assert [h["blocks_without_bounds"] for h in got.history_[1:]] == [0] * (got.n_iter_ - 1)
    np.testing.assert_array_equal(got.cluster_centers_, ref.cluster_centers_)
    assert got.inertia_ == ref.inertia_ and got.n_iter_ == ref.n_iter_
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize("algorithm", BOUNDED)
@pytest.mark.parametrize("d", [3, 16])
def test_bounds_equal_lloyd_on_near_ties_in_float32(algorithm, d):
    """Rows almost midway between two initial centers (relative gap 1e-5, below
    float32 rounding of the distances): the Lloyd kernels used to let their
    float32 rounding decide these, the bounds the exact distances, and the fits
    parted at the first step.  Both now decide near-ties exactly."""
    rng = np.random.default_rng(d)
    C = (rng.normal(size=(5, d)) * 3 + 10.0).astype(np.float32)
    c1, c2 = C[0].astype(np.float64), C[1].astype(np.float64)
    e = (c2 - c1) / np.linalg.norm(c2 - c1)
    P = rng.normal(size=(3000, d)) * 2
    P -= (P @ e)[:, None] * e
    X = ((c1 + c2) / 2 + P + (rng.uniform(-1, 1, 3000) * 1e-5 * np.linalg.norm(c2 - c1))[:, None]
         * e).astype(np.float32)
    X = da.from_array(X, chunks=700)
    _assert_same(_fit(X, algorithm, n_clusters=5, init=C, n_init=1),
                 _fit(X, "lloyd", n_clusters=5, init=C, n_init=1))


@pytest.mark.parametrize("algorithm", BOUNDED)
def test_bounds_in_files_live_under_the_checkpoint_and_survive_resume(tmp_path, blobs, algorithm):
    """X re-read every pass (persist=False): with a checkpoint the bounds' Zarr
    sidecar is written under the checkpoint directory (nothing in the temporary
    directory), removed by the fit even when it is interrupted, and a resume
    mid-fit (bounds rebuilt by a full scan) gives the uninterrupted result."""
    da.from_array(blobs, chunks=900).to_zarr(str(tmp_path / "x.zarr"))
    X = da.from_zarr(str(tmp_path / "x.zarr"))
    ck, scratch = tmp_path / "ck", tmp_path / "scratch"
    scratch.mkdir()
    full = _fit(X, "lloyd", persist=False)
    seen = []

    def look(record, state):
        seen.append(sorted(p.name for p in ck.iterdir() if p.name.startswith("dqkm-row-state")))
        if len(seen) == 4:
            raise Interrupt

    make = lambda: dqkm.KMeans(8, algorithm=algorithm, random_state=0, tol=1e-6,  # noqa: E731
                               max_iter=60, persist=False)
    with dask.config.set({"temporary-directory": str(scratch)}), pytest.raises(Interrupt):
        make().fit(X, checkpoint=ck, callback=look)
    assert all(len(s) == 1 for s in seen)  # one sidecar, under the checkpoint
    assert not [p for p in ck.iterdir() if p.name.startswith("dqkm-row-state")]
    with dask.config.set({"temporary-directory": str(scratch)}):
        resumed = make().fit(X, checkpoint=ck, resume=True)
    _assert_same(resumed, full)
    assert resumed.history_[4]["blocks_without_bounds"] == 5  # rebuilt on resume
    assert max(h["skipped"] for h in resumed.history_[5:]) > 0.5
    assert list(scratch.iterdir()) == []
    assert not [p for p in ck.iterdir() if p.name.startswith("dqkm-row-state")]
