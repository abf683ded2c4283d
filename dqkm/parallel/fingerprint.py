"""A fingerprint of the data a checkpoint was written for: one cheap pass over X."""

from __future__ import annotations

import hashlib

import numpy as np
import scipy.sparse as sp

from .engine import compute, map_blocks_reduce

__all__ = ["data_fingerprint"]


def _chunk_sums(block, index, offset):
    """Rows, float64 column sums and row-position-weighted column sums of one chunk."""
    n = block.shape[0]
    w = np.arange(1, n + 1, dtype=np.float64) / max(n, 1)
    if sp.issparse(block):
        b = sp.csr_matrix(block, dtype=np.float64)
        sums = np.asarray(b.sum(axis=0), dtype=np.float64).ravel()
        weighted = np.asarray(b.T @ w, dtype=np.float64).ravel()
    else:
        b = np.asarray(block)
        sums = b.sum(axis=0, dtype=np.float64)
        weighted = w @ b.astype(np.float64, copy=False)
    return {int(index): (int(n), sums, weighted)}


def _merge(parts):
    out = {}
    for p in parts:
        out.update(p)
    return out


def data_fingerprint(X, split_every=None):
    """A hex digest of X's row count, float64 column sums and row-position-weighted
    column sums, chunk by chunk (in chunk order).

    One pass over X (dense or CSR row chunks).  The same values in the same row
    chunks give the same digest; other values (in practice), other rows or the
    same rows in another order within a chunk give another.

    Parameters
    ----------
    X : dask array of shape (n_samples, n_features), chunked along rows only
    split_every : int or None
        Fan-in of the tree reduction.

    Returns
    -------
    str
        SHA-256 hex digest.
    """
    parts = compute(map_blocks_reduce(X, _chunk_sums, _merge, split_every=split_every,
                                      with_offsets=True, name="fingerprint"))[0]
    h = hashlib.sha256()
    h.update(f"{X.shape[1]}:{np.dtype(X.dtype).str}".encode())
    for i in sorted(parts):
        n, sums, weighted = parts[i]
        h.update(np.int64(n).tobytes())
        h.update(np.ascontiguousarray(sums, dtype="<f8").tobytes())
        h.update(np.ascontiguousarray(weighted, dtype="<f8").tobytes())
    return h.hexdigest()
