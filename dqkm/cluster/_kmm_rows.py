"""K-Multiple-Means checkpoints: the rows of S each worker holds.

:func:`write_rows` and :func:`read_rows` give the per-chunk writer and reader
of :mod:`dqkm.data.kmm_rows` to :func:`dqkm.parallel.kmm.run_on_row_blocks`
and :func:`dqkm.parallel.kmm.persist_row_blocks`, so each chunk's rows are
written and read by a worker, not gathered on the driver.
"""

from __future__ import annotations

import os

from ..data.kmm_rows import OPTIONAL_ROWS, create_rows_group, read_block, rows_path, write_block
from ..parallel.kmm import persist_row_blocks, run_on_row_blocks

__all__ = ["OPTIONAL_ROWS", "read_rows", "write_rows"]


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
    create_rows_group(directory)
    paths = [rows_path(directory, i) for i in range(len(rows))]
    return [int(n) for n in run_on_row_blocks(write_block, rows, paths, "kmm-save")]


def read_rows(directory, n_blocks):
    """The rows written by :func:`write_rows` as ``n_blocks`` delayed load tasks
    (run by the workers, one per chunk), persisted: the ``rows`` of a
    :class:`~dqkm.parallel.kmm.KMMState`.  ``directory`` must be readable by
    every worker."""
    directory = os.path.abspath(str(directory))
    paths = [rows_path(directory, i) for i in range(n_blocks)]
    return persist_row_blocks(read_block, paths, "kmm-load")
