"""Sparse (CSR) data as Dask arrays: checks, Zarr CSR groups, sparse blobs.

A sparse data set is a Dask array chunked along rows whose chunks are
``scipy.sparse`` CSR matrices (``X._meta`` is a CSR matrix).  Where an
algorithm supports them (SE / RP K-means, K-means assignment) tf-idf-like
data stays sparse from the store to the kernels.

* :func:`is_sparse_dask`, :func:`check_sparse` — detect CSR-chunked arrays,
  convert COO (in memory or chunk by chunk), reject other formats with an
  error that says how to convert.
* :func:`sparse_to_dask` — an in-memory sparse matrix → a Dask array of CSR
  row chunks.
* :func:`save_csr` / :func:`load_csr` — a Zarr v3 group on disk (or an fsspec
  URL) holding one subgroup per row chunk with the arrays ``data``,
  ``indices``, ``indptr``; written under a temporary name and renamed into
  place; read back lazily, one chunk per task.

The generator of sparse data, :func:`~dqkm.data.generators.make_sparse_blobs`,
lives with the other generators.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import scipy.sparse as sp
import zarr

from ..exceptions import StoreError
from ..kernels.lloyd_sparse import as_csr
from .atomic import AtomicTarget
from .chunks import auto_sparse_rows
from .execute import compute_settled
from .formats import CSR_FORMAT_VERSION, FORMATS
from .paths import is_url, local_path
from .zarr_reader import worker_description

__all__ = ["is_sparse_dask", "check_sparse", "as_csr_block", "sparse_to_dask", "save_csr",
           "load_csr", "is_csr_store", "CSR_FORMAT_VERSION"]

_ATTR = "dqkm_sparse"


# ----------------------------------------------------------------------------- detection
def is_sparse_dask(X) -> bool:
    """True for a Dask array whose chunks are ``scipy.sparse`` matrices.

    Parameters
    ----------
    X : object
        Anything; only a Dask array whose ``_meta`` is sparse gives True.

    Returns
    -------
    bool
        Whether ``X`` is a Dask array of sparse chunks.

    Examples
    --------
    >>> import dask.array as da
    >>> import scipy.sparse as sp
    >>> X = sparse_to_dask(sp.random(100, 20, density=0.1, format="csr", random_state=0), chunks=50)
    >>> is_sparse_dask(X), is_sparse_dask(da.zeros((4, 2)))
    (True, False)
    """
    return isinstance(X, da.Array) and sp.issparse(getattr(X, "_meta", None))


def csr_meta(dtype):
    """An empty CSR matrix of ``dtype``: the ``meta`` of a Dask array of CSR chunks."""
    return sp.csr_matrix((0, 0), dtype=dtype)


def as_csr_block(block, owner="dqkm"):
    """One computed chunk as CSR: CSR as is, COO converted, other sparse formats refused.

    Dense chunks are returned unchanged.

    Parameters
    ----------
    block : ndarray or scipy.sparse matrix
        One computed chunk.
    owner : str, default="dqkm"
        Named in the ``TypeError`` raised for another sparse format.

    Returns
    -------
    scipy.sparse.csr_matrix or ndarray
        The chunk in CSR format, or the dense chunk as given.

    Examples
    --------
    >>> import numpy as np
    >>> import scipy.sparse as sp
    >>> as_csr_block(sp.coo_matrix(np.eye(2))).format
    'csr'
    """
    return as_csr(block, owner)


def _format_error(fmt, owner):
    return TypeError(f"{owner} accepts scipy.sparse data in CSR format (COO is converted); got "
                     f"format {fmt!r}. Convert it with X.tocsr() (for a Dask array: "
                     "X.map_blocks(lambda b: b.tocsr())).")


def check_sparse(X, owner="dqkm"):
    """X (in-memory sparse or CSR/COO-chunked Dask) with CSR chunks, or a TypeError.

    In-memory input comes back as a ``scipy.sparse.csr_matrix``; COO is
    converted, any other format (CSC, LIL, DOK, BSR, DIA) is refused — its
    conversion costs a full copy, so dqkm asks for it explicitly.  A Dask
    array with another sparse chunk type (its ``_meta``) is refused the same
    way.  (Dask cannot hold a COO ``_meta``: it records a NumPy one, so COO
    chunks are only seen when a chunk is computed; :func:`as_csr_block`
    converts them there.)

    Parameters
    ----------
    X : scipy.sparse matrix or array, or Dask array of sparse chunks
        The data to check.
    owner : str, default="dqkm"
        Named in the error message (the estimator or function that was given ``X``).

    Returns
    -------
    scipy.sparse.csr_matrix or dask.array.Array
        In-memory input as CSR; a Dask array as given.

    Raises
    ------
    TypeError
        ``X`` holds another sparse format; the message says how to convert it.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> check_sparse(sp.random(4, 3, density=0.5, format="coo", random_state=0)).format
    'csr'
    >>> check_sparse(sp.random(4, 3, density=0.5, format="csc", random_state=0))
    Traceback (most recent call last):
    ...
    TypeError: dqkm accepts scipy.sparse data in CSR format (COO is converted); got format 'csc'...
    """
    if isinstance(X, da.Array):
        meta = X._meta
        if not sp.issparse(meta) or meta.format == "csr":
            return X
        raise _format_error(meta.format, owner)
    if not sp.issparse(X):
        raise TypeError(f"Expected a scipy.sparse matrix; got {type(X).__name__}.")
    if X.format not in ("csr", "coo"):
        raise _format_error(X.format, owner)
    return sp.csr_matrix(X)


def sparse_to_dask(X, chunks=None) -> da.Array:
    """An in-memory sparse matrix as a Dask array of CSR row chunks.

    Parameters
    ----------
    X : scipy.sparse matrix or array (CSR or COO) of shape (n_samples, n_features)
        The data (not copied into the graph more than once).
    chunks : int or tuple of ints, optional
        Rows per chunk; default about 64 MB of non-zeros per chunk.

    Returns
    -------
    dask.array.Array of shape (n_samples, n_features) with CSR chunks
        Chunked along rows only.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> X = sparse_to_dask(sp.random(100, 20, density=0.1, format="csr", random_state=0), chunks=50)
    >>> X.numblocks, X.blocks[0].compute().format
    ((2, 1), 'csr')
    """
    X = check_sparse(X, "sparse_to_dask")
    if chunks is None:
        chunks = auto_sparse_rows(X.shape[0], X.nnz, X.dtype.itemsize)
    return da.from_array(X, chunks=(chunks, -1), asarray=False, fancy=False,
                         meta=csr_meta(X.dtype))


# ----------------------------------------------------------------------------- Zarr CSR
def _write_block(block, path, storage_options, block_id=None):
    """Write one row chunk as the subgroup ``str(i)``; return ``[[i, rows, nnz]]``."""
    index = block_id[0]
    block = sp.csr_matrix(block)
    block.sum_duplicates()
    root = zarr.open_group(path, mode="r+", storage_options=storage_options)
    g = root.create_group(str(index))
    n_features = block.shape[1]
    ind_dtype = np.int32 if n_features < 2**31 else np.int64
    g.create_array("data", data=np.ascontiguousarray(block.data))
    g.create_array("indices", data=block.indices.astype(ind_dtype))
    g.create_array("indptr", data=block.indptr.astype(np.int64))
    return np.array([[index, block.shape[0], block.nnz]], dtype=np.int64)


def save_csr(X, path, *, overwrite=False, attrs=None, storage_options=None):
    """Write sparse X as a Zarr v3 CSR group, one subgroup per row chunk (atomic).

    The group at ``path`` holds subgroups ``"0"``, ``"1"``, … (one per Dask
    row chunk, in order), each with the 1-D arrays ``data`` (X's dtype),
    ``indices`` (int32, or int64 beyond 2³¹ features) and ``indptr`` (int64),
    and the attribute ``dqkm_sparse = {format: "csr", version, shape, dtype,
    row_chunks, nnz}``.  Chunks are written in parallel, under a temporary
    name beside ``path`` that is renamed into place only when all succeeded.

    Parameters
    ----------
    X : scipy.sparse matrix or CSR/COO-chunked Dask array, shape (n_samples, n_features)
    path : str or PathLike (local) or fsspec URL
        Where the group is written.
    overwrite : bool, default=False
        Replace an existing Zarr store or dqkm model at ``path`` (anything
        else there is refused); otherwise an existing path is an error.
    attrs : dict, optional
        Extra JSON attributes of the group.
    storage_options : dict, optional
        Passed to fsspec for a URL ``path``.

    Returns
    -------
    path
        ``path`` as given, for :func:`load_csr`.

    Examples
    --------
    >>> import os, shutil, tempfile
    >>> import scipy.sparse as sp
    >>> X = sparse_to_dask(sp.random(100, 20, density=0.1, format="csr", random_state=0), chunks=50)
    >>> tmp = tempfile.mkdtemp()
    >>> path = save_csr(X, os.path.join(tmp, "x.zarr"))
    >>> is_csr_store(path), load_csr(path).shape
    (True, (100, 20))
    >>> shutil.rmtree(tmp)
    """
    Xd = check_sparse(X, "save_csr")
    if not isinstance(Xd, da.Array):
        Xd = sparse_to_dask(Xd)
    if Xd.ndim != 2:
        raise ValueError(f"save_csr needs a 2-D array; got shape {Xd.shape}.")
    if Xd.numblocks[1] != 1:
        Xd = Xd.rechunk({1: -1})
    with AtomicTarget(path, overwrite) as t:
        so = storage_options if t.url else None
        root = zarr.open_group(t.tmp_url, mode="w", zarr_format=3, storage_options=so)
        d = da.map_blocks(_write_block, Xd, t.tmp_url, so,
                          chunks=((1,) * Xd.numblocks[0], (3,)), dtype=np.int64,
                          meta=np.empty((0, 0), np.int64), token="dqkm-save-csr")
        (written,) = compute_settled(d)
        written = written[np.argsort(written[:, 0])]
        meta = {"format": FORMATS["csr"].name, "version": CSR_FORMAT_VERSION,
                "shape": [int(s) for s in Xd.shape], "dtype": str(Xd.dtype),
                "row_chunks": [int(w) for w in written[:, 1]],
                "nnz": [int(w) for w in written[:, 2]]}
        root.attrs.update({**(attrs or {}), _ATTR: meta})
    return path


def _open_root(path, storage_options=None):
    if is_url(path):
        return zarr.open_group(path, mode="r", storage_options=storage_options)
    return zarr.open_group(str(path), mode="r")


def is_csr_store(path, storage_options=None) -> bool:
    """True if ``path`` is a Zarr group written by :func:`save_csr`.

    Parameters
    ----------
    path : str or PathLike (local) or fsspec URL
        The location to look at.
    storage_options : dict, optional
        Passed to fsspec for a URL ``path``.

    Returns
    -------
    bool
        False for a missing path, a dense Zarr array or any other group.

    Examples
    --------
    >>> import tempfile
    >>> is_csr_store(tempfile.gettempdir())
    False
    """
    try:
        root = _open_root(path, storage_options)
    except (FileNotFoundError, zarr.errors.GroupNotFoundError, ValueError, TypeError):
        return False
    return _ATTR in root.attrs


def _read_block(block_info=None, *, path, storage_options, shape_cols, out_dtype):
    i = block_info[None]["chunk-location"][0]
    rows = block_info[None]["chunk-shape"][0]
    try:
        g = _open_root(path, storage_options)[str(i)]
        indptr = g["indptr"][...]
        data, indices = g["data"][...], g["indices"][...]
    except (FileNotFoundError, KeyError) as e:  # zarr's node-not-found errors included
        raise StoreError(
            f"Chunk {i} of the CSR group {path!r} is not visible on {worker_description()} "
            f"({type(e).__name__}: {e}). Every worker must see the store at the same path: "
            "put it on a filesystem all workers mount there, or use a URL (e.g. s3://...); "
            "if it was removed or moved after the computation was set up, open it again.") \
            from e
    if indptr.shape != (rows + 1,) or data.shape != indices.shape or \
            int(indptr[-1]) != data.size:
        raise StoreError(
            f"Chunk {i} of the CSR group {path!r} is damaged: expected indptr of {rows + 1} "
            f"values ending at the number of non-zeros; got indptr of shape {indptr.shape} "
            f"(last {indptr[-1] if indptr.size else None}), data {data.shape}, indices "
            f"{indices.shape}. Write the group again with dqkm.sparse.save_csr.")
    return sp.csr_matrix((data.astype(out_dtype, copy=False), indices, indptr),
                         shape=(rows, shape_cols))


def load_csr(path, *, storage_options=None) -> da.Array:
    """A Zarr CSR group (see :func:`save_csr`) as a lazy Dask array of CSR chunks.

    Nothing but the group's attributes is read now; each chunk is read by
    its own task, which checks that its arrays agree with each other and
    with the chunk's number of rows.  A local ``path`` enters the graph as an absolute path.

    Parameters
    ----------
    path : str or PathLike (local) or fsspec URL
        A group written by :func:`save_csr`.
    storage_options : dict, optional
        Passed to fsspec for a URL ``path``.

    Returns
    -------
    dask.array.Array of shape (n_samples, n_features) with CSR chunks
        One chunk per subgroup, in the stored dtype.

    Raises
    ------
    FileNotFoundError
        No store at ``path``.
    ValueError
        The store is not a dqkm CSR group, or has an unknown format version.
    StoreError
        (when computed) A task cannot see the group, or a chunk is damaged.

    Examples
    --------
    >>> import os, shutil, tempfile
    >>> import scipy.sparse as sp
    >>> X = sparse_to_dask(sp.random(100, 20, density=0.1, format="csr", random_state=0), chunks=50)
    >>> tmp = tempfile.mkdtemp()
    >>> Y = load_csr(save_csr(X, os.path.join(tmp, "x.zarr")))
    >>> Y.numblocks, (Y.blocks[1].compute() != X.blocks[1].compute()).nnz
    ((2, 1), 0)
    >>> shutil.rmtree(tmp)
    """
    try:
        root = _open_root(path, storage_options)
    except (FileNotFoundError, zarr.errors.GroupNotFoundError) as e:
        raise FileNotFoundError(f"No Zarr CSR group at {str(path)!r}.") from e
    meta = root.attrs.get(_ATTR)
    if meta is None or meta.get("format") != FORMATS["csr"].name:
        raise ValueError(f"{str(path)!r} is not a dqkm CSR group (no {_ATTR!r} attribute with "
                         "format 'csr'); write one with dqkm.sparse.save_csr.")
    if meta.get("version") != CSR_FORMAT_VERSION:
        raise ValueError(f"{str(path)!r} has CSR format version {meta.get('version')}; this "
                         f"dqkm reads version {CSR_FORMAT_VERSION}.")
    n, d = meta["shape"]
    dtype = np.dtype(meta["dtype"])
    rows = tuple(int(r) for r in meta["row_chunks"])
    if sum(rows) != n:
        raise ValueError(f"{str(path)!r}: row chunks {rows} do not sum to n_samples={n}.")
    return da.map_blocks(_read_block, chunks=(rows, (d,)), dtype=dtype, meta=csr_meta(dtype),
                         path=local_path(path), storage_options=storage_options, shape_cols=d,
                         out_dtype=dtype)
