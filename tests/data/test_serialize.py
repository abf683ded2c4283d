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
from dqkm import io
from dqkm.data import atomic as _atomic
from dqkm.data import stores
from dqkm.exceptions import ModelFileError, StoreError
from dqkm.kernel_approximation import FactorNystroem
from dqkm.neighbors import ClusterIndex


def _race_new_saves(models, path, n=4):
    """``n`` threads save ``models[i % 2]`` to the new ``path`` with overwrite=False at
    once: ``(indices of the savers that succeeded, messages of those refused)``."""
    barrier = threading.Barrier(n)
    won, refused = [], []

    def save(i):
        barrier.wait()
        try:
            dqkm.save(models[i % 2], path)
            won.append(i)
        except FileExistsError as e:
            refused.append(str(e))

    threads = [threading.Thread(target=save, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return won, refused


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
        won, refused = _race_new_saves(two_models, path)
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


class _Proxy:
    """A module as dqkm.data.atomic sees it, with some functions replaced."""

    def __init__(self, module, **replaced):
        self._module, self._replaced = module, replaced

    def __getattr__(self, name):
        return self._replaced.get(name) or getattr(self._module, name)


class _OsWithInterruptedRenames:
    """``os`` as dqkm.data.atomic sees it, with every rename interrupted."""

    replace = rename = staticmethod(_interrupt)

    def __getattr__(self, name):
        return getattr(os, name)


@pytest.mark.parametrize("ext", [".npz", ".zarr"])
def test_interrupt_during_rename_leaves_nothing(tmp_path, two_models, ext, monkeypatch):
    """KeyboardInterrupt while the new model is being renamed in: no hidden
    temporary entry is left and the old model is intact."""
    path = tmp_path / f"m{ext}"
    dqkm.save(two_models[0], path)
    # only dqkm's rename step is interrupted: patching the os module itself would also
    # interrupt zarr's own writes inside its event-loop thread, which then never answers
    monkeypatch.setattr(_atomic, "os", _OsWithInterruptedRenames())
    monkeypatch.setattr(_atomic, "_rename2", _interrupt, raising=False)
    with pytest.raises(KeyboardInterrupt):
        dqkm.save(two_models[1], path, overwrite=True)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == [path.name]
    assert _same(dqkm.load(path), two_models[0])


def test_interrupt_inside_compute_and_during_cleanup_leaves_nothing(tmp_path, monkeypatch):
    """KeyboardInterrupt while a store's chunks are computed and written (Ctrl-C reaches
    the driver's main thread there), then a second one during the removal of the
    temporary store: nothing is left behind, the old store is intact, and the
    interrupt reaches the caller."""
    X = _data(400)
    io.save_array(X, tmp_path / "out.zarr")
    new = da.from_array(X + 1, chunks=(100, -1))
    monkeypatch.setattr(stores, "compute_settled", _interrupt)
    with pytest.raises(KeyboardInterrupt):
        io.save_array(new, tmp_path / "out.zarr", overwrite=True)
    assert os.listdir(tmp_path) == ["out.zarr"]
    rmtree, calls = shutil.rmtree, []

    def interrupted_rmtree(p, *a, **k):
        calls.append(p)
        if len(calls) == 1:      # the second Ctrl-C lands in the clean-up
            raise KeyboardInterrupt
        return rmtree(p, *a, **k)

    # only dqkm's clean-up is interrupted (zarr's own rmtree runs in its event-loop thread)
    monkeypatch.setattr(_atomic, "shutil", _Proxy(shutil, rmtree=interrupted_rmtree))
    with pytest.raises(KeyboardInterrupt):
        io.save_arrays({"X": new}, tmp_path / "out.zarr", overwrite=True)
    monkeypatch.undo()
    assert calls and os.listdir(tmp_path) == ["out.zarr"]
    np.testing.assert_array_equal(io.as_dask_array(tmp_path / "out.zarr").compute(), X)


def test_interrupted_generate_leaves_nothing(tmp_path, monkeypatch):
    """datasets.make_blobs(path=...) interrupted while writing leaves no hidden entry."""
    from dqkm import datasets

    monkeypatch.setattr(stores, "compute_settled", _interrupt)
    with pytest.raises(KeyboardInterrupt):
        datasets.make_blobs(500, 4, centers=3, path=tmp_path / "b.zarr", random_state=0)
    assert os.listdir(tmp_path) == []


# ----------------------------------------------------------------------------- item 12
def _rewrite(path, edit):
    """Rewrite a saved .npz after ``edit(header, arrays)`` (a damaged or edited file)."""
    with np.load(path) as f:
        header = json.loads(bytes(f["__header__"]).decode())
        arrays = {k: f[k] for k in f.files if k != "__header__"}
    edit(header, arrays)
    with open(path, "wb") as f:
        np.savez(f, __header__=np.frombuffer(json.dumps(header).encode(), np.uint8), **arrays)


def _fitted(name):
    X = _data(120, 4, seed=3)
    if name == "KMeans":
        return dqkm.KMeans(3, random_state=0, max_iter=5).fit(X)
    if name == "QKMeans":
        return dqkm.QKMeans(4, sparsity=2, random_state=0, max_iter=3).fit(X)
    if name == "KMultipleMeans":
        return dqkm.KMultipleMeans(3, n_prototypes=12, random_state=0).fit(X)
    if name == "ClusterIndex":
        return ClusterIndex(dqkm.KMeans(3, random_state=0, max_iter=5)).fit(X)
    return FactorNystroem(dqkm.KMeans(6, random_state=0, max_iter=5).fit(X)).fit(X)


def _set(key, value):
    def edit(header, arrays):
        if isinstance(value, np.ndarray):
            arrays[key] = value
        else:
            header["state"][key] = value
    return edit


_CASES = [
    ("KMeans", _set("cluster_centers_", np.zeros((7, 4))), "'cluster_centers_' has shape"),
    ("KMeans", _set("predict", 1), "state key 'predict'"),
    ("KMeans", _set("predict", np.zeros(3)), "array 'predict' is not one of"),
    ("KMeans", _set("labels_", np.full(120, 3, np.int32)), "'labels_' holds values"),
    ("QKMeans", _set("cluster_centers_", np.zeros((7, 4))), "'cluster_centers_' has shape"),
    ("QKMeans", _set("flops_", "many"), "state key 'flops_'"),
    ("KMultipleMeans", _set("prototypes_", np.zeros((13, 4))), "'prototypes_' has shape"),
    ("KMultipleMeans", lambda h, a: (a.pop("similarity_weights_"),
                                     h["arrays"].remove("similarity_weights_")),
     "come together"),
    ("ClusterIndex", _set("offsets", np.array([0, 50, 40, 120])), "'offsets' must rise"),
    ("ClusterIndex", _set("offsets", np.array([0, 60, 120])), "'offsets' has 3 entries"),
    ("ClusterIndex", _set("index_ids", np.arange(120) + 5), "'index_ids' holds values"),
    ("FactorNystroem", _set("normalization_", np.zeros((6, 5))), "'normalization_' has shape"),
    ("FactorNystroem", _set("operator", np.zeros((6, 3))), "'operator' has shape"),
]


@pytest.mark.parametrize("name,edit,message", _CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(_CASES)])
def test_load_refuses_state_the_estimator_does_not_declare(tmp_path, name, edit, message):
    """Arrays of the wrong shape, labels or offsets out of range, keys the estimator
    does not declare (e.g. 'predict', which would shadow the method): ModelFileError
    naming the file and the key."""
    path = tmp_path / "m.npz"
    dqkm.save(_fitted(name), path)
    dqkm.load(path)
    _rewrite(path, edit)
    with pytest.raises(ModelFileError, match=f"m.npz.*{message}"):
        dqkm.load(path)


def test_load_refuses_damaged_files(tmp_path):
    """Truncated, empty, header-less, bad-JSON, missing-array files and unknown
    estimators or parameters: ModelFileError naming the path."""
    model = _fitted("KMeans")
    good = tmp_path / "good.npz"
    dqkm.save(model, good)
    data = good.read_bytes()
    cases = {"truncated.npz": data[: len(data) // 2], "empty.npz": b""}
    for name, blob in cases.items():
        (tmp_path / name).write_bytes(blob)
        with pytest.raises(ModelFileError, match=f"{name}.*damaged or truncated"):
            dqkm.load(tmp_path / name)
    np.savez(tmp_path / "plain.npz", a=np.arange(3))
    with pytest.raises(ModelFileError, match="plain.npz.*not a dqkm model"):
        dqkm.load(tmp_path / "plain.npz")
    np.savez(tmp_path / "json.npz", __header__=np.frombuffer(b"{not json", np.uint8))
    with pytest.raises(ModelFileError, match="json.npz.*damaged"):
        dqkm.load(tmp_path / "json.npz")
    for edit, message in [(lambda h, a: a.pop("labels_"), r"lacks the arrays \['labels_'\]"),
                          (lambda h, a: h.update(estimator="os.system"), "estimator 'os.system'"),
                          (lambda h, a: h["params"].update(bogus=1), "parameter 'bogus'")]:
        path = tmp_path / "edited.npz"
        shutil.copy(good, path)
        _rewrite(path, edit)
        with pytest.raises(ModelFileError, match=f"edited.npz.*{message}"):
            dqkm.load(path)
    store = tmp_path / "m.zarr"
    dqkm.save(model, store)
    shutil.rmtree(store / "cluster_centers_")
    with pytest.raises(ModelFileError, match=r"m.zarr.*lacks the arrays \['cluster_centers_'\]"):
        dqkm.load(store)
    zarr.open_group(str(tmp_path / "g.zarr"), mode="w").attrs["dqkm"] = {"format_version": 1}
    with pytest.raises(ModelFileError, match="g.zarr.*no estimator parameters"):
        dqkm.load(tmp_path / "g.zarr")


# ------------------------------------------------------------- fsspec targets (item 3)
@pytest.fixture
def url_of(tmp_path):
    """``url_of(kind, name)``: a fresh target URL on the memory filesystem or a
    ``file://`` URL under tmp_path; ``url_of.listing(kind)`` lists its folder."""
    import uuid

    import fsspec

    mem = fsspec.filesystem("memory")
    root = f"/dqkm-test-{uuid.uuid4().hex[:8]}"

    def url(kind, name):
        return f"memory://{root}/{name}" if kind == "memory" else f"file://{tmp_path}/{name}"

    def listing(kind):
        if kind == "memory":
            return sorted(p.rsplit("/", 1)[-1] for p in mem.ls(root, detail=False))
        return sorted(os.listdir(tmp_path))

    url.listing = listing
    yield url
    if mem.exists(root):
        mem.rm(root, recursive=True)


@pytest.mark.parametrize("kind", ["memory", "file"])
@pytest.mark.parametrize("ext", [".npz", ".zarr"])
def test_fsspec_save_is_exclusive_and_replaces(url_of, two_models, kind, ext):
    """dqkm.save to a memory:// or file:// URL: overwrite=False refuses an existing
    model and keeps it, overwrite=True replaces it, and no hidden temporary entry
    is left beside it."""
    path = url_of(kind, f"m{ext}")
    dqkm.save(two_models[0], path)
    with pytest.raises(_atomic.TargetExistsError, match="already exists; pass overwrite=True"):
        dqkm.save(two_models[1], path)
    assert _same(dqkm.load(path), two_models[0])
    dqkm.save(two_models[1], path, overwrite=True)
    assert _same(dqkm.load(path), two_models[1])
    assert url_of.listing(kind) == [f"m{ext}"]


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_fsspec_save_array_is_exclusive_and_replaces(url_of, kind):
    """io.save_array to a memory:// or file:// URL follows the same rule."""
    path = url_of(kind, "x.zarr")
    X = _data(300)
    io.save_array(da.from_array(X, chunks=(100, -1)), path)
    with pytest.raises(_atomic.TargetExistsError, match="already exists"):
        io.save_array(X + 1, path)
    np.testing.assert_array_equal(io.as_dask_array(path).compute(), X)
    io.save_array(da.from_array(X[:200] + 1, chunks=(50, -1)), path, overwrite=True)
    np.testing.assert_array_equal(io.as_dask_array(path).compute(), X[:200] + 1)
    assert url_of.listing(kind) == ["x.zarr"]


@pytest.mark.parametrize("kind", ["memory", "file"])
@pytest.mark.parametrize("ext", [".npz", ".zarr"])
def test_fsspec_reader_gets_old_or_new_model_while_overwritten(url_of, two_models, kind, ext):
    """A writer saves two models in turn to a URL with overwrite=True while a reader
    loads: every load is one of the two models or a clear ModelFileError, never a
    mix (memory://: the store is committed file by file, the write ids tell)."""
    from dqkm.exceptions import ModelFileError as _ModelFileError

    path = url_of(kind, f"m{ext}")
    dqkm.save(two_models[0], path)
    done = threading.Event()
    problems, loads = [], []

    def writer():
        try:
            for i in range(40):
                dqkm.save(two_models[i % 2], path, overwrite=True)
        finally:
            done.set()

    def reader():
        tries = 0
        while not done.is_set() or (len(loads) < 10 and tries < 200):
            tries += 1
            try:
                m = dqkm.load(path)
            except _ModelFileError:
                continue  # a clear error while the store is committed
            except Exception as e:  # noqa: BLE001 - recorded, asserted below
                problems.append(repr(e))
                continue
            loads.append(m)
            if not any(_same(m, ref) for ref in two_models):
                problems.append(f"mixed model: k={m.n_clusters}, labels {m.labels_.shape}")

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert problems == [] and len(loads) >= 10
    assert url_of.listing(kind) == [f"m{ext}"]


@pytest.mark.parametrize("ext", [".npz", ".zarr"])
def test_racing_new_saves_to_a_file_url_exactly_one_wins(tmp_path, url_of, two_models, ext):
    """A file:// URL gets the local guarantees: of writers racing for a new path with
    overwrite=False exactly one succeeds."""
    for round_ in range(3):
        path = url_of("file", f"r{round_}{ext}")
        won, refused = _race_new_saves(two_models, path)
        assert len(won) == 1 and len(refused) == 3
        assert _same(dqkm.load(path), two_models[won[0] % 2])
    assert _leftovers(tmp_path) == []


def test_fsspec_overwrite_refuses_what_dqkm_did_not_write(url_of, two_models):
    """overwrite=True on a memory:// URL replaces only a dqkm model or Zarr store."""
    import fsspec

    path = url_of("memory", "notes.npz")
    with fsspec.open(path, "wb") as f:
        f.write(b"not a model")
    with pytest.raises(StoreError, match="not a Zarr store or dqkm model file"):
        dqkm.save(two_models[0], path, overwrite=True)
    assert fsspec.filesystem("memory").cat_file(path.split("://")[1]) == b"not a model"


@pytest.mark.parametrize("ext", [".npz", ".zarr"])
def test_interrupted_fsspec_commit_leaves_nothing(url_of, two_models, ext, monkeypatch):
    """KeyboardInterrupt while a new model is moved into place on memory://: neither
    the temporary name nor a partial model is left."""
    from fsspec.implementations.memory import MemoryFileSystem

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    path = url_of("memory", f"m{ext}")
    dqkm.save(two_models[0], url_of("memory", "keep.zarr"))
    monkeypatch.setattr(MemoryFileSystem, "pipe_file" if ext == ".npz" else "mv", interrupted)
    with pytest.raises(KeyboardInterrupt):
        dqkm.save(two_models[1], path)
    monkeypatch.undo()
    assert url_of.listing("memory") == ["keep.zarr"]


@pytest.mark.parametrize("kind", ["folder", "file"])
def test_load_of_a_plain_folder_or_file_says_it_is_not_a_model(tmp_path, kind):
    """A folder without Zarr metadata, or a file that is not .npz, is not a model:
    an immediate ModelFileError saying so, not 20 retries reported as a concurrent
    save ("kept changing while being read")."""
    path = tmp_path / "not-a-model"
    if kind == "folder":
        path.mkdir()
        (path / "notes.txt").write_text("hello")
    else:
        path.write_text("hello")
    with pytest.raises(ModelFileError, match="not-a-model.*not a dqkm model.*Zarr group"):
        dqkm.load(path)
