"""Spill files of the out-of-core row shuffle (see :mod:`dqkm.parallel.shuffle`).

The driver writes every row's destination to one file
(:func:`save_destinations`); phase 1 reads its block's slice of it
(:func:`block_destinations`: so that no task carries its destinations in the
graph, where a worker held those of every task sent to it, a growth with the
number of blocks of X) and writes, per input block, its rows sorted by
destination (a tile at a time), the sorted destinations and, if asked, the
rows' squared norms (``.npy`` files); phase 2 memory-maps them and copies the
runs each output block needs.  The directory is created next to the store
being written (it must be visible to every worker, as that store is) and
removed with only the files named here.
"""

from __future__ import annotations

import os
import socket
import uuid

import numpy as np

from ..exceptions import StoreError

__all__ = ["spill_directory", "remove_spill", "spill_block", "gather_block",
           "spill_task_parts", "save_destinations", "block_destinations"]

_PART = "part-{:06d}.npy"
_POS = "pos-{:06d}.npy"
_SQ = "sq-{:06d}.npy"
_DEST = "dest.npy"


def spill_directory(next_to) -> str:
    """Create an empty spill directory beside the path ``next_to`` (absolute)."""
    target = os.path.abspath(os.fspath(next_to))
    parent, base = os.path.split(target.rstrip(os.sep))
    path = os.path.join(parent, f".{base}.dqkm-shuffle-{uuid.uuid4().hex[:12]}")
    os.mkdir(path)  # fails if it exists: it is then not ours
    return path


def remove_spill(path, n_blocks) -> None:
    """Remove the files :func:`permute_rows` writes for ``n_blocks`` blocks and the
    destinations file, then the directory (only if that leaves it empty: nothing
    else is deleted)."""
    for name in (_DEST, _DEST + ".tmp"):
        try:
            os.remove(os.path.join(path, name))
        except FileNotFoundError:
            pass
    for i in range(n_blocks):
        for name in (_PART.format(i), _POS.format(i), _SQ.format(i), _PART.format(i) + ".tmp",
                     _POS.format(i) + ".tmp", _SQ.format(i) + ".tmp"):
            try:
                os.remove(os.path.join(path, name))
            except FileNotFoundError:
                pass
    try:
        os.rmdir(path)
    except OSError:
        pass


_TILE_BYTES = 4 << 20  # rows of a block written at once: the sorted copy never exceeds this


def _save(path, arr):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        np.save(f, arr, allow_pickle=False)
    os.replace(tmp, path)


def _save_rows(path, block, order, sq=None):
    """``block[order]`` written as a ``.npy`` file, a tile of rows at a time: the task
    holds the block and one tile, never a sorted copy of the whole block.  With
    ``sq`` (float64, one per row), each tile's squared row norms are put there."""
    tmp = path + ".tmp"
    n = len(order)
    rows = max(1, _TILE_BYTES // max(1, block[:1].nbytes))
    header = {"descr": np.lib.format.dtype_to_descr(block.dtype), "fortran_order": False,
              "shape": (n,) + block.shape[1:]}
    with open(tmp, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        for t in range(0, n, rows):
            tile = np.ascontiguousarray(block[order[t:t + rows]])
            if sq is not None:
                sq[t:t + len(tile)] = np.einsum("ij,ij->i", tile, tile, dtype=np.float64)
            f.write(tile.data)
    os.replace(tmp, path)


def save_destinations(spill, dest) -> None:
    """Every input row's destination (int64), for :func:`block_destinations`."""
    _save(os.path.join(spill, _DEST), np.asarray(dest, dtype=np.int64))


def block_destinations(spill, lo, hi):
    """The destinations of input rows ``lo … hi`` (a copy: the file is not kept open)."""
    try:
        dest = np.load(os.path.join(spill, _DEST), mmap_mode="r")
    except (OSError, ValueError) as e:
        raise StoreError(f"dqkm shuffle: the spill directory {spill!r} lacks the rows' "
                         f"destinations (input rows {lo}..{hi}) on worker host "
                         f"{socket.gethostname()}; was it removed, or is it not on a "
                         "filesystem every worker shares?") from e
    if dest.shape[0] < hi:
        raise StoreError(f"dqkm shuffle: the destinations file in {spill!r} holds "
                         f"{dest.shape[0]} rows; input rows {lo}..{hi} were asked for.")
    return np.array(dest[lo:hi])


def spill_task_parts(n_rows, row_bytes, sq_norms=False) -> dict:
    """What one :func:`spill_block` task holds at once, in bytes, by part: its block,
    per row its destination, sort order and sorted destinations (int64 each) and,
    with ``sq_norms``, its squared norm (float64), and one tile of sorted rows."""
    n_rows, row_bytes = int(n_rows), int(row_bytes)
    return {"block of X": n_rows * row_bytes,
            "destinations, sort order and norms": n_rows * 8 * (4 if sq_norms else 3),
            "one sorted tile": min(n_rows, max(1, _TILE_BYTES // max(1, row_bytes))) * row_bytes}


def spill_block(block, dest, spill, block_id=None, sq_norms=False):
    """Phase 1: rows of one input block sorted by destination, written to files
    (a tile at a time: the task's memory is the block plus one tile); with
    ``sq_norms``, their squared norms (float64) too."""
    i = block_id[0]
    dest = np.asarray(dest, dtype=np.int64).ravel()
    srt = np.argsort(dest, kind="stable")
    sq = np.empty(len(srt)) if sq_norms else None
    _save_rows(os.path.join(spill, _PART.format(i)), np.asarray(block), srt, sq)
    _save(os.path.join(spill, _POS.format(i)), dest[srt])
    if sq_norms:
        _save(os.path.join(spill, _SQ.format(i)), sq)
    return np.ones((1, 1), dtype=np.int8)


def gather_block(spill, pieces, n_rows, n_features, dtype, lo, sq_norms=False):
    """Phase 2: the output rows ``lo:lo + n_rows`` from the spilled runs (with
    ``sq_norms``: their squared norms, 1-D float64, written by phase 1)."""
    shape = (n_rows,) if sq_norms else (n_rows, n_features)
    out = np.empty(shape, dtype=np.float64 if sq_norms else dtype)
    got = np.zeros(n_rows, dtype=bool)
    for i, a, b in pieces:
        try:
            rows = np.load(os.path.join(spill, (_SQ if sq_norms else _PART).format(i)),
                           mmap_mode="r")
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
