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
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph
from dask.task_spec import DataNode, List, Task, TaskRef

from ..data.spill import gather_block, remove_spill, spill_block, spill_directory
from .engine import block_sources, compute_settled

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
    compute_settled(_spill_tasks(X, dest, in_offsets, spill, sq_norms))
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


def _spill_tasks(X, dest, in_offsets, spill, sq_norms):
    """Phase 1 as one task per input block, the block's read inlined in it
    (:func:`~dqkm.parallel.engine.block_sources`): a worker holds one block of X
    per running task, never blocks read ahead of their spill task."""
    name = f"dqkm-shuffle-spill-{dask.base.tokenize(X.name, dest, spill, sq_norms)}"
    blocks = list(np.asarray(X.to_delayed(optimize_graph=True)).reshape(-1))
    layer, keys = {}, []
    row = X.dtype.itemsize * X.shape[1]
    sources = block_sources(blocks, [int(r) * row for r in X.chunks[0]])
    for i, src in enumerate(sources):
        k = f"{name}-{i}"
        part = DataNode(None, dest[in_offsets[i]:in_offsets[i + 1]])
        layer[k] = Task(k, spill_block, src, part, spill, block_id=(i, 0), sq_norms=sq_norms)
        keys.append(k)
    level = 0
    while len(keys) > 1:  # one small result: a tree of no-op joins
        nxt = []
        for j in range(0, len(keys), _FAN_IN):
            k = f"{name}-join-{level}-{j}"
            layer[k] = Task(k, _join, List(*(TaskRef(x) for x in keys[j:j + _FAN_IN])))
            nxt.append(k)
        keys, level = nxt, level + 1
    deps = blocks[:1] if any(isinstance(s, TaskRef) or s.dependencies for s in sources) else []
    graph = HighLevelGraph.from_collections(name, layer, dependencies=deps)
    return Delayed(keys[0], graph, layer=name)


def _join(parts):
    return len(parts)
