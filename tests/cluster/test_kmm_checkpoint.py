"""Checkpoint/resume of dqkm.KMultipleMeans (issue 8): the driver state and the
per-chunk rows of S held by the workers, resumed bit for bit."""

import json
import os
import warnings

import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import make_blobs, make_circles
from sklearn.exceptions import ConvergenceWarning

import dqkm
from dqkm.cluster._checkpoint import CheckpointMismatchError
from dqkm.parallel.engine import SchedulerLostError

_TIMING = ("seconds", "step_seconds", "spectral_seconds")


@pytest.fixture(autouse=True)
def _one_blas_thread():
    """The machine is shared: keep the driver's small dense solvers on one thread."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield


class Interrupt(Exception):
    pass


def _interrupt_after(n):
    def cb(rec):
        if rec["iteration"] == n:
            raise Interrupt(f"stopped after iteration {n}")

    return cb


@pytest.fixture(scope="module")
def circles():
    """2 500 noisy circles: the fits below run 8 outer iterations (max_iter) and
    need F again in iteration 2 (b < c after the prototype update), so a fit
    resumed after iteration 1 rebuilds F's data side from the stored rows of S."""
    return make_circles(2500, noise=0.05, factor=0.5, random_state=0)[0]


@pytest.fixture(scope="module")
def noisy_circles(circles):
    """The circles and 50 uniform points in [-2, 2]²: Algorithm 7 flags some
    points (it flags none of the clean circles)."""
    return np.vstack([circles, np.random.default_rng(0).uniform(-2.0, 2.0, (50, 2))])


@pytest.fixture(scope="module")
def blobs():
    """2 000 tight blobs: converges (no point changes its nearest prototype) at
    iteration 20 < max_iter."""
    return make_blobs(2000, 2, centers=3, cluster_std=0.3, random_state=0)[0]


def _blobs_kmm(**kw):
    return dqkm.KMultipleMeans(3, **{"n_prototypes": 20, "n_neighbors": 5, "max_iter": 30,
                                     "random_state": 0, **kw})


def _history(est):
    return [{k: v for k, v in h.items() if k not in _TIMING} for h in est.history_]


def _assert_same_fit(a, b):
    np.testing.assert_array_equal(a.prototypes_, b.prototypes_)
    np.testing.assert_array_equal(a.prototype_labels_, b.prototype_labels_)
    np.testing.assert_array_equal(np.asarray(a.labels_), np.asarray(b.labels_))
    for x, y in zip(a.similarity_, b.similarity_):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert a.beta_ == b.beta_ and a.alpha_ == b.alpha_
    assert a.n_iter_ == b.n_iter_ and a.n_components_ == b.n_components_
    assert a.n_outliers_ == b.n_outliers_ and a.n_prototypes_ == b.n_prototypes_
    assert a.seeding_ == b.seeding_
    assert [h["objective"] for h in a.history_] == [h["objective"] for h in b.history_]
    assert _history(a) == _history(b)


def _latest(path):
    with open(os.path.join(path, "latest.json")) as f:
        return json.load(f)["group"]


