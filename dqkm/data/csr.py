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
* :func:`make_sparse_blobs` — tf-idf-like clustered data generated chunk by
  chunk from one ``SeedSequence``.
"""

from __future__ import annotations

import math
import numbers
import os

import dask.array as da
import numpy as np
import scipy.sparse as sp
import zarr

from .exceptions import StoreError
from .kernels.lloyd_sparse import as_csr
from .parallel.engine import compute_settled

__all__ = ["is_sparse_dask", "check_sparse", "as_csr_block", "sparse_to_dask", "save_csr",
           "load_csr", "is_csr_store", "make_sparse_blobs", "CSR_FORMAT_VERSION"]

CSR_FORMAT_VERSION = 1
_ATTR = "dqkm_sparse"
_TARGET_CHUNK_BYTES = 64 * 2**20


# ----------------------------------------------------------------------------- detection
def is_sparse_dask(X) -> bool:
    """True for a Dask array whose chunks are ``scipy.sparse`` matrices."""
    return isinstance(X, da.Array) and sp.issparse(getattr(X, "_meta", None))


def _csr_meta(dtype):
    return sp.csr_matrix((0, 0), dtype=dtype)


def as_csr_block(block, owner="dqkm"):
    """One computed chunk as CSR: CSR as is, COO converted, other sparse formats refused.

    Dense chunks are returned unchanged.
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


