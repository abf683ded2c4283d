"""K-Multiple-Means checkpoints: the rows of S each worker holds, as Zarr groups.

The only file I/O of K-Multiple-Means.  :func:`write_rows` and
:func:`read_rows` give the per-chunk writer and reader to
:func:`dqkm.parallel.kmm.run_on_row_blocks` and
:func:`dqkm.parallel.kmm.persist_row_blocks`, so each chunk's rows are written
and read by a worker, not gathered on the driver.  They write into a
checkpoint's new state group (the checkpoint writes it atomically, lists its
files and checks them on load), never elsewhere.
"""

from __future__ import annotations

import os

import numpy as np
import zarr

from ..kernels.kmm_step import ChunkRows
from ..parallel.kmm import persist_row_blocks, run_on_row_blocks

__all__ = ["OPTIONAL_ROWS", "read_rows", "write_rows"]

# nxt: the (l+1)-th neighbour; keep, low: the K nearest kept for the next pass and the
# bound on D_E outside them (fast; empty for the reference)
_ROW_FIELDS = ("idx", "w", "ref", "skip", "nxt", "keep", "low")
_LB_FIELDS = ("lb_t", "lb_perp", "lb_norm2")  # the rows' rank-d′ projections (fast only)
#: Arrays of a checkpoint's rows of S that the reader does without when missing entirely
#: (rows written before they existed): the pruned search then seeds itself.
OPTIONAL_ROWS = ("rows/*/nxt", "rows/*/keep")


def _write_block(rows, path):
    """Store one chunk's :class:`ChunkRows` as the Zarr v3 group ``path`` (on a worker)."""
    arrays = {k: getattr(rows, k) for k in _ROW_FIELDS}
    if rows.lb is not None:
        arrays.update(zip(_LB_FIELDS, rows.lb))
    group = zarr.open_group(path, mode="w", zarr_format=3)
    for k, v in arrays.items():
        v = np.ascontiguousarray(v)
        group.create_array(k, data=v, chunks=tuple(max(s, 1) for s in v.shape),
                           compressors=None)
    return int(rows.idx.shape[0])


def _read_block(path):
    """One chunk's :class:`ChunkRows` back from :func:`_write_block`'s group."""
    group = zarr.open_group(path, mode="r")
    st = {k: np.asarray(group[k][...]) for k in _ROW_FIELDS if k in group}
    if "keep" not in st or "nxt" not in st:  # written before these fields existed
        st["keep"], st["low"] = None, None  # (keep came after nxt): the search seeds itself
    if "nxt" not in st:
        st["nxt"] = np.full(st["idx"].shape[0], -1, np.int32)
    st["lb"] = (tuple(np.asarray(group[k][...]) for k in _LB_FIELDS)
                if _LB_FIELDS[0] in group else None)
    return ChunkRows(**st)


def _rows_path(directory, i):
    return os.path.join(directory, "rows", f"{i:06d}")


def write_rows(rows, directory):
    """Write the persisted per-chunk rows of S under ``directory/rows/NNNNNN/``.

    Each chunk's neighbours ``idx``, weights ``w``, (l+1)-th neighbours
    ``nxt``, reference nearest prototypes ``ref``, outlier flags ``skip``, kept
    prototypes ``keep`` and bounds ``low`` and (fast) projections
    ``lb_t``/``lb_perp``/``lb_norm2`` become one Zarr v3 group, written by the
    worker that holds the chunk (one task per chunk, one compute for all):
    on a multi-machine cluster ``directory`` must be on a filesystem every
    worker and the driver share, like the Zarr data itself.

    Parameters
    ----------
    rows : list of Delayed
        ``KMMState.rows``.
    directory : str
        An existing local directory (a checkpoint's new state group).

    Returns
    -------
    list of int
        The number of rows of each chunk.
    """
    directory = os.path.abspath(str(directory))
    zarr.open_group(os.path.join(directory, "rows"), mode="w", zarr_format=3)
    paths = [_rows_path(directory, i) for i in range(len(rows))]
    return [int(n) for n in run_on_row_blocks(_write_block, rows, paths, "kmm-save")]


def read_rows(directory, n_blocks):
    """The rows written by :func:`write_rows` as ``n_blocks`` delayed load tasks
    (run by the workers, one per chunk), persisted: the ``rows`` of a
    :class:`~dqkm.parallel.kmm.KMMState`.  ``directory`` must be readable by
    every worker."""
    directory = os.path.abspath(str(directory))
    paths = [_rows_path(directory, i) for i in range(n_blocks)]
    return persist_row_blocks(_read_block, paths, "kmm-load")