def _fit_warnings(fit):
    """The fit and the messages of its ConvergenceWarnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = fit()
    return est, [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]


@pytest.mark.parametrize("solver,detect_outliers,stop_at,chunks", [
    ("fast", False, 1, 500),
    pytest.param("fast", False, 5, (700, 500, 0, 800, 500), id="fast-False-5-uneven"),
    ("svd", False, 4, 500),
    # iteration 1 ends with b < c: the next pass's F comes from the stored rows of S
    ("fast", True, 1, 500),
    ("svd", True, 1, 500),
])
def test_resume_equals_uninterrupted(tmp_path, circles, noisy_circles, solver, detect_outliers,
                                     stop_at, chunks):
    Xd = da.from_array(noisy_circles if detect_outliers else circles, chunks=(chunks, -1))
    # with outliers: l = 4 and at most 6 β updates, so iteration 1 ends with b = 1 < c
    # (the ConvergenceWarning counts it, resumed or not)
    kw = {"n_neighbors": 4, "max_inner_iter": 6} if detect_outliers else {"n_neighbors": 3}
    make = lambda: dqkm.KMultipleMeans(  # noqa: E731
        2, max_iter=8, solver=solver, detect_outliers=detect_outliers, random_state=0, **kw)
    full, full_warnings = _fit_warnings(lambda: make().fit(Xd))
    assert full.n_iter_ == 8 and stop_at < full.n_iter_  # the resumed fit has work left
    assert full.history_[1]["f_updates"] > 0  # iteration 2 rebuilds F from the stored S rows
    assert (full.n_outliers_ > 0) == detect_outliers
    if detect_outliers:
        assert full.history_[stop_at - 1]["n_components"] < 2
    assert bool(full_warnings) == detect_outliers
    ck = tmp_path / "ck"
    with pytest.raises(Interrupt):
        make().fit(Xd, checkpoint=ck, callback=_interrupt_after(stop_at))
    assert _latest(ck) == f"iter-{stop_at:06d}"
    assert sorted(os.listdir(ck / f"iter-{stop_at:06d}" / "rows")) == \
        [f"{i:06d}" for i in range(Xd.numblocks[0])] + ["zarr.json"]
    seen = []
    resumed, resumed_warnings = _fit_warnings(
        lambda: make().fit(Xd, checkpoint=ck, resume=True, callback=seen.append))
    assert [r["iteration"] for r in seen] == list(range(stop_at + 1, full.n_iter_ + 1))
    _assert_same_fit(resumed, full)
    assert resumed_warnings == full_warnings
    assert resumed.labels_.chunks == Xd.chunks[:1]  # Dask in, Dask out, aligned with X
    assert sorted(os.listdir(ck)) == [f"iter-{full.n_iter_:06d}", "latest.json", "zarr.json"]


def test_resume_of_finished_fit_and_fresh_start(tmp_path, blobs):
    Xd = da.from_array(blobs, chunks=(500, -1))
    full = _blobs_kmm().fit(Xd)
    assert 3 <= full.n_iter_ < 30 and full.history_[-1]["n_changed"] == 0  # converged
    ck = tmp_path / "ck"
    # resume=True with no checkpoint yet starts fresh
    first = _blobs_kmm().fit(Xd, checkpoint=ck, resume=True)
    _assert_same_fit(first, full)
    assert sorted(os.listdir(ck)) == [f"iter-{full.n_iter_:06d}", "latest.json", "zarr.json"]
    # resuming the finished (converged) fit runs no iteration and gives the same result
    seen = []
    again = _blobs_kmm().fit(Xd, checkpoint=ck, resume=True, callback=seen.append)
    assert seen == []
    _assert_same_fit(again, full)
    # interrupted late, resumed to convergence
    with pytest.raises(Interrupt):
        _blobs_kmm().fit(Xd, checkpoint=ck, callback=_interrupt_after(full.n_iter_ - 2))
    assert _latest(ck) == f"iter-{full.n_iter_ - 2:06d}"
    _assert_same_fit(_blobs_kmm().fit(Xd, checkpoint=ck, resume=True), full)
    # a finished fit that stopped at max_iter
    capped = _blobs_kmm(max_iter=4)
    capped.fit(Xd, checkpoint=ck)
    assert capped.n_iter_ == 4
    _assert_same_fit(_blobs_kmm(max_iter=4).fit(Xd, checkpoint=ck, resume=True), capped)
    # NumPy in, NumPy out, and fit_predict passes checkpoint and resume through
    labels = _blobs_kmm(max_iter=4).fit_predict(blobs, checkpoint=tmp_path / "np")
    assert isinstance(labels, np.ndarray) and _latest(tmp_path / "np") == "iter-000004"
    again = _blobs_kmm(max_iter=4).fit_predict(blobs, checkpoint=tmp_path / "np", resume=True)
    np.testing.assert_array_equal(again, labels)


def test_rows_without_seed_field_resume_to_the_same_clusters(tmp_path, blobs):
    """Rows written before ``nxt`` (the (l+1)-th neighbour that seeds the next
    pruned search) existed still resume: the search then picks its own seeds,
    which changes only the count of exact distances, not the result."""
    import shutil

    Xd = da.from_array(blobs, chunks=(500, -1))
    full = _blobs_kmm(max_iter=6).fit(Xd)
    ck = tmp_path / "ck"
    with pytest.raises(Interrupt):
        _blobs_kmm(max_iter=6).fit(Xd, checkpoint=ck, callback=_interrupt_after(2))
    rows = ck / _latest(ck) / "rows"
    for block in sorted(p for p in os.listdir(rows) if p != "zarr.json"):
        shutil.rmtree(rows / block / "nxt")
    resumed = _blobs_kmm(max_iter=6).fit(Xd, checkpoint=ck, resume=True)
    np.testing.assert_array_equal(np.asarray(resumed.labels_), np.asarray(full.labels_))
    np.testing.assert_array_equal(resumed.prototypes_, full.prototypes_)
    for x, y in zip(resumed.similarity_, full.similarity_):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    first = resumed.history_[2]
    assert first["distances_exact"] != full.history_[2]["distances_exact"]
    assert first["objective"] == full.history_[2]["objective"]


def test_checkpoint_of_other_estimator_or_data_is_refused(tmp_path, blobs):
    Xd = da.from_array(blobs, chunks=(500, -1))
    km = tmp_path / "km"
    dqkm.KMeans(3, max_iter=3, random_state=0).fit(Xd, checkpoint=km)
    with pytest.raises(CheckpointMismatchError, match="estimator='KMeans', but this fit has "
                                                      "estimator='KMultipleMeans'"):
        _blobs_kmm().fit(Xd, checkpoint=km, resume=True)
    ck = tmp_path / "ck"
    _blobs_kmm(max_iter=3).fit(Xd, checkpoint=ck)
    before = _latest(ck)
    with pytest.raises(CheckpointMismatchError, match="n_samples=2000, but this fit has "
                                                      "n_samples=1500"):
        _blobs_kmm().fit(Xd[:1500], checkpoint=ck, resume=True)
    with pytest.raises(CheckpointMismatchError, match="n_clusters=3, but this fit has "
                                                      "n_clusters=2"):
        dqkm.KMultipleMeans(2, n_prototypes=20, random_state=0).fit(Xd, checkpoint=ck,
                                                                    resume=True)
    with pytest.raises(CheckpointMismatchError, match="solver='fast', but this fit has "
                                                      "solver='svd'"):
        _blobs_kmm(solver="svd").fit(Xd, checkpoint=ck, resume=True)
    with pytest.raises(CheckpointMismatchError, match="n_prototypes=20, but this fit has "
                                                      "n_prototypes=25"):
        dqkm.KMultipleMeans(3, n_prototypes=25, random_state=0).fit(Xd, checkpoint=ck,
                                                                    resume=True)
    with pytest.raises(CheckpointMismatchError, match="detect_outliers=False, but this fit "
                                                      "has detect_outliers=True"):
        _blobs_kmm(detect_outliers=True).fit(Xd, checkpoint=ck, resume=True)
    with pytest.raises(CheckpointMismatchError, match=r"4 row chunks of 500, but this X is in "
                                                      r"2 row chunks of 1000"):
        _blobs_kmm().fit(Xd.rechunk((1000, -1)), checkpoint=ck, resume=True)
    # ... and left as it was
    assert _latest(ck) == before
    # the reference's SVD is part of its identity (F differs to rounding between them)
    ref = tmp_path / "ref"
    _blobs_kmm(max_iter=2, solver="svd", svd_algorithm="dense").fit(Xd, checkpoint=ref)
    with pytest.raises(CheckpointMismatchError, match="svd_algorithm='dense', but this fit has "
                                                      "svd_algorithm='arpack'"):
        _blobs_kmm(max_iter=3, solver="svd", svd_algorithm="arpack").fit(Xd, checkpoint=ref,
                                                                          resume=True)
    _assert_same_fit(_blobs_kmm(max_iter=3).fit(Xd, checkpoint=ck, resume=True),
                     _blobs_kmm(max_iter=3).fit(Xd))


def test_random_state_none_resumes_exactly(tmp_path, circles, monkeypatch):
    """random_state=None: resume does not redo the initialisation (a new draw)
    but continues the recorded trajectory, the RNG state included — Lanczos
    start vectors are drawn from it once every block of M goes to ARPACK."""
    from dqkm.kernels import kmm_spectral

    monkeypatch.setattr(kmm_spectral, "DENSE_EIGH_MAX", 2)
    Xd = da.from_array(circles, chunks=(500, -1))
    make = lambda: dqkm.KMultipleMeans(2, n_neighbors=3, max_iter=6)  # noqa: E731
    saved = np.random.get_state()
    try:
        np.random.seed(0)  # the interrupted fit and `full` draw the same seed
        with pytest.raises(Interrupt):
            make().fit(Xd, checkpoint=tmp_path / "ck", callback=_interrupt_after(1))
        np.random.seed(0)
        full = make().fit(Xd)
        resumed = make().fit(Xd, checkpoint=tmp_path / "ck", resume=True)  # another draw
        other = make().fit(Xd)  # another draw, another initialisation
    finally:
        np.random.set_state(saved)
    assert full.n_iter_ == 6
    assert sum(h["eig_computed"] for h in full.history_[1:]) > 0  # the RNG is used after 1
    _assert_same_fit(resumed, full)
    assert not np.array_equal(other.prototypes_, full.prototypes_)


def test_scheduler_loss_names_the_checkpoint(tmp_path, blobs):
    Xd = da.from_array(blobs, chunks=(500, -1))

    def lose(rec):
        if rec["iteration"] == 2:
            raise SchedulerLostError("lost the connection to the Dask scheduler tcp://x")

    ck = str(tmp_path / "ck")
    with pytest.raises(SchedulerLostError, match=r"KMultipleMeans.fit: lost the connection .* "
                                                 r"after outer iteration 2 is in the checkpoint "
                                                 r".*resume=True"):
        _blobs_kmm().fit(Xd, checkpoint=ck, callback=lose)
    with pytest.raises(SchedulerLostError, match="Pass checkpoint=PATH"):
        _blobs_kmm().fit(Xd, callback=lose)


def test_resume_on_a_cluster_of_processes(tmp_path, circles, local_cluster):
    """The rows of S are written and read back by worker processes (the session's
    LocalCluster: 2 worker processes × 1 thread)."""
    from distributed import Client

    Xd = da.from_array(circles, chunks=(500, -1))
    make = lambda: dqkm.KMultipleMeans(2, n_neighbors=3, max_iter=5,  # noqa: E731
                                       random_state=0)
    full = make().fit(Xd)  # threads
    ck = tmp_path / "ck"
    with Client(local_cluster):
        with pytest.raises(Interrupt):
            make().fit(Xd, checkpoint=ck, callback=_interrupt_after(2))
        resumed = make().fit(Xd, checkpoint=ck, resume=True)
        resumed.labels_ = resumed.labels_.compute()
        resumed.similarity_ = tuple(a.compute() for a in resumed.similarity_)
    _assert_same_fit(resumed, full)
