"""CSR Dask arrays: format checks, the Zarr CSR group on disk, make_sparse_blobs."""

import os

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp

from dqkm.sparse import (as_csr_block, check_sparse, is_csr_store, is_sparse_dask, load_csr,
                         make_sparse_blobs, save_csr, sparse_to_dask)


def _csr(n=300, d=40, density=0.1, dtype=np.float64, seed=0):
    return sp.random(n, d, density=density, format="csr", dtype=dtype,
                     random_state=np.random.default_rng(seed))


def _same(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    assert (sp.csr_matrix(a) != sp.csr_matrix(b)).nnz == 0


# ----------------------------------------------------------------------------- formats
def test_detection_and_coo_conversion():
    X = _csr()
    Xd = sparse_to_dask(X, chunks=70)
    assert is_sparse_dask(Xd) and not is_sparse_dask(da.zeros((3, 3)))
    assert not is_sparse_dask(X)
    assert Xd.chunks == ((70, 70, 70, 70, 20), (40,))
    _same(Xd.compute(), X)
    # COO in memory and COO chunks are converted to CSR
    assert check_sparse(X.tocoo()).format == "csr"
    assert as_csr_block(X.tocoo()).format == "csr"
    assert as_csr_block(X) is X
    assert check_sparse(Xd) is Xd
    # a dense Dask array passes through untouched
    dense = da.ones((4, 2), chunks=2)
    assert check_sparse(dense) is dense


@pytest.mark.parametrize("fmt", ["csc", "lil", "dok", "bsr", "dia"])
def test_other_sparse_formats_are_refused(fmt):
    X = _csr(20, 5, 0.3).asformat(fmt)
    with pytest.raises(TypeError, match=f"CSR format .COO is converted.; got format '{fmt}'"):
        check_sparse(X, "Thing")
    Xd = sparse_to_dask(_csr(20, 5, 0.3), chunks=7).map_blocks(
        lambda b: b.asformat(fmt), meta=sp.csr_matrix((0, 0)).asformat(fmt))
    # dask keeps a sparse _meta for the sliceable formats (CSC, LIL); for the
    # others it records a NumPy meta and the chunk-level check below applies
    assert sp.issparse(Xd._meta) or fmt in ("dok", "bsr", "dia")
    if sp.issparse(Xd._meta):
        with pytest.raises(TypeError, match="X.tocsr()"):
            check_sparse(Xd)
    with pytest.raises(TypeError, match=f"got format '{fmt}'"):
        as_csr_block(X)
    with pytest.raises(TypeError, match="Expected a scipy.sparse matrix; got ndarray"):
        check_sparse(np.ones((2, 2)))


# ----------------------------------------------------------------------------- Zarr
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_zarr_csr_round_trip_on_disk(tmp_path, dtype):
    X = _csr(500, 60, 0.05, dtype, 1)
    keep = np.ones(500)
    keep[100:200] = 0  # a chunk without non-zeros
    X = sp.csr_matrix(sp.diags(keep).astype(dtype) @ X)
    X.eliminate_zeros()
    Xd = sparse_to_dask(X, chunks=100)
    path = tmp_path / "x.zarr"
    assert save_csr(Xd, path, attrs={"note": "hi"}) == path
    assert os.path.isdir(path / "0") and sorted(os.listdir(tmp_path)) == ["x.zarr"]
    assert is_csr_store(path) and not is_csr_store(tmp_path / "nothing.zarr")
    Y = load_csr(path)
    assert is_sparse_dask(Y) and Y.dtype == dtype
    assert Y.chunks == Xd.chunks
    blocks = dask.compute(*Y.to_delayed().ravel())
    assert all(b.format == "csr" for b in blocks) and blocks[1].nnz == 0
    _same(Y.compute(), X)
    # a single chunk is read on its own
    _same(Y.blocks[3].compute(), X[300:400])
    import zarr

    root = zarr.open_group(str(path), mode="r")
    assert root.attrs["note"] == "hi"
    assert root.attrs["dqkm_sparse"]["nnz"] == [b.nnz for b in blocks]
    assert root["2/indices"].dtype == np.int32 and root["2/indptr"].dtype == np.int64


def test_in_memory_sparse_and_coo_are_saved(tmp_path):
    X = _csr(50, 8, 0.3)
    save_csr(X.tocoo(), tmp_path / "a.zarr")
    _same(load_csr(tmp_path / "a.zarr").compute(), X)


def test_failed_write_leaves_nothing_and_overwrite_rules(tmp_path):
    X = sparse_to_dask(_csr(100, 10, 0.2), chunks=30)

    def boom(b, block_info=None):
        if block_info[0]["chunk-location"][0] == 2:
            raise RuntimeError("disk full")
        return b

    bad = X.map_blocks(boom, meta=sp.csr_matrix((0, 0)))
    with pytest.raises(RuntimeError, match="disk full"):
        save_csr(bad, tmp_path / "x.zarr")
    assert os.listdir(tmp_path) == []
    save_csr(X, tmp_path / "x.zarr")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        save_csr(X, tmp_path / "x.zarr")
    # a failed overwrite keeps the old store
    with pytest.raises(RuntimeError):
        save_csr(bad, tmp_path / "x.zarr", overwrite=True)
    _same(load_csr(tmp_path / "x.zarr").compute(), X.compute())
    X2 = sparse_to_dask(_csr(40, 10, 0.2, seed=5), chunks=15)
    save_csr(X2, tmp_path / "x.zarr", overwrite=True)
    _same(load_csr(tmp_path / "x.zarr").compute(), X2.compute())
    assert os.listdir(tmp_path) == ["x.zarr"]


def test_load_csr_errors(tmp_path):
    import zarr

    with pytest.raises(FileNotFoundError, match="No Zarr CSR group"):
        load_csr(tmp_path / "missing.zarr")
    zarr.open_group(str(tmp_path / "g.zarr"), mode="w").create_array("X", data=np.ones(3))
    with pytest.raises(ValueError, match="not a dqkm CSR group"):
        load_csr(tmp_path / "g.zarr")


# ----------------------------------------------------------------------------- generator
def test_make_sparse_blobs_deterministic_and_chunk_by_chunk():
    X, y = make_sparse_blobs(1200, 800, density=0.02, centers=3, chunks=500, random_state=7)
    X2, y2 = make_sparse_blobs(1200, 800, density=0.02, centers=3, chunks=500, random_state=7)
    X3, _ = make_sparse_blobs(1200, 800, density=0.02, centers=3, chunks=500, random_state=8)
    assert is_sparse_dask(X) and X.chunks == ((500, 500, 200), (800,)) and X.dtype == np.float32
    A = X.compute()
    _same(A, X2.compute())
    np.testing.assert_array_equal(y.compute(), y2.compute())
    assert (A != X3.compute()).nnz > 0
    # every chunk is a graph of its own (no dependency on other chunks)
    graph = dict(X.__dask_graph__())
    assert len(graph) == X.numblocks[0]
    _same(X.blocks[1].compute(), A[500:1000])
    # tf-idf-like: non-negative, unit rows, about density·d non-zeros per row
    assert A.min() >= 0
    np.testing.assert_allclose(sp.linalg.norm(A, axis=1), 1.0, rtol=1e-5)
    assert 8 < A.nnz / A.shape[0] <= 16
    labels = y.compute()
    assert labels.dtype == np.int32 and set(np.unique(labels)) == {0, 1, 2}
    # rows of a cluster share its vocabulary: within-cluster similarity is higher
    A64 = A.astype(np.float64)
    sim = (A64 @ A64.T).toarray()
    same = labels[:, None] == labels[None, :]
    np.fill_diagonal(same, False)
    diff = labels[:, None] != labels[None, :]
    assert sim[same].mean() > 5 * sim[diff].mean()


def test_make_sparse_blobs_to_zarr(tmp_path):
    X, y = make_sparse_blobs(300, 100, density=0.05, centers=2, chunks=128, random_state=1,
                             dtype=np.float64, path=tmp_path / "b.zarr")
    ref, _ = make_sparse_blobs(300, 100, density=0.05, centers=2, chunks=128, random_state=1,
                               dtype=np.float64)
    assert X.name.startswith("_read_block")  # reads the store
    _same(X.compute(), ref.compute())


@pytest.mark.parametrize("kw, match", [
    ({"n_samples": 0}, "'n_samples' parameter of make_sparse_blobs must be an int"),
    ({"density": 0.0},
     r"'density' parameter of make_sparse_blobs must be a float in the range \(0"),
    ({"density": 1.5}, "Got 1.5 instead"),
    ({"signal": -0.1}, "'signal'"),
    ({"centers": 0}, "'centers'"),
    ({"vocabulary_size": 1000}, r"range \[1, n_features=100\]"),
    ({"dtype": np.int32}, "'dtype' parameter of make_sparse_blobs must be float32 or float64"),
])
def test_make_sparse_blobs_bad_parameters(kw, match):
    args = dict(n_samples=10, n_features=100, density=0.1, centers=2)
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        make_sparse_blobs(**args)


# ----------------------------------------------------------------------------- dqkm.io
def test_io_reads_and_writes_csr(tmp_path):
    from dqkm import datasets, io

    assert datasets.make_sparse_blobs is make_sparse_blobs
    X = _csr(90, 12, 0.2, np.float32, 3)
    Xd = io.as_dask_array(X, chunks=40)
    assert is_sparse_dask(Xd) and Xd.chunks[0] == (40, 40, 10) and Xd.dtype == np.float32
    assert is_sparse_dask(io.as_dask_array(X.tocoo()))
    assert io.as_dask_array(Xd) is Xd
    with pytest.raises(TypeError, match="got format 'csc'"):
        io.as_dask_array(X.tocsc())
    io.save_array(Xd, tmp_path / "x.zarr", attrs={"a": 1})
    assert is_csr_store(tmp_path / "x.zarr")
    for Y in (io.load_array(tmp_path / "x.zarr"), io.as_dask_array(tmp_path / "x.zarr"),
              io.as_dask_array(str(tmp_path / "x.zarr"))):
        assert is_sparse_dask(Y) and Y.chunks == Xd.chunks
        _same(Y.compute(), X)
    with pytest.raises(ValueError, match="chunks cannot be changed"):
        io.load_array(tmp_path / "x.zarr", chunks=10)
    # in-memory sparse goes the same way; integer data becomes float64
    io.save_array(sp.csr_matrix(np.eye(5, dtype=np.int64)), tmp_path / "i.zarr")
    Z = io.as_dask_array(tmp_path / "i.zarr")
    assert is_sparse_dask(Z) and Z.dtype == np.float64
    np.testing.assert_array_equal(Z.compute().toarray(), np.eye(5))
    # dense arrays still go to plain Zarr arrays
    io.save_array(np.ones((4, 3)), tmp_path / "d.zarr")
    assert not is_csr_store(tmp_path / "d.zarr")
    assert not is_sparse_dask(io.load_array(tmp_path / "d.zarr"))
