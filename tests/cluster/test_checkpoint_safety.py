"""Checkpoints lose nothing and mix nothing: dqkm deletes only what it wrote, one fit
at a time writes a checkpoint, and a resume refuses other data, other parameters and
damaged states (issue "Nothing lost, nothing silently wrong", items 1, 2 and 7)."""

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys

import dask.array as da
import numpy as np
import pytest
import zarr
from sklearn.datasets import make_blobs

import dqkm
from dqkm import datasets
from dqkm.cluster._checkpoint import LOCK_NAME, CheckpointMismatchError
from dqkm.exceptions import CheckpointError


class Interrupt(Exception):
    pass


def _stop_after(n):
    def cb(rec, *state):
        if rec["iteration"] == n:
            raise Interrupt(f"stopped after iteration {n}")

    return cb


@pytest.fixture(scope="module")
def X():
    return make_blobs(600, 4, centers=3, cluster_std=2.0, random_state=0)[0]


def _km(**kw):
    return dqkm.KMeans(3, **{"init": "random", "n_init": 1, "max_iter": 20, "tol": 0,
                             "random_state": 0, **kw})


def _interrupted(make, X, ck, n=2):
    with pytest.raises(Interrupt):
        make().fit(X, checkpoint=ck, callback=_stop_after(n))


def _latest(ck):
    with open(os.path.join(ck, "latest.json")) as f:
        return os.path.join(ck, json.load(f)["group"])


# ------------------------------------------------------------------ item 1: deletions
def test_non_empty_foreign_directory_or_file_is_refused_and_kept(tmp_path, X, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match=r"work' is a non-empty directory that is not "
                                              r"a dqkm checkpoint \(it holds 'notes.txt'\)"):
        _km().fit(X, checkpoint=work)
    monkeypatch.chdir(work)  # checkpoint="." must not empty the working directory
    with pytest.raises(CheckpointError, match=r"checkpoint '\.' is a non-empty directory"):
        _km().fit(X, checkpoint=".")
    assert (work / "notes.txt").read_text() == "mine"
    (tmp_path / "a-file").write_text("data")
    with pytest.raises(CheckpointError, match="'.*a-file' is a file, not a directory"):
        _km().fit(X, checkpoint=tmp_path / "a-file")
    assert (tmp_path / "a-file").read_text() == "data"
    # an empty directory and a missing path are fine
    (tmp_path / "empty").mkdir()
    _km(max_iter=2).fit(X, checkpoint=tmp_path / "empty")
    _km(max_iter=2).fit(X, checkpoint=tmp_path / "new" / "ck")
    assert (tmp_path / "new" / "ck" / "latest.json").exists()


@pytest.mark.parametrize("how", ["zarr", "dask", "dask-from-zarr"])
def test_input_store_is_refused_as_checkpoint(tmp_path, how):
    path = tmp_path / "data.zarr"
    datasets.make_blobs(400, 3, 2, chunks=100, random_state=0, path=path)
    node = zarr.open(str(path), mode="r")
    arr = node["X"] if isinstance(node, zarr.Group) else node
    Xin = {"zarr": arr, "dask": dqkm.io.as_dask_array(path),
           "dask-from-zarr": da.from_zarr(arr)}[how]
    before = sorted(os.listdir(path))
    for ck, relation in [(path, "is"), (tmp_path, "contains"), (path / "ck", "lies inside")]:
        with pytest.raises(CheckpointError, match=f"{relation} the input store"):
            dqkm.KMeans(2, max_iter=2, random_state=0).fit(Xin, checkpoint=ck)
    assert sorted(os.listdir(path)) == before
    assert dqkm.io.as_dask_array(path).shape == (400, 3)


def test_fresh_start_removes_only_what_dqkm_named(tmp_path, X):
    ck = tmp_path / "ck"
    _interrupted(_km, X, ck)
    (ck / "notes.txt").write_text("mine")
    (ck / "iteration-plots").mkdir()
    _km(max_iter=3).fit(X, checkpoint=ck)  # resume=False: a fresh checkpoint
    assert sorted(os.listdir(ck)) == ["iter-000003", "iteration-plots", "latest.json",
                                      "notes.txt", "zarr.json"]


