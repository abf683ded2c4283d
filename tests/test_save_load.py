"""dqkm.save / dqkm.load and the atomic writers: concurrent readers and writers,
interrupts, and what a saved model may hold."""

import json
import os
import shutil
import threading

import dask.array as da
import numpy as np
import pytest
import zarr

import dqkm
from dqkm import _atomic, io
from dqkm.exceptions import ModelFileError, StoreError
from dqkm.kernel_approximation import FactorNystroem
from dqkm.neighbors import ClusterIndex


def _data(n, d=3, seed=0):
    return np.random.default_rng(seed).normal(size=(n, d))


@pytest.fixture(scope="module")
def two_models():
    """Two KMeans models that a mix of would show: other k, other number of labels."""
    a = dqkm.KMeans(2, random_state=0, max_iter=5).fit(_data(40, seed=1))
    b = dqkm.KMeans(5, random_state=0, max_iter=5).fit(_data(70, seed=2))
    return a, b


def _same(m, ref):
    return (m.n_clusters == ref.n_clusters and m.labels_.shape == ref.labels_.shape
            and np.array_equal(m.cluster_centers_, ref.cluster_centers_)
            and np.array_equal(m.labels_, ref.labels_))


def _leftovers(folder):
    return sorted(p for p in os.listdir(folder) if "tmp" in p)


# ----------------------------------------------------------------------------- item 3
@pytest.mark.parametrize("ext", [".npz", ".zarr"])
def test_reader_gets_old_or_new_model_while_overwritten(tmp_path, two_models, ext):
    """A writer saves two models in turn with overwrite=True while a reader loads:
    every load is exactly one of the two models (never missing, never a mix)."""
    path = tmp_path / f"m{ext}"
    dqkm.save(two_models[0], path)
    done = threading.Event()
    problems, loads = [], []

    def writer():
        try:
            for i in range(120):
                dqkm.save(two_models[i % 2], path, overwrite=True)
        finally:
            done.set()

    def reader():
        while not done.is_set() or len(loads) < 20:
            try:
                m = dqkm.load(path)
            except Exception as e:  # noqa: BLE001 - recorded, asserted below
                problems.append(repr(e))
                continue
            loads.append(m)
            if not any(_same(m, ref) for ref in two_models) or \
                    m.labels_.max() >= m.n_clusters:
                problems.append(f"mixed model: k={m.n_clusters}, "
                                f"centers {m.cluster_centers_.shape}, labels {m.labels_.shape}")

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert problems == []
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("ext", [".npz", ".zarr"])
@pytest.mark.parametrize("renameat2", [True, False])
def test_racing_new_saves_exactly_one_wins(tmp_path, two_models, ext, renameat2, monkeypatch):
    """Writers racing for a new path with overwrite=False: exactly one succeeds, the
    others are refused, and the file holds the winner's model (also where the C
    library has no renameat2 and the name is reserved with os.mkdir)."""
    if not renameat2:
        monkeypatch.setattr(_atomic, "_renameat2", None)
    for round_ in range(6):
        path = tmp_path / f"r{round_}{ext}"
        barrier = threading.Barrier(4)
        won, refused = [], []

        def save(i):
            barrier.wait()
            try:
                dqkm.save(two_models[i % 2], path)
                won.append(i)
            except FileExistsError as e:
                refused.append(str(e))

        threads = [threading.Thread(target=save, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1 and len(refused) == 3
        assert all("already exists; pass overwrite=True" in r for r in refused)
        assert _same(dqkm.load(path), two_models[won[0] % 2])
    assert _leftovers(tmp_path) == []


def test_overwrite_refuses_what_dqkm_did_not_write(tmp_path, two_models):
    """overwrite=True replaces a Zarr store or a dqkm .npz, never a user's directory
    or another .npz archive."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(StoreError, match="'.*mine'.*not a Zarr store or dqkm model file"):
        io.save_array(_data(10), mine, overwrite=True)
    with pytest.raises(StoreError, match="not a Zarr store or dqkm model file"):
        dqkm.save(two_models[0], mine, overwrite=True)
    assert (mine / "notes.txt").read_text() == "keep me"
    other = tmp_path / "other.npz"
    np.savez(other, a=np.arange(3))
    with pytest.raises(StoreError, match="other.npz.*not a Zarr store or dqkm model file"):
        dqkm.save(two_models[0], other, overwrite=True)
    with np.load(other) as f:
        np.testing.assert_array_equal(f["a"], np.arange(3))
    with pytest.raises(StoreError, match="not a Zarr store"):
        io.check_writable(mine, overwrite=True)
    assert sorted(os.listdir(tmp_path)) == ["mine", "other.npz"]


# ----------------------------------------------------------------------------- item 4
def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize("ext", [".npz", ".zarr"])
def test_interrupt_during_rename_leaves_nothing(tmp_path, two_models, ext, monkeypatch):
    """KeyboardInterrupt while the new model is being renamed in: no hidden
    temporary entry is left and the old model is intact."""
    path = tmp_path / f"m{ext}"
    dqkm.save(two_models[0], path)
    monkeypatch.setattr(os, "replace", _interrupt)
    monkeypatch.setattr(os, "rename", _interrupt)
    monkeypatch.setattr(_atomic, "_rename2", _interrupt, raising=False)
    with pytest.raises(KeyboardInterrupt):
        dqkm.save(two_models[1], path, overwrite=True)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == [path.name]
    assert _same(dqkm.load(path), two_models[0])


def test_interrupt_inside_compute_and_during_cleanup_leaves_nothing(tmp_path, monkeypatch):
    """KeyboardInterrupt from a Dask block while a store is written, then a second
    one during the removal of the temporary store: nothing is left behind, the
    old store is intact, and the interrupt reaches the caller."""
    X = _data(400)
    io.save_array(X, tmp_path / "out.zarr")

    def boom(block):
        raise KeyboardInterrupt

    bad = da.from_array(X, chunks=(100, -1)).map_blocks(boom, dtype=X.dtype)
    with pytest.raises(KeyboardInterrupt):
        io.save_array(bad, tmp_path / "out.zarr", overwrite=True)
    assert os.listdir(tmp_path) == ["out.zarr"]
    rmtree, calls = shutil.rmtree, []

    def interrupted_rmtree(p, *a, **k):
        calls.append(p)
        if len(calls) == 1:      # the second Ctrl-C lands in the clean-up
            raise KeyboardInterrupt
        return rmtree(p, *a, **k)

    monkeypatch.setattr(shutil, "rmtree", interrupted_rmtree)
    with pytest.raises(KeyboardInterrupt):
        io.save_arrays({"X": bad}, tmp_path / "out.zarr", overwrite=True)
    monkeypatch.undo()
    assert calls and os.listdir(tmp_path) == ["out.zarr"]
    np.testing.assert_array_equal(io.as_dask_array(tmp_path / "out.zarr").compute(), X)


def test_interrupted_generate_leaves_nothing(tmp_path, monkeypatch):
    """datasets.make_blobs(path=...) interrupted while writing leaves no hidden entry."""
    from dqkm import datasets

    monkeypatch.setattr(io, "compute_settled", _interrupt)
    with pytest.raises(KeyboardInterrupt):
        datasets.make_blobs(500, 4, centers=3, path=tmp_path / "b.zarr", random_state=0)
    assert os.listdir(tmp_path) == []
