"""The fast local Zarr reader (dqkm.data.zarr_reader) against zarr-python's own reads."""

import os

import dask
import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, BytesCodec, GzipCodec, TransposeCodec, ZstdCodec

from dqkm import io
from dqkm.data import zarr_reader
from dqkm.data.zarr_reader import local_chunk_reader

COMPRESSORS = {"none": None, "zstd": ZstdCodec(level=1), "gzip": GzipCodec(),
               "blosc": BloscCodec()}


def _layers(x):
    return list(x.dask.layers)


@pytest.mark.parametrize("compressor", sorted(COMPRESSORS))
@pytest.mark.parametrize("dtype", ["float32", "float64", "int16"])
def test_reads_equal_zarr_with_an_edge_chunk(tmp_path, compressor, dtype):
    rng = np.random.default_rng(0)
    data = (rng.standard_normal((1003, 7)) * 100).astype(dtype)
    arr = zarr.create_array(tmp_path / "a.zarr", shape=data.shape, chunks=(250, 7), dtype=dtype,
                            compressors=COMPRESSORS[compressor])
    arr[...] = data
    arr = zarr.open_array(tmp_path / "a.zarr", mode="r")
    assert local_chunk_reader(arr) is not None
    x = zarr_reader.from_zarr(arr)
    assert x.chunks == ((250, 250, 250, 250, 3), (7,))
    assert any(name.startswith("zarr-read-") for name in _layers(x))
    out = x.compute()
    assert out.dtype == data.dtype
    np.testing.assert_array_equal(out, arr[...])
    np.testing.assert_array_equal(out, data)


def test_group_component_1d_array_and_missing_chunks(tmp_path):
    group = zarr.open_group(tmp_path / "g.zarr", mode="w", zarr_format=3)
    X = group.create_array("X", shape=(10, 3), chunks=(4, 3), dtype="float64", fill_value=7.0)
    X[4:8] = np.arange(12.0).reshape(4, 3)  # chunks 0 and 2 are never written
    y = group.create_array("y", shape=(10,), chunks=(4,), dtype="int64")
    y[...] = np.arange(10)
    assert not os.path.exists(tmp_path / "g.zarr" / "X" / "c" / "0" / "0")
    loaded = io.load_array(tmp_path / "g.zarr", "X")
    assert any(name.startswith("zarr-read-") for name in _layers(loaded))
    np.testing.assert_array_equal(loaded.compute(), X[...])
    assert (loaded.compute()[:4] == 7.0).all()
    labels = io.load_array(tmp_path / "g.zarr", "y")
    assert any(name.startswith("zarr-read-") for name in _layers(labels))
    np.testing.assert_array_equal(labels.compute(), np.arange(10))


def test_an_empty_array(tmp_path):
    arr = zarr.create_array(tmp_path / "e.zarr", shape=(0, 3), chunks=(4, 3), dtype="f4")
    x = zarr_reader.from_zarr(arr)
    assert x.shape == (0, 3) and x.dtype == np.float32
    assert x.compute().shape == (0, 3)


def test_v2_chunk_key_encoding(tmp_path):
    data = np.arange(60.0).reshape(20, 3)
    arr = zarr.create_array(tmp_path / "a.zarr", shape=data.shape, chunks=(6, 3), dtype="f8",
                            chunk_key_encoding={"name": "v2", "separator": "."})
    arr[...] = data
    assert os.path.exists(tmp_path / "a.zarr" / "1.0")
    assert local_chunk_reader(arr) is not None
    np.testing.assert_array_equal(zarr_reader.from_zarr(arr).compute(), data)


@pytest.mark.parametrize("case", ["sharded", "feature_chunks", "big_endian", "transpose",
                                  "zarr_v2", "other_row_chunks", "switched_off"])
def test_everything_else_falls_back_to_zarr(tmp_path, case):
    data = np.arange(240.0, dtype="float32").reshape(40, 6)
    kw = {"shape": data.shape, "dtype": "float32", "chunks": (10, 6)}
    if case == "sharded":
        kw.update(chunks=(5, 6), shards=(10, 6))
    elif case == "feature_chunks":
        kw.update(chunks=(10, 3))
    elif case == "big_endian":
        kw.update(serializer=BytesCodec(endian="big"))
    elif case == "transpose":
        kw.update(filters=[TransposeCodec(order=(1, 0))])
    elif case == "zarr_v2":
        kw.update(zarr_format=2)
    arr = zarr.create_array(tmp_path / "a.zarr", **kw)
    arr[...] = data
    chunks = 8 if case == "other_row_chunks" else None
    with dask.config.set({"dqkm.fast-zarr-read": case != "switched_off"}):
        assert local_chunk_reader(arr, chunks) is None
        x = zarr_reader.from_zarr(arr, chunks)
    assert not any(name.startswith("zarr-read-") for name in _layers(x))
    np.testing.assert_array_equal(x.compute(), data)