def test_cli_refuses_the_data_store_and_out_as_checkpoint(tmp_path, capsys):
    from dqkm.cli import main

    datasets.make_blobs(400, 3, 2, chunks=100, random_state=0, path=tmp_path / "data.zarr")
    before = sorted(os.listdir(tmp_path / "data.zarr"))
    base = ["fit", "--n-clusters", "2", str(tmp_path / "data.zarr"), "--no-progress"]
    assert main(base + ["--out", str(tmp_path / "m.npz"), "--checkpoint",
                        str(tmp_path / "data.zarr")]) == 2
    err = capsys.readouterr().err
    assert "--checkpoint: checkpoint" in err and "is the input store" in err
    assert len(err.strip().splitlines()) == 1
    assert main(base + ["--out", str(tmp_path / "out" / "m.zarr"), "--checkpoint",
                        str(tmp_path / "out")]) == 2
    assert "contains the --out path" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path / "data.zarr")) == before
    assert not (tmp_path / "m.npz").exists() and not (tmp_path / "out").exists()


# ------------------------------------------------------------------ item 2: one writer
_HOLD = """
import sys
from dqkm.cluster._checkpoint import CheckpointLock
CheckpointLock(sys.argv[1]).acquire()
print("locked", flush=True)
sys.stdin.read()
"""


def test_checkpoint_locked_by_a_live_process_then_its_stale_lock(tmp_path, X):
    ck = tmp_path / "ck"
    _interrupted(_km, X, ck)
    assert not (ck / LOCK_NAME).exists()  # released on the exception
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(ck)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "locked"
        host = socket.gethostname()
        with pytest.raises(CheckpointError, match=rf"'{ck}' is locked by another fit \(host "
                                                  rf"'{host}', pid {holder.pid}\)"):
            _km().fit(X, checkpoint=ck, resume=True)
        with pytest.raises(CheckpointError, match=f"pid {holder.pid}"):
            _km().fit(X, checkpoint=ck)  # nor may a fresh fit replace it
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    assert (ck / LOCK_NAME).exists()  # left by the killed process: stale, taken over
    resumed = _km().fit(X, checkpoint=ck, resume=True)
    np.testing.assert_array_equal(resumed.cluster_centers_, _km().fit(X).cluster_centers_)
    assert not (ck / LOCK_NAME).exists()


def test_resume_removes_stray_groups_and_temporary_pointers(tmp_path, X):
    ck = tmp_path / "ck"
    _interrupted(_km, X, ck, n=3)
    shutil.copytree(_latest(ck), ck / "iter-000777")  # a crashed writer's leftovers
    (ck / "latest.json.tmp").write_text('{"group": "iter-000777"}')
    (ck / "latest.json.otherhost-12-abcd.tmp").write_text("{")
    _km().fit(X, checkpoint=ck, resume=True)
    names = sorted(os.listdir(ck))
    assert names == [os.path.basename(_latest(ck)), "latest.json", "zarr.json"]
    assert names[0] != "iter-000777"


