"""Turning in-memory, sparse or Zarr-backed input into row-chunked Dask arrays.

* :func:`to_dask` — NumPy, Dask or a zarr.Array → a Dask array chunked along rows;
  with an active distributed Client, a NumPy array is scattered to the workers
  once (never embedded in the graph of every pass).
* :func:`as_dask_array` — any input dqkm reads (also a file path or URL in any
  format of :mod:`dqkm.data.inputs`, a Dask DataFrame, an xarray object, and
  sparse data) → a 2-D float Dask array chunked along rows.

The chunk arithmetic lives in :mod:`dqkm.data.chunks` and the stores in
:mod:`dqkm.data.stores`; the names used from there are re-exported here.
"""

from __future__ import annotations

import os
import uuid

import dask.array as da
import numpy as np
import scipy.sparse as sp
from dask.base import tokenize

from ..data.chunks import SMALL_RECHUNK_BYTES, auto_row_chunks, check_known_chunks
from ..data.csr import check_sparse, sparse_to_dask
from ..data.execute import active_client
from ..data.inputs import is_dask_frame, is_xarray, lazy_input, load_array
from ..data.zarr_reader import from_zarr
from .engine import array_from_blocks

__all__ = ["auto_row_chunks", "check_known_chunks", "to_dask", "as_dask_array",
           "SMALL_RECHUNK_BYTES", "SCATTER_BYTES"]

#: NumPy input above this size is scattered to the workers of an active
#: distributed Client (smaller input rides in the graph, which costs less).
SCATTER_BYTES = 1 << 20


def _row_views(X: np.ndarray, chunks) -> da.Array:
    """A Dask array whose blocks are views of the rows of ``X``: no copy, no hash.

    ``da.from_array`` copies a NumPy array whole and hashes it for the graph's
    name (together 0.38 s of a 0.75 s ``QKMeans.predict`` on 100k × 2000
    float32, profiled here); for an array that is consumed within the call that
    made it, neither is needed.
    """
    rows = da.core.normalize_chunks((chunks, -1), X.shape, dtype=X.dtype)
    # Unique per call, not dask.base.tokenize: a deterministic name needs the hash of
    # the data, the very cost these views avoid; and the memory's address may hold other
    # values later, so it cannot name the data either.
    name = f"dqkm-rows-{uuid.uuid4().hex}"
    bounds = np.concatenate([[0], np.cumsum(rows[0])])
    views = [X[bounds[i]:bounds[i + 1]] for i in range(len(rows[0]))]
    return array_from_blocks(views, rows, X.dtype, name=name, meta=X[:0])


def _scattered_rows(X: np.ndarray, chunks, client) -> da.Array:
    """A Dask array whose blocks are row ranges of ``X`` scattered to the workers.

    One ``scatter`` sends every block once; each pass then refers to the
    blocks by key instead of carrying them in its graph (which distributed
    warns about as a "large graph" and sends again with every compute).
    The blocks are released when the returned array is no longer referenced.
    """
    rows = da.core.normalize_chunks((chunks, -1), X.shape, dtype=X.dtype)
    bounds = np.concatenate([[0], np.cumsum(rows[0])])
    futures = client.scatter([X[bounds[i]:bounds[i + 1]] for i in range(len(rows[0]))],
                             hash=False)
    name = f"dqkm-scattered-{tokenize([f.key for f in futures])}"  # hash=False: unique keys
    return array_from_blocks(futures, rows, X.dtype, name=name, meta=X[:0])