def test_a_truncated_chunk_file_is_an_error_not_garbage(tmp_path):
    arr = zarr.create_array(tmp_path / "a.zarr", shape=(8, 2), chunks=(4, 2), dtype="f8",
                            compressors=None)
    arr[...] = 1.0
    path = tmp_path / "a.zarr" / "c" / "1" / "0"
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(OSError, match="holds 7 values; expected 8"):
        zarr_reader.from_zarr(arr).compute()


def test_dataset_generated_store_is_read_fast_on_a_local_cluster(tmp_path, dist_client):
    """On the session's LocalCluster (2 worker processes; tests/conftest.py)."""
    from dqkm import datasets

    with dask.config.set(scheduler="threads"):  # the store is written on the driver
        X, _ = datasets.make_blobs(5000, 4, 3, chunks=1000, random_state=0,
                                   path=tmp_path / "b.zarr")
        expected = X.compute()
    Xd = io.as_dask_array(tmp_path / "b.zarr")
    assert any(name.startswith("zarr-read-") for name in _layers(Xd))
    np.testing.assert_array_equal(Xd.compute(), expected)


# ------------------------------------------------------------------ damaged chunks
def _encoded(compressor, values):
    """``values`` encoded as a valid chunk of ``compressor`` (a stream of its own)."""
    import numcodecs

    codec = {"none": None, "zstd": numcodecs.Zstd(level=1), "gzip": numcodecs.GZip(),
             "blosc": numcodecs.Blosc()}[compressor]
    return values.tobytes() if codec is None else bytes(codec.encode(values))


@pytest.mark.parametrize("damage", ["empty", "short"])
@pytest.mark.parametrize("compressor", sorted(COMPRESSORS))
def test_a_damaged_chunk_is_a_store_error_naming_store_and_chunk(tmp_path, compressor, damage):
    from dqkm.exceptions import StoreError

    data = np.arange(80.0).reshape(40, 2)
    arr = zarr.create_array(tmp_path / "d.zarr", shape=data.shape, chunks=(10, 2), dtype="f8",
                            compressors=COMPRESSORS[compressor])
    arr[...] = data
    path = tmp_path / "d.zarr" / "c" / "2" / "0"
    # a 0-byte file, or a valid stream of 10 of the chunk's 20 values
    path.write_bytes(b"" if damage == "empty" else _encoded(compressor, data[20:25].copy()))
    arr = zarr.open_array(tmp_path / "d.zarr", mode="r")
    assert local_chunk_reader(arr) is not None
    x = zarr_reader.from_zarr(arr)
    np.testing.assert_array_equal(x[:20].compute(), data[:20])  # the other chunks read
    with pytest.raises(StoreError, match=r"Chunk 2 of the Zarr array '.*d\.zarr'.*damaged"):
        x.compute()


def test_a_failure_while_deciding_falls_back_to_zarr_python(tmp_path, monkeypatch):
    data = np.arange(40.0).reshape(20, 2)
    arr = zarr.create_array(tmp_path / "a.zarr", shape=data.shape, chunks=(5, 2), dtype="f8",
                            compressors=ZstdCodec(level=1))
    arr[...] = data

    def unexpected(codec):
        raise RuntimeError("a zarr-python layout this reader does not know")

    monkeypatch.setattr(zarr_reader, "_decoder", unexpected)
    assert local_chunk_reader(arr) is None
    x = zarr_reader.from_zarr(arr)
    assert not any(name.startswith("zarr-read-") for name in _layers(x))
    np.testing.assert_array_equal(x.compute(), data)


def test_a_relative_zarr_array_enters_the_graph_as_an_absolute_path(tmp_path, monkeypatch):
    data = np.arange(40.0).reshape(20, 2)
    monkeypatch.chdir(tmp_path)
    zarr.create_array("r.zarr", shape=data.shape, chunks=(5, 2), dtype="f8")[...] = data
    arr = zarr.open_array("r.zarr", mode="r")
    assert local_chunk_reader(arr).directory == str(tmp_path / "r.zarr")
    fast = zarr_reader.from_zarr(arr)
    with dask.config.set({"dqkm.fast-zarr-read": False}):
        slow = zarr_reader.from_zarr(arr)
    monkeypatch.chdir(tmp_path.parent)  # as a worker started elsewhere
    np.testing.assert_array_equal(fast.compute(), data)
    np.testing.assert_array_equal(slow.compute(), data)


def _zstd_frame_without_content_size(payload):
    """One zstd frame (RFC 8878) of one raw block whose header omits the content size."""
    header = b"\x28\xb5\x2f\xfd" + bytes([0x00, 0x00])  # no size, 1 KiB window
    return header + ((len(payload) << 3) | 1).to_bytes(3, "little") + payload