# ------------------------------------------------------------------ item 7: identity
@pytest.mark.parametrize("make,other,match", [
    (lambda: _km(), lambda: _km(tol=1e-3), "tol=0, but this fit has tol=0.001"),
    (lambda: _km(init=np.eye(3, 4)), lambda: _km(init=2 * np.eye(3, 4)), "init="),
    (lambda: dqkm.KMeansL1(3, radius=5.0, max_iter=20, tol=0, random_state=0),
     lambda: dqkm.KMeansL1(3, radius=6.0, max_iter=20, tol=0, random_state=0),
     "radius=5.0, but this fit has radius=6.0"),
    (lambda: dqkm.QKMeans(3, sparsity=2, palm_iter=3, palm_iter_init=5, max_iter=10, tol=0,
                          random_state=0),
     lambda: dqkm.QKMeans(3, sparsity=3, palm_iter=3, palm_iter_init=5, max_iter=10, tol=0,
                          random_state=0),
     "sparsity=2, but this fit has sparsity=3"),
    (lambda: dqkm.SparseEmbeddedKMeans(3, n_components=3, random_state=0,
                                       kmeans={"max_iter": 20, "tol": 0}),
     lambda: dqkm.SparseEmbeddedKMeans(3, n_components=3, random_state=0,
                                       kmeans={"max_iter": 20, "tol": 1e-2}),
     "tol=0, but this fit has tol=0.01"),
], ids=["KMeans-tol", "KMeans-init-array", "KMeansL1-radius", "QKMeans-sparsity", "SE-kmeans"])
def test_resume_refuses_other_parameters_and_other_data(tmp_path, X, make, other, match):
    ck = tmp_path / "ck"
    _interrupted(make, X, ck)
    with pytest.raises(CheckpointMismatchError, match=match):
        other().fit(X, checkpoint=ck, resume=True)
    Y = X.copy()
    Y[5, 1] += 1.0  # other data of the same shape, dtype and chunks
    with pytest.raises(CheckpointMismatchError, match="written for other data of the same "
                                                      "shape"):
        make().fit(Y, checkpoint=ck, resume=True)
    make().fit(X, checkpoint=ck, resume=True)  # the same data and parameters still resume


def test_kmm_resume_refuses_other_parameters_and_other_data(tmp_path):
    Xb = make_blobs(400, 2, centers=3, cluster_std=0.5, random_state=0)[0]
    Xd = da.from_array(Xb, chunks=(100, -1))
    make = lambda **kw: dqkm.KMultipleMeans(  # noqa: E731
        3, **{"n_prototypes": 12, "n_neighbors": 3, "max_iter": 6, "random_state": 0, **kw})
    ck = tmp_path / "ck"
    with pytest.raises(Interrupt):
        make().fit(Xd, checkpoint=ck, callback=_stop_after(2))
    with pytest.raises(CheckpointMismatchError, match="max_inner_iter=30, but this fit has "
                                                      "max_inner_iter=5"):
        make(max_inner_iter=5).fit(Xd, checkpoint=ck, resume=True)
    with pytest.raises(CheckpointMismatchError, match="other data of the same shape"):
        make().fit(Xd[::-1], checkpoint=ck, resume=True)
    # a rows-of-S chunk file deleted: damaged, not resumed from zeros
    victim = sorted(glob.glob(os.path.join(_latest(ck), "rows", "000001", "w", "c", "**", "*"),
                              recursive=True))
    os.remove([p for p in victim if os.path.isfile(p)][0])
    with pytest.raises(CheckpointError, match=r"is damaged: the file iter-000002/rows/000001/w/"
                                              r"c.* is missing.*resume=False"):
        make().fit(Xd, checkpoint=ck, resume=True)


def test_resume_with_another_max_iter_only_on_the_same_path(tmp_path, X):
    ck = tmp_path / "ck"
    _interrupted(lambda: _km(max_iter=20), X, ck, n=5)
    with pytest.raises(CheckpointMismatchError, match=r"max_iter=20 and holds the state after "
                                                      r"iteration 5, but this fit has "
                                                      r"max_iter=4"):
        _km(max_iter=4).fit(X, checkpoint=ck, resume=True)
    longer = _km(max_iter=8).fit(X, checkpoint=ck, resume=True)  # on the path of max_iter=8
    np.testing.assert_array_equal(longer.cluster_centers_, _km(max_iter=8).fit(X).cluster_centers_)
    # a second run started with max_iter=3: its best-so-far came from a 3-iteration run
    ck2 = tmp_path / "ck2"
    calls = {"n": 0}

    def stop_in_run_two(rec, state):
        calls["n"] += 1
        if calls["n"] == 5:
            raise Interrupt("run 2")

    with pytest.raises(Interrupt):
        _km(max_iter=3, n_init=3).fit(X, checkpoint=ck2, callback=stop_in_run_two)
    with pytest.raises(CheckpointMismatchError, match="of run 2, but this fit has max_iter=6"):
        _km(max_iter=6, n_init=3).fit(X, checkpoint=ck2, resume=True)


