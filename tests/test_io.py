import os

import dask.array as da
import numpy as np
import pytest
import zarr

from dqkm import io


@pytest.fixture
def X():
    return np.random.default_rng(0).standard_normal((1000, 7)).astype(np.float32)


def test_numpy_dask_zarr_inputs(tmp_path, X):
    a = io.as_dask_array(X, chunks=300)
    assert a.chunks == ((300, 300, 300, 100), (7,))
    io.save_array(a, tmp_path / "a.zarr")
    z = zarr.open(str(tmp_path / "a.zarr"), mode="r")
    assert z.metadata.zarr_format == 3 and z.chunks == (300, 7)  # chunk-aligned
    for src in [tmp_path / "a.zarr", str(tmp_path / "a.zarr"), f"file://{tmp_path}/a.zarr", z]:
        b = io.as_dask_array(src)
        assert b.chunks[0] == (300, 300, 300, 100)
        np.testing.assert_array_equal(b.compute(), X)


def test_group_component_and_dtypes(tmp_path, X):
    io.save_arrays({"X": X, "y": np.arange(1000, dtype=np.int32)}, tmp_path / "g.zarr")
    np.testing.assert_array_equal(io.as_dask_array(tmp_path / "g.zarr").compute(), X)
    y = io.load_array(tmp_path / "g.zarr", "y")
    assert y.dtype == np.int32 and y[5].compute() == 5
    assert io.as_dask_array(np.arange(12).reshape(4, 3)).dtype == np.float64
    io.save_arrays({"A": X, "B": X}, tmp_path / "two.zarr")
    with pytest.raises(ValueError, match="pass component=<name>"):
        io.as_dask_array(tmp_path / "two.zarr")


def test_feature_chunked_store_is_read_by_rows(tmp_path, X):
    z = zarr.create_array(str(tmp_path / "f.zarr"), shape=X.shape, dtype=X.dtype, chunks=(250, 3))
    z[...] = X
    b = io.as_dask_array(tmp_path / "f.zarr")
    assert b.chunks == ((250,) * 4, (7,))
    np.testing.assert_array_equal(b.compute(), X)


def test_feature_chunked_dask_array():
    small = da.ones((100, 6), chunks=(50, 2))
    assert io.as_dask_array(small).chunks[1] == (6,)
    big = da.zeros((300_000, 400), chunks=(50_000, 100))
    with pytest.raises(ValueError, match=r"X.rechunk\(\{1: -1\}\)"):
        io.as_dask_array(big)


def test_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match="Expected a 2-D array"):
        io.as_dask_array(np.ones(5))
    with pytest.raises(TypeError, match="real numbers"):
        io.as_dask_array(np.array([["a"], ["b"]]))
    with pytest.raises(FileNotFoundError, match="No Zarr store"):
        io.as_dask_array(tmp_path / "missing.zarr")


def test_failed_write_leaves_nothing(tmp_path, X):
    def boom(block):
        if block[0, 0] > -100:  # every block fails
            raise RuntimeError("disk full")
        return block

    bad = da.from_array(X, chunks=(200, -1)).map_blocks(boom, dtype=X.dtype)
    with pytest.raises(RuntimeError, match="disk full"):
        io.save_array(bad, tmp_path / "out.zarr")
    assert os.listdir(tmp_path) == []
    # an existing store is kept intact by a failed overwrite
    io.save_array(X, tmp_path / "out.zarr")
    with pytest.raises(RuntimeError, match="disk full"):
        io.save_array(bad, tmp_path / "out.zarr", overwrite=True)
    assert os.listdir(tmp_path) == ["out.zarr"]
    np.testing.assert_array_equal(io.as_dask_array(tmp_path / "out.zarr").compute(), X)


def test_existing_target(tmp_path, X):
    io.save_array(X, tmp_path / "o.zarr")
    with pytest.raises(FileExistsError, match="already exists; pass overwrite=True"):
        io.save_array(X, tmp_path / "o.zarr")
    io.save_array(X[:10], tmp_path / "o.zarr", overwrite=True)
    assert io.as_dask_array(tmp_path / "o.zarr").shape == (10, 7)


def test_irregular_chunks_are_made_zarr_compatible(tmp_path, X):
    a = da.from_array(X, chunks=((100, 400, 500), (7,)))
    io.save_array(a, tmp_path / "i.zarr")
    np.testing.assert_array_equal(io.as_dask_array(tmp_path / "i.zarr").compute(), X)


def test_model_file_errors(tmp_path, X):
    io.save_array(X, tmp_path / "data.zarr")
    with pytest.raises(ValueError, match="not a dqkm model"):
        io.load(tmp_path / "data.zarr")
    with pytest.raises(FileNotFoundError):
        io.load(tmp_path / "nothing.zarr")


def test_writes_on_a_local_cluster(dist_client, tmp_path, X):
    io.save_arrays({"X": X, "y": np.arange(len(X))}, tmp_path / "g.zarr")
    io.save_array(da.from_array(X, chunks=(300, -1)), tmp_path / "a.zarr")
    np.testing.assert_array_equal(io.as_dask_array(tmp_path / "g.zarr").compute(), X)
    np.testing.assert_array_equal(io.as_dask_array(tmp_path / "a.zarr").compute(), X)


def test_compressors_option(tmp_path, X):
    io.save_array(X, tmp_path / "raw.zarr", compressors=None)
    io.save_array(X, tmp_path / "zstd.zarr")
    assert zarr.open(str(tmp_path / "raw.zarr")).compressors == ()
    assert len(zarr.open(str(tmp_path / "zstd.zarr")).compressors) == 1
    np.testing.assert_array_equal(io.as_dask_array(tmp_path / "raw.zarr").compute(), X)