def _auto_sparse_rows(n_samples, nnz, itemsize):
    """About 64 MB of non-zeros per chunk; ≥ 4 chunks when each keeps ≥ 4096 rows."""
    per_row = max(1.0, nnz / max(1, n_samples)) * (itemsize + 4)
    rows = int(_TARGET_CHUNK_BYTES // per_row)
    quarter = math.ceil(n_samples / 4)
    if quarter >= 4096:
        rows = min(rows, quarter)
    return int(max(1, min(rows, n_samples)))


def sparse_to_dask(X, chunks=None) -> da.Array:
    """An in-memory sparse matrix as a Dask array of CSR row chunks.

    Parameters
    ----------
    X : scipy.sparse matrix or array (CSR or COO) of shape (n_samples, n_features)
    chunks : int or tuple of ints, optional
        Rows per chunk; default about 64 MB of non-zeros per chunk.

    Returns
    -------
    dask.array.Array of shape (n_samples, n_features) with CSR chunks
    """
    X = check_sparse(X, "sparse_to_dask")
    if chunks is None:
        chunks = _auto_sparse_rows(X.shape[0], X.nnz, X.dtype.itemsize)
    return da.from_array(X, chunks=(chunks, -1), asarray=False, fancy=False,
                         meta=_csr_meta(X.dtype))


# ----------------------------------------------------------------------------- Zarr CSR
def _write_block(block, path, storage_options, index, offset):
    block = sp.csr_matrix(block)
    block.sum_duplicates()
    root = zarr.open_group(path, mode="r+", storage_options=storage_options)
    g = root.create_group(str(index))
    n_features = block.shape[1]
    ind_dtype = np.int32 if n_features < 2**31 else np.int64
    g.create_array("data", data=np.ascontiguousarray(block.data))
    g.create_array("indices", data=block.indices.astype(ind_dtype))
    g.create_array("indptr", data=block.indptr.astype(np.int64))
    return [(index, int(block.shape[0]), int(block.nnz))]


def _concat_lists(parts):
    return [x for p in parts for x in p]


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
    overwrite : bool, default=False
    attrs : dict, optional
        Extra JSON attributes of the group.

    Returns
    -------
    path
    """
    from .io import _AtomicTarget
    from .parallel.engine import map_blocks_reduce

    Xd = check_sparse(X, "save_csr")
    if not isinstance(Xd, da.Array):
        Xd = sparse_to_dask(Xd)
    if Xd.ndim != 2:
        raise ValueError(f"save_csr needs a 2-D array; got shape {Xd.shape}.")
    if Xd.numblocks[1] != 1:
        Xd = Xd.rechunk({1: -1})
    with _AtomicTarget(path, overwrite) as t:
        so = storage_options if t.url else None
        root = zarr.open_group(t.tmp_url, mode="w", zarr_format=3, storage_options=so)
        d = map_blocks_reduce(Xd, _write_block, _concat_lists, args=(t.tmp_url, so),
                              with_offsets=True, name="save-csr")
        (written,) = compute_settled(d)
        written.sort()
        meta = {"format": "csr", "version": CSR_FORMAT_VERSION,
                "shape": [int(s) for s in Xd.shape], "dtype": str(Xd.dtype),
                "row_chunks": [w[1] for w in written], "nnz": [w[2] for w in written]}
        root.attrs.update({**(attrs or {}), _ATTR: meta})
    return path


def _open_root(path, storage_options=None):
    if isinstance(path, str) and "://" in path:
        return zarr.open_group(path, mode="r", storage_options=storage_options)
    return zarr.open_group(str(path), mode="r")


def _where(path):
    """``path`` as a graph may carry it: a URL as it is, a local path absolute."""
    if isinstance(path, str) and "://" in path:
        return path
    return os.path.abspath(os.fspath(path))


def is_csr_store(path, storage_options=None) -> bool:
    """True if ``path`` is a Zarr group written by :func:`save_csr`."""
    try:
        root = _open_root(path, storage_options)
    except (FileNotFoundError, zarr.errors.GroupNotFoundError, ValueError, TypeError):
        return False
    return _ATTR in root.attrs


def _read_block(block_info=None, *, path, storage_options, shape_cols, out_dtype):
    from .zarr_chunk_reader import worker_description

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

    Raises
    ------
    FileNotFoundError
        No store at ``path``.
    ValueError
        The store is not a dqkm CSR group, or has an unknown format version.
    StoreError
        (when computed) A task cannot see the group, or a chunk is damaged.
    """
    try:
        root = _open_root(path, storage_options)
    except (FileNotFoundError, zarr.errors.GroupNotFoundError) as e:
        raise FileNotFoundError(f"No Zarr CSR group at {str(path)!r}.") from e
    meta = root.attrs.get(_ATTR)
    if meta is None or meta.get("format") != "csr":
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
    return da.map_blocks(_read_block, chunks=(rows, (d,)), dtype=dtype, meta=_csr_meta(dtype),
                         path=_where(path), storage_options=storage_options, shape_cols=d,
                         out_dtype=dtype)


# ----------------------------------------------------------------------------- generator
def _check_int(name, value, low):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < low:
        raise ValueError(f"The {name!r} parameter of make_sparse_blobs must be an int in the "
                         f"range [{low}, inf). Got {value!r} instead.")
    return int(value)


def _check_real(name, value, low, high, low_open=False):
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and np.isfinite(value)
    if not ok or value > high or value < low or (low_open and value == low):
        lb = "(" if low_open else "["
        raise ValueError(f"The {name!r} parameter of make_sparse_blobs must be a float in the "
                         f"range {lb}{low}, {high}]. Got {value!r} instead.")
    return float(value)


def _sparse_blobs_chunk(block_id, *, sizes, vocab, vocab_p, n_features, nnz_per_row, signal,
                        entropy, out_dtype, which):
    """Chunk ``i`` from its own seed: labels, then the non-zeros of every row.

    Each row draws ``1 + Poisson(nnz_per_row − 1)`` term positions: with
    probability ``signal`` from its cluster's vocabulary (Zipf weights), else
    uniformly from all features; the term weights are ``1 + Exp(1)``
    (repeated terms add up), and the row is scaled to unit ℓ2 norm, as a
    tf-idf vectoriser does.
    """
    i = block_id[0]
    rng = np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=(i,)))
    n = sizes[i]
    k = vocab.shape[0]
    labels = rng.integers(0, k, size=n)
    if which == "y":
        return labels.astype(np.int32)
    m = np.minimum(1 + rng.poisson(max(nnz_per_row - 1.0, 0.0), size=n), n_features)
    rows = np.repeat(np.arange(n), m)
    total = rows.shape[0]
    from_topic = rng.random(total) < signal
    cols = rng.integers(0, n_features, size=total)
    row_label = labels[rows]
    for c in range(k):
        sel = np.flatnonzero(from_topic & (row_label == c))
        if sel.size:
            cols[sel] = vocab[c][rng.choice(vocab.shape[1], size=sel.size, p=vocab_p)]
    vals = 1.0 + rng.exponential(1.0, size=total)
    X = sp.csr_matrix((vals, (rows, cols)), shape=(n, n_features))
    X.sum_duplicates()
    norms = np.sqrt(np.add.reduceat(X.data**2, X.indptr[:-1])) if X.nnz else np.ones(0)
    X.data /= np.repeat(norms, np.diff(X.indptr))
    return X.astype(out_dtype)


