"""Reorder the rows of a Dask array out of core: a two-phase shuffle through files.

``X[order]`` with dask's ``take`` builds output blocks from pieces of every
input block; until the last input block is read, the pieces of all of them
wait in the workers' memory — the whole of X, which kills workers when X is
larger than their memory. :func:`permute_rows` bounds every task instead:

1. the driver writes every row's destination to a file; one task per input
   block reads its rows' slice of it, sorts its rows by their destination and
   writes them (and the sorted destinations) to spill files;
2. one task per output block memory-maps those files, copies the contiguous
   run of rows each input block sends to it, and orders them.

A task holds about two input or two output blocks. The spill files (their
directory, writing and reading) belong to :mod:`dqkm.data.spill`.
"""

from __future__ import annotations

import dask.array as da
import numpy as np

from ..data.spill import (block_destinations, gather_block, remove_spill, save_destinations,
                          spill_block, spill_directory)
from .engine import array_from_tasks, compute_settled, map_blocks_reduce

_FAN_IN = 8

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
    in_offsets = np.concatenate([[0], np.cumsum(X.chunks[0])])
    save_destinations(spill, dest)
    compute_settled(_spill_tasks(X, spill, sq_norms))
    out_rows = int(max(1, out_rows))
    bounds = np.arange(0, n, out_rows, dtype=np.int64)
    bounds = np.append(bounds, n)
    # runs[i][j] = where output block j starts in input block i's sorted destinations
    runs = [np.searchsorted(np.sort(dest[in_offsets[i]:in_offsets[i + 1]]), bounds)
            for i in range(X.numblocks[0])]
    args = []
    for j in range(len(bounds) - 1):
        pieces = [(i, int(r[j]), int(r[j + 1])) for i, r in enumerate(runs) if r[j + 1] > r[j]]
        n_rows = int(bounds[j + 1] - bounds[j])
        args.append((spill, pieces, n_rows, X.shape[1], X.dtype, int(bounds[j])))
    rows = tuple(int(a[2]) for a in args)
    Xs = array_from_tasks(gather_block, args, (rows, (X.shape[1],)), X.dtype,
                          name="shuffle-gather")
    if not sq_norms:
        return Xs
    return Xs, array_from_tasks(gather_block, [(*a, True) for a in args], (rows,), np.float64,
                                name="shuffle-sq")


def _spill_tasks(X, spill, sq_norms):
    """Phase 1 as one task per input block, the block's read inlined in it
    (:func:`~dqkm.parallel.engine.map_blocks_reduce`): a worker holds one block of X
    per running task, never blocks read ahead of their spill task.  Each task reads
    its rows' destinations from the spill directory (written first by
    :func:`permute_rows`), so the graph carries none.  Their small results are
    joined by a tree of fan-in 8."""
    return map_blocks_reduce(X, _spill, _join, args=(spill, sq_norms), split_every=_FAN_IN,
                             with_offsets=True, name="shuffle-spill")


def _spill(block, spill, sq_norms, index, offset):
    dest = block_destinations(spill, offset, offset + block.shape[0])
    return spill_block(block, dest, spill, block_id=(index, 0), sq_norms=sq_norms)


def _join(parts):
    return len(parts)