def to_dask(X, chunks=None, *, copy=True) -> da.Array:
    """A Dask array chunked along rows only, from NumPy, Dask or a zarr.Array.

    ``chunks`` is the number of rows per chunk (int) or a tuple of row chunk
    sizes; by default ~64 MB chunks.  A Dask array chunked along features is
    rechunked when it is at most 256 MB, otherwise a ``ValueError`` shows the
    ``rechunk`` call to run.  A Dask array with unknown chunk sizes (NaN, after
    boolean masking) raises :class:`~dqkm.exceptions.DataError` (see
    :func:`check_known_chunks`).  A zarr.Array is read as by
    :func:`dqkm.data.zarr_reader.from_zarr` (absolute local paths).  With
    ``copy=False`` a 2-D NumPy array's blocks are views of it (for callers
    that finish with the array before returning: the caller must not change
    X while the result is in use).  With an active distributed Client, a 2-D
    NumPy array above :data:`SCATTER_BYTES` is scattered to the workers once
    instead (see :func:`_scattered_rows`).
    """
    if isinstance(X, da.Array):
        check_known_chunks(X)
        if X.ndim == 2 and X.numblocks[1] > 1:
            if X.nbytes > SMALL_RECHUNK_BYTES:
                raise ValueError(
                    f"X is chunked along features (chunks {X.chunks[1]} on axis 1); dqkm "
                    "needs every chunk to hold all features. Rechunk it once and save it: "
                    "X = X.rechunk({1: -1}) (then e.g. dqkm.io.save_array(X, path)).")
            X = X.rechunk({1: -1})
        if chunks is not None:
            X = X.rechunk({0: chunks})
        return X
    if type(X).__module__.startswith("zarr"):
        return to_dask(from_zarr(X), chunks=chunks)
    X = np.asarray(X)
    if X.ndim != 2:
        return da.from_array(X, chunks=X.shape or ())  # caller's validation reports ndim
    if chunks is None:
        chunks = auto_row_chunks(X.shape[0], X.shape[1], X.dtype.itemsize)
    client = active_client() if X.nbytes > SCATTER_BYTES else None
    if client is not None:
        return _scattered_rows(X, chunks, client)
    if not copy and type(X) is np.ndarray:
        return _row_views(X, chunks)
    return da.from_array(X, chunks=(chunks, -1))


def as_dask_array(X, chunks=None, *, component=None, storage_options=None, format=None,
                  columns=None) -> da.Array:
    """X as a 2-D float Dask array chunked along rows only.

    Parameters
    ----------
    X : array-like, scipy.sparse matrix, Dask array or DataFrame, xarray object, zarr.Array, or str/PathLike
        A path (local or fsspec URL such as ``s3://bucket/data.zarr``) to a Zarr
        array, to a group (its array ``component``, default ``"X"``) or to a
        CSR group (:mod:`dqkm.sparse`), or to a Parquet, CSV, HDF5 or NetCDF
        file (see :func:`dqkm.io.load_array`; ``format`` and
        ``columns`` are passed to it).  Sparse input (CSR, COO) stays sparse:
        a Dask array of CSR chunks.  A Dask DataFrame (numeric columns) and a
        Dask-backed xarray object stay lazy.
    chunks : int or tuple, optional
        Rows per chunk.  Default: the store's row chunks, or ~64 MB chunks
        for in-memory data.

    Returns
    -------
    dask.array.Array of shape (n_samples, n_features), float32 or float64
        float32/float64 input keeps its dtype; other real dtypes become float64.

    Raises
    ------
    ValueError
        Not 2-D, or a large Dask array chunked along features (the message
        shows the ``rechunk`` call).
    TypeError
        Non-numeric data.

    Examples
    --------
    >>> import numpy as np
    >>> from dqkm.io import as_dask_array
    >>> X = as_dask_array(np.zeros((10, 3), np.float32), chunks=4)
    >>> X.chunks
    ((4, 4, 2), (3,))
    """
    if isinstance(X, (str, os.PathLike)):
        Xd = load_array(X, component, chunks=chunks, storage_options=storage_options,
                        format=format, columns=columns)
    elif is_dask_frame(X) or is_xarray(X):
        Xd = to_dask(lazy_input(X)[0], chunks=chunks)
    elif sp.issparse(X):
        Xd = sparse_to_dask(X, chunks)
    elif isinstance(X, da.Array) and sp.issparse(X._meta):
        Xd = check_sparse(X, "as_dask_array")
        Xd = Xd if chunks is None else Xd.rechunk({0: chunks})
    elif type(X).__module__.startswith("zarr"):
        Xd = from_zarr(X, chunks)
    else:
        Xd = to_dask(X, chunks=chunks)
    if Xd.ndim != 2:
        raise ValueError(f"Expected a 2-D array (n_samples, n_features); got {Xd.ndim}-D with "
                         f"shape {Xd.shape}. Reshape your data, e.g. X.reshape(-1, 1).")
    if Xd.dtype.kind not in "fiub":
        raise TypeError(f"X must hold real numbers; got dtype {Xd.dtype}.")
    if Xd.dtype not in (np.float32, np.float64):
        Xd = Xd.astype(np.float64)
    return to_dask(Xd)