def make_sparse_blobs(n_samples=100_000, n_features=10_000, density=0.001, centers=8, *,
                      signal=0.5, vocabulary_size=None, chunks=None, random_state=None,
                      dtype=np.float32, path=None, overwrite=False):
    """tf-idf-like sparse clustered data, generated chunk by chunk (CSR chunks).

    Every cluster c has a vocabulary of ``vocabulary_size`` features drawn
    without replacement, with Zipf weights ``∝ 1/(rank + 1)``.  A row of
    cluster c has about ``density × n_features`` non-zeros (1 + Poisson):
    each term comes from c's vocabulary with probability ``signal``,
    otherwise uniformly from all features; weights are ``1 + Exp(1)``, and
    rows have unit ℓ2 norm.

    Chunk ``i`` is built from ``SeedSequence(random_state, spawn_key=(i,))``
    alone (the vocabularies from ``spawn_key=(2**32,)``), so the array is
    never in one memory and a chunk is the same whoever computes it.

    Parameters
    ----------
    n_samples, n_features : int
    density : float in (0, 1]
        Expected fraction of non-zeros per row (before repeated terms merge).
    centers : int
        Number of clusters.
    signal : float in [0, 1], default=0.5
        Fraction of a row's terms drawn from its cluster's vocabulary.
    vocabulary_size : int, optional
        Default: ``min(n_features, max(50, 10 × density × n_features))``.
    chunks : int or tuple of ints, optional
        Rows per chunk (default about 64 MB of non-zeros, ≥ 4 chunks when large).
    random_state : int or None
    dtype : float32 (default) or float64
    path : str, optional
        If given, X is written there as a Zarr CSR group (:func:`save_csr`)
        and the returned X reads from it; y stays lazy (from the generator).

    Returns
    -------
    X : dask array of shape (n_samples, n_features), CSR chunks
    y : dask array of shape (n_samples,), int32

    Examples
    --------
    >>> from dqkm.sparse import make_sparse_blobs
    >>> X, y = make_sparse_blobs(1000, 500, density=0.02, centers=3, random_state=0)
    >>> X.blocks[0].compute().format
    'csr'
    """
    from .datasets import _root_entropy, _row_chunks

    n_samples = _check_int("n_samples", n_samples, 1)
    n_features = _check_int("n_features", n_features, 1)
    k = _check_int("centers", centers, 1)
    density = _check_real("density", density, 0.0, 1.0, low_open=True)
    signal = _check_real("signal", signal, 0.0, 1.0)
    nnz_per_row = max(1.0, density * n_features)
    if vocabulary_size is None:
        vocabulary_size = int(min(n_features, max(50, 10 * nnz_per_row)))
    vocabulary_size = _check_int("vocabulary_size", vocabulary_size, 1)
    if vocabulary_size > n_features:
        raise ValueError(f"The 'vocabulary_size' parameter of make_sparse_blobs must be an int "
                         f"in the range [1, n_features={n_features}]. Got {vocabulary_size} "
                         "instead.")
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"The 'dtype' parameter of make_sparse_blobs must be float32 or "
                         f"float64. Got {dtype} instead.")
    entropy = _root_entropy(random_state)
    vrng = np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=(2**32,)))
    vocab = np.stack([vrng.choice(n_features, size=vocabulary_size, replace=False)
                      for _ in range(k)])
    p = 1.0 / np.arange(1, vocabulary_size + 1)
    p /= p.sum()
    if chunks is None:
        chunks = _auto_sparse_rows(n_samples, int(n_samples * nnz_per_row), dtype.itemsize)
    sizes = _row_chunks(n_samples, chunks, n_features, dtype.itemsize)
    kw = dict(sizes=sizes, vocab=vocab, vocab_p=p, n_features=n_features,
              nnz_per_row=nnz_per_row, signal=signal, entropy=entropy, out_dtype=dtype)
    X = da.map_blocks(_sparse_blobs_chunk, chunks=(sizes, (n_features,)), dtype=dtype,
                      meta=_csr_meta(dtype), which="X", **kw)
    y = da.map_blocks(_sparse_blobs_chunk, chunks=(sizes,), dtype=np.int32,
                      meta=np.empty((0,), np.int32), which="y", **kw)
    if path is not None:
        save_csr(X, path, overwrite=overwrite,
                 attrs={"generator": "dqkm.sparse.make_sparse_blobs", "random_state": entropy,
                        "n_centers": k})
        X = load_csr(path)
    return X, y
