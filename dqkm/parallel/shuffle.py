"""Reorder the rows of a Dask array out of core: a two-phase shuffle through files.

``X[order]`` with dask's ``take`` builds output blocks from pieces of every
input block; until the last input block is read, the pieces of all of them
wait in the workers' memory — the whole of X, which kills workers when X is
larger than their memory. :func:`permute_rows` bounds every task instead:

1. one task per input block sorts its rows by their destination and writes
   them (and the destinations) as two ``.npy`` files in a spill directory;
2. one task per output block memory-maps those files, copies the contiguous
   run of rows each input block sends to it, and orders them.

A task holds about two input or two output blocks. The spill directory must be
visible to every worker (as the Zarr store written next to it must be); it is
created by :func:`permute_rows`'s caller with :func:`spill_directory` and
removed, with only the files named here, by :func:`remove_spill`.
"""

from __future__ import annotations

import os
import socket
import uuid

import dask
import dask.array as da
import numpy as np

from ..exceptions import StoreError
from .engine import compute_settled

__all__ = ["permute_rows", "spill_directory", "remove_spill"]

_PART = "part-{:06d}.npy"
_POS = "pos-{:06d}.npy"


def spill_directory(next_to) -> str:
    """Create an empty spill directory beside the path ``next_to`` (absolute)."""
    target = os.path.abspath(os.fspath(next_to))
    parent, base = os.path.split(target.rstrip(os.sep))
    path = os.path.join(parent, f".{base}.dqkm-shuffle-{uuid.uuid4().hex[:12]}")
    os.mkdir(path)  # fails if it exists: it is then not ours
    return path


def remove_spill(path, n_blocks) -> None:
    """Remove the files :func:`permute_rows` writes for ``n_blocks`` blocks, then
    the directory (only if that leaves it empty: nothing else is deleted)."""
    for i in range(n_blocks):
        for name in (_PART.format(i), _POS.format(i), _PART.format(i) + ".tmp",
                     _POS.format(i) + ".tmp"):
            try:
                os.remove(os.path.join(path, name))
            except FileNotFoundError:
                pass
    try:
        os.rmdir(path)
    except OSError:
        pass


def _save(path, arr):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        np.save(f, arr, allow_pickle=False)
    os.replace(tmp, path)


def _spill_block(block, dest, spill, block_id=None):
    """Phase 1: rows of one input block sorted by destination, written to files."""
    i = block_id[0]
    dest = np.asarray(dest, dtype=np.int64).ravel()
    srt = np.argsort(dest, kind="stable")
    _save(os.path.join(spill, _PART.format(i)), np.ascontiguousarray(np.asarray(block)[srt]))
    _save(os.path.join(spill, _POS.format(i)), dest[srt])
    return np.ones((1, 1), dtype=np.int8)


def _gather_block(spill, pieces, n_rows, n_features, dtype, lo):
    """Phase 2: the output rows ``lo:lo + n_rows`` from the spilled runs."""
    out = np.empty((n_rows, n_features), dtype=dtype)
    got = np.zeros(n_rows, dtype=bool)
    for i, a, b in pieces:
        try:
            rows = np.load(os.path.join(spill, _PART.format(i)), mmap_mode="r")
            pos = np.load(os.path.join(spill, _POS.format(i)), mmap_mode="r")
        except (OSError, ValueError) as e:
            raise _missing(spill, lo, n_rows) from e
        p = np.asarray(pos[a:b]) - lo
        out[p] = rows[a:b]
        got[p] = True
    if not got.all():  # a run file was shorter than planned: never return unset rows
        raise _missing(spill, lo, n_rows)
    return out


def _missing(spill, lo, n_rows):
    return StoreError(f"dqkm shuffle: the spill directory {spill!r} lacks the rows for output "
                      f"rows {lo}..{lo + n_rows} on worker host {socket.gethostname()}; was it "
                      "removed, or is it not on a filesystem every worker shares?")


def permute_rows(X: da.Array, order, spill, *, out_rows) -> da.Array:
    """``X[order]`` (``order`` a permutation of the rows) with bounded task memory.

    Runs phase 1 (one pass over X, writing the spill files) now; returns the
    lazy result of phase 2 with row chunks of ``out_rows``. The spill files
    must stay until that result is computed.
    """
    n = X.shape[0]
    order = np.asarray(order, dtype=np.int64)
    dest = np.empty(n, dtype=np.int64)
    dest[order] = np.arange(n, dtype=np.int64)
    dest_blocks = da.from_array(dest[:, None], chunks=(X.chunks[0], 1))
    tokens = da.map_blocks(_spill_block, X, dest_blocks, spill, dtype=np.int8,
                           chunks=((1,) * X.numblocks[0], (1,)),
                           name=f"dqkm-shuffle-spill-{dask.base.tokenize(X, dest, spill)}")
    compute_settled(tokens)
    in_offsets = np.concatenate([[0], np.cumsum(X.chunks[0])])
    out_rows = int(max(1, out_rows))
    bounds = np.arange(0, n, out_rows, dtype=np.int64)
    bounds = np.append(bounds, n)
    # runs[i][j] = where output block j starts in input block i's sorted destinations
    runs = [np.searchsorted(np.sort(dest[in_offsets[i]:in_offsets[i + 1]]), bounds)
            for i in range(X.numblocks[0])]
    blocks = []
    for j in range(len(bounds) - 1):
        pieces = [(i, int(r[j]), int(r[j + 1])) for i, r in enumerate(runs) if r[j + 1] > r[j]]
        n_rows = int(bounds[j + 1] - bounds[j])
        task = dask.delayed(_gather_block, pure=True)(spill, pieces, n_rows, X.shape[1],
                                                      X.dtype, int(bounds[j]),
                                                      dask_key_name=f"dqkm-shuffle-gather-"
                                                      f"{dask.base.tokenize(spill, j)}")
        blocks.append(da.from_delayed(task, shape=(n_rows, X.shape[1]), dtype=X.dtype))
    return da.concatenate(blocks, axis=0)
