"""K-Multiple-Means checkpoints: one chunk's rows of S as a Zarr v3 group.

:func:`write_block` and :func:`read_block` run on the worker that holds the
chunk (:mod:`dqkm.cluster._kmm_rows` hands them to the graph); they write
into a checkpoint's new state group (the checkpoint writes it atomically,
lists its files and checks them on load), never elsewhere.
"""

from __future__ import annotations

import os

import numpy as np
import zarr

from ..kernels.kmm_step import ChunkRows

__all__ = ["OPTIONAL_ROWS", "create_rows_group", "read_block", "rows_path", "write_block"]

# nxt: the (l+1)-th neighbour; keep, low: the K nearest kept for the next pass and the
# bound on D_E outside them (fast; empty for the reference)
_ROW_FIELDS = ("idx", "w", "ref", "skip", "nxt", "keep", "low")
_LB_FIELDS = ("lb_t", "lb_perp", "lb_norm2")  # the rows' rank-d′ projections (fast only)
#: Arrays of a checkpoint's rows of S that the reader does without when missing entirely
#: (rows written before they existed): the pruned search then seeds itself.
OPTIONAL_ROWS = ("rows/*/nxt", "rows/*/keep")


def write_block(rows, path):
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


def read_block(path):
    """One chunk's :class:`ChunkRows` back from :func:`write_block`'s group."""
    group = zarr.open_group(path, mode="r")
    st = {k: np.asarray(group[k][...]) for k in _ROW_FIELDS if k in group}
    if "keep" not in st or "nxt" not in st:  # written before these fields existed
        st["keep"], st["low"] = None, None  # (keep came after nxt): the search seeds itself
    if "nxt" not in st:
        st["nxt"] = np.full(st["idx"].shape[0], -1, np.int32)
    st["lb"] = (tuple(np.asarray(group[k][...]) for k in _LB_FIELDS)
                if _LB_FIELDS[0] in group else None)
    return ChunkRows(**st)


def rows_path(directory, i):
    """Where chunk ``i``'s rows go in a checkpoint's state group ``directory``."""
    return os.path.join(directory, "rows", f"{i:06d}")


def create_rows_group(directory):
    """The (empty) ``rows`` group of a checkpoint's state group ``directory``."""
    zarr.open_group(os.path.join(directory, "rows"), mode="w", zarr_format=3)