def test_a_zstd_frame_without_its_size_is_counted_after_decoding(tmp_path):
    from dqkm.exceptions import StoreError

    data = np.arange(80.0).reshape(40, 2)
    arr = zarr.create_array(tmp_path / "z.zarr", shape=data.shape, chunks=(10, 2), dtype="f8",
                            compressors=ZstdCodec(level=1))
    arr[...] = data
    path = tmp_path / "z.zarr" / "c" / "1" / "0"
    path.write_bytes(_zstd_frame_without_content_size(data[10:20].tobytes()))
    np.testing.assert_array_equal(zarr_reader.from_zarr(arr).compute(), data)  # whole: read
    path.write_bytes(_zstd_frame_without_content_size(data[10:15].tobytes()))
    with pytest.raises(StoreError, match=r"Chunk 1 of the Zarr array .*z\.zarr.*decoding to "
                                         r"80 bytes; expected 20 values"):
        zarr_reader.from_zarr(arr).compute()


def test_a_damaged_chunk_read_by_zarr_python_is_a_store_error(tmp_path):
    from dqkm.exceptions import StoreError

    data = np.arange(80.0).reshape(20, 4)
    arr = zarr.create_array(tmp_path / "f.zarr", shape=data.shape, chunks=(10, 2), dtype="f8",
                            compressors=ZstdCodec(level=1))  # chunked along features too
    arr[...] = data
    (tmp_path / "f.zarr" / "c" / "1" / "1").write_bytes(b"")
    x = zarr_reader.from_zarr(arr)
    assert local_chunk_reader(arr) is None
    np.testing.assert_array_equal(x[:10].compute(), data[:10])
    with pytest.raises(StoreError, match=r"Rows 10:20 of the Zarr array '.*f\.zarr'.*damaged"):
        x.compute()


def _zstd_and_raw_stores(tmp_path, rows, d):
    """Two chunks of random float32 rows (which barely compress), stored with zstd and
    uncompressed: ``(X, {"zstd": dask array, "raw": dask array})`` read by dqkm."""
    X = np.random.default_rng(0).standard_normal((2 * rows, d)).astype(np.float32)
    arrays = {}
    for name, compressors in (("zstd", ZstdCodec(level=1)), ("raw", None)):
        path = str(tmp_path / f"{name}.zarr")
        z = zarr.create_array(path, shape=X.shape, chunks=(rows, d), dtype="float32",
                              compressors=compressors)
        z[:] = X
        arrays[name] = zarr_reader.from_zarr(zarr.open_array(path, mode="r"))
    return X, arrays


