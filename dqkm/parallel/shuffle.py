"""Reorder the rows of a Dask array out of core: a two-phase shuffle through files.

``X[order]`` with dask's ``take`` builds output blocks from pieces of every
input block; until the last input block is read, the pieces of all of them
wait in the workers' memory — the whole of X, which kills workers when X is
larger than their memory. :func:`permute_rows` bounds every task instead:

1. one task per input block sorts its rows by their destination and writes
   them (and the destinations) to spill files;
2. one task per output block memory-maps those files, copies the contiguous
   run of rows each input block sends to it, and orders them.

A task holds about two input or two output blocks. The spill files (their
directory, writing and reading) belong to :mod:`dqkm.data.spill`.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np

from ..data.spill import gather_block, remove_spill, spill_block, spill_directory
from .engine import compute_settled

__all__ = ["permute_rows", "spill_directory", "remove_spill"]


def permute_rows(X: da.Array, order, spill, *, out_rows, sq_norms=False):
    """``X[order]`` (``order`` a permutation of the rows) with bounded task memory.

    Runs phase 1 (one pass over X, writing the spill files) now; returns the
    lazy result of phase 2 with row chunks of ``out_rows``. The spill files
    must stay until that result is computed.  With ``sq_norms``, returns
    ``(X[order], sq)``: ``sq`` the rows' squared norms (float64), computed by
    phase 1 and gathered by tasks of their own, so that no block of rows waits
    in memory for a second consumer (a norms task computed from the gathered
    rows kept every gathered block until its norms were taken: up to all of X).
    """
    n = X.shape[0]
    order = np.asarray(order, dtype=np.int64)
    dest = np.empty(n, dtype=np.int64)
    dest[order] = np.arange(n, dtype=np.int64)
    dest_blocks = da.from_array(dest[:, None], chunks=(X.chunks[0], 1))
    tokens = da.map_blocks(spill_block, X, dest_blocks, spill, sq_norms=sq_norms,
                           dtype=np.int8, chunks=((1,) * X.numblocks[0], (1,)),
                           name=f"dqkm-shuffle-spill-{dask.base.tokenize(X, dest, spill)}")
    compute_settled(tokens)
    in_offsets = np.concatenate([[0], np.cumsum(X.chunks[0])])
    out_rows = int(max(1, out_rows))
    bounds = np.arange(0, n, out_rows, dtype=np.int64)
    bounds = np.append(bounds, n)
    # runs[i][j] = where output block j starts in input block i's sorted destinations
    runs = [np.searchsorted(np.sort(dest[in_offsets[i]:in_offsets[i + 1]]), bounds)
            for i in range(X.numblocks[0])]
    blocks, sq = [], []
    for j in range(len(bounds) - 1):
        pieces = [(i, int(r[j]), int(r[j + 1])) for i, r in enumerate(runs) if r[j + 1] > r[j]]
        n_rows = int(bounds[j + 1] - bounds[j])
        args = (spill, pieces, n_rows, X.shape[1], X.dtype, int(bounds[j]))
        task = dask.delayed(gather_block, pure=True)(
            *args, dask_key_name=f"dqkm-shuffle-gather-{dask.base.tokenize(spill, j)}")
        blocks.append(da.from_delayed(task, shape=(n_rows, X.shape[1]), dtype=X.dtype))
        if sq_norms:
            task = dask.delayed(gather_block, pure=True)(
                *args, True, dask_key_name=f"dqkm-shuffle-sq-{dask.base.tokenize(spill, j)}")
            sq.append(da.from_delayed(task, shape=(n_rows,), dtype=np.float64))
    Xs = da.concatenate(blocks, axis=0)
    return (Xs, da.concatenate(sq)) if sq_norms else Xs