# ------------------------------------------------------------------ item 7: damage
def _chunk_files(directory):
    return [p for p in glob.glob(os.path.join(directory, "c", "**", "*"), recursive=True)
            if os.path.isfile(p)]


@pytest.mark.parametrize("damage,match", [
    (lambda ck: os.remove(_chunk_files(os.path.join(_latest(ck), "current_centers"))[0]),
     r"the array iter-000002/current_centers differs from what was written"),
    (lambda ck: open(_chunk_files(os.path.join(_latest(ck), "current_centers"))[0],
                     "r+b").truncate(7), r"the array iter-000002/current_centers "),
    (lambda ck: shutil.rmtree(os.path.join(_latest(ck), "current_centers")),
     r"the array iter-000002/current_centers cannot be read"),
    (lambda ck: shutil.rmtree(_latest(ck)), r"latest.json names the state 'iter-000002', "
                                            r"which is missing"),
    (lambda ck: open(os.path.join(ck, "latest.json"), "w").write('{"group": '),
     r"latest.json cannot be read"),
], ids=["chunk-deleted", "chunk-truncated", "array-deleted", "group-deleted", "bad-pointer"])
def test_damaged_checkpoint_is_an_error_naming_resume_false(tmp_path, X, damage, match):
    ck = str(tmp_path / "ck")
    _interrupted(_km, X, ck)
    damage(ck)
    with pytest.raises(CheckpointError, match=rf"checkpoint '{ck}' is damaged: {match}.*fit "
                                              r"with resume=False to start over"):
        _km().fit(X, checkpoint=ck, resume=True)
    _km(max_iter=2).fit(X, checkpoint=ck)  # resume=False replaces it


def test_checkpoint_with_unreadable_marker_is_neither_resumed_nor_deleted(tmp_path, X):
    ck = tmp_path / "ck"
    _interrupted(_km, X, ck)
    (ck / "zarr.json").write_text("{")
    for resume in (True, False):
        with pytest.raises(CheckpointError, match="not a dqkm checkpoint .*if it is a damaged "
                                                  "dqkm checkpoint, remove it yourself"):
            _km().fit(X, checkpoint=ck, resume=resume)
    assert sorted(os.listdir(ck))[0].startswith("iter-")


def test_altered_array_bytes_are_detected(tmp_path, X):
    """A chunk rewritten with other values of the same size: the SHA-256 differs."""
    ck = str(tmp_path / "ck")
    _interrupted(_km, X, ck)
    arr = zarr.open_array(os.path.join(_latest(ck), "current_centers"), mode="r+")
    arr[0, 0] = arr[0, 0] + 1.0
    with pytest.raises(CheckpointError, match="current_centers differs from what was written"):
        _km().fit(X, checkpoint=ck, resume=True)


def test_mismatch_error_is_a_checkpoint_error_and_a_value_error():
    assert issubclass(CheckpointMismatchError, CheckpointError)
    assert issubclass(CheckpointMismatchError, ValueError)


def test_sparse_embedded_kmeans_fingerprints_its_own_sparse_input(tmp_path):
    """The identity holds the fingerprint of X itself (CSR here), not of the embedding."""
    import scipy.sparse as sp

    Xs = sp.random(500, 50, density=0.1, format="csr", random_state=0)
    make = lambda: dqkm.SparseEmbeddedKMeans(  # noqa: E731
        3, n_components=8, random_state=0, kmeans={"max_iter": 10, "tol": 0})
    ck = tmp_path / "ck"
    with pytest.raises(Interrupt):
        make().fit(Xs, checkpoint=ck, callback=_stop_after(2))
    Ys = Xs.copy()
    Ys.data[0] += 1.0
    with pytest.raises(CheckpointMismatchError, match="other data of the same shape"):
        make().fit(Ys, checkpoint=ck, resume=True)
    resumed = make().fit(Xs, checkpoint=ck, resume=True)
    np.testing.assert_array_equal(resumed.cluster_centers_, make().fit(Xs).cluster_centers_)