def _vm_mib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field} in /proc/self/status")


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_a_pass_over_a_compressed_store_counts_the_compressed_chunk(tmp_path):
    """Decoding a stored chunk holds its compressed bytes beside the decoded block (the
    decoders take the whole frame). The pass's memory check counts them, and a KMeans
    pass's measured peak stays within what it counts: for float data that compresses
    poorly that is about twice the block, where the check counted the block once
    (its measured peak was ~1.8x the old count). An uncompressed store's chunk is read
    without a copy and counts once."""
    import dask

    import dqkm
    from dqkm.data.zarr_reader import compressed_read_bytes
    from dqkm.parallel.lloyd import check_lloyd_memory

    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError as e:
        pytest.skip(f"the peak RSS of this process cannot be reset here ({e})")
    # 64 MiB blocks: above glibc's largest mmap threshold (32 MiB), so every such buffer
    # is mapped and unmapped, and the process's peak RSS shows what a read holds
    rows, d = 524_288, 32
    X, arrays = _zstd_and_raw_stores(tmp_path, rows, d)
    assert compressed_read_bytes(arrays["raw"]) == 0
    compressed = compressed_read_bytes(arrays["zstd"])
    assert 0.7 * X.nbytes / 2 < compressed <= X.nbytes / 2 + 4096  # random floats barely shrink
    assert compressed_read_bytes(arrays["zstd"][:rows // 2] + 1) == compressed  # derived arrays
    need = {k: check_lloyd_memory("KMeans (Lloyd) pass", a, 16) for k, a in arrays.items()}
    block = rows * d * 4
    assert need["raw"] < block + 8 * 2**20
    assert need["zstd"] >= block + compressed
    init = X[:16]
    with dask.config.set(scheduler="synchronous"):
        fit = lambda: dqkm.KMeans(16, init=init, n_init=1, max_iter=1,  # noqa: E731
                                  persist=False).fit(arrays["zstd"])
        fit()  # kernels loaded before the measured fit
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        base = _vm_mib("VmRSS")
        fit()
        growth = (_vm_mib("VmHWM") - base) * 2**20
    assert growth > block + 0.5 * compressed  # the compressed bytes are really held
    assert growth <= need["zstd"] + 4 * 2**20, (growth / 2**20, need["zstd"] / 2**20)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("codec", ["zstd", "raw"])
def test_a_pass_read_through_zarr_python_counts_its_read_buffers(tmp_path, codec):
    """zarr-python fetches a stored chunk's bytes and, for an encoded chunk, decodes them
    into a buffer of its own before copying into the block: about one block more than
    the block uncompressed, two compressed (measured beside a 64 MiB block: +64 and
    +125 MiB), where the pass's check counted none of it. The check counts them for
    ``dask.array.from_zarr`` and for dqkm's own zarr-python path, and a KMeans pass's
    measured peak stays within what it counts."""
    import dask.array as da

    import dqkm
    from dqkm.parallel.lloyd import check_lloyd_memory

    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError as e:
        pytest.skip(f"the peak RSS of this process cannot be reset here ({e})")
    rows, d = 524_288, 32  # 64 MiB blocks: mapped and unmapped (above glibc's mmap threshold)
    X = np.random.default_rng(0).standard_normal((2 * rows, d)).astype(np.float32)
    path = str(tmp_path / "X.zarr")
    z = zarr.create_array(path, shape=X.shape, chunks=(rows, d), dtype="float32",
                          compressors=ZstdCodec(level=1) if codec == "zstd" else None)
    z[:] = X
    block, factor = rows * d * 4, 2 if codec == "zstd" else 1
    Xz = da.from_zarr(path)
    with dask.config.set({"dqkm.fast-zarr-read": False}):
        own = zarr_reader.from_zarr(zarr.open_array(path, mode="r"))
    assert zarr_reader.zarr_python_read_bytes(Xz) == factor * block
    assert zarr_reader.zarr_python_read_bytes(own) == factor * block
    assert zarr_reader.zarr_python_read_bytes(Xz[: rows // 2] + 1) == factor * block
    assert zarr_reader.zarr_python_read_bytes(zarr_reader.from_zarr(z)) == 0  # dqkm's reader
    assert zarr_reader.zarr_python_read_bytes(da.from_array(X, chunks=(rows, d))) == 0
    # the array inlined in the tasks: its codecs are not looked up, counted as compressed
    assert zarr_reader.zarr_python_read_bytes(da.from_zarr(path, inline_array=True)) == 2 * block
    need = check_lloyd_memory("KMeans (Lloyd) pass", Xz, 16)
    assert need >= (1 + factor) * block
    assert check_lloyd_memory("KMeans (Lloyd) pass", own, 16) == need
    with dask.config.set(scheduler="synchronous"):
        fit = lambda: dqkm.KMeans(16, init=X[:16], n_init=1, max_iter=1,  # noqa: E731
                                  persist=False).fit(Xz)
        fit()  # kernels and zarr-python's codecs loaded before the measured fit
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        base = _vm_mib("VmRSS")
        fit()
        growth = (_vm_mib("VmHWM") - base) * 2**20
    assert growth > block + 0.75 * factor * block  # the read's buffers are really held
    assert growth <= need + 4 * 2**20, (growth / 2**20, need / 2**20)


def test_se_tile_sizing_counts_the_compressed_chunk(tmp_path, monkeypatch):
    """SparseEmbeddedKMeans sizes its row tiles by the headroom left beside one chunk;
    over a compressed store the chunk's compressed bytes are held beside it while it is
    decoded, before any tile: a budget that holds the chunk and a tile but not the
    chunk and its compressed bytes is refused, naming them; the uncompressed store of
    the same data is not."""
    from dqkm.parallel import memory
    from dqkm.parallel.embedding import MIN_TILE_ROWS, pass_tile_bytes
    from dqkm.parallel.memory import MemoryBudgetError

    rows, d = 4096, 16
    _, arrays = _zstd_and_raw_stores(tmp_path, rows, d)
    chunk = rows * d * 4
    compressed = zarr_reader.compressed_read_bytes(arrays["zstd"])
    per_row = 3 * 8 * d + 2 * 8 * 8 + 64  # pass_tile_bytes's per-row cost at 8 components
    assert MIN_TILE_ROWS * per_row < compressed
    monkeypatch.setattr(memory, "task_budget", lambda: chunk + MIN_TILE_ROWS * per_row)
    assert pass_tile_bytes(arrays["raw"], 8, "a pass") == MIN_TILE_ROWS * per_row
    with pytest.raises(MemoryBudgetError, match=r"a pass: one task needs about .*chunk of X "
                       r".*its compressed chunk while decoding it"):
        pass_tile_bytes(arrays["zstd"], 8, "a pass")
