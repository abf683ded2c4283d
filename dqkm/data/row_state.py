"""Per-row state written beside re-read data: one ``.npy`` file per row block and pass.

A bound-pruned K-means pass (:mod:`dqkm.parallel.bounds`) over data that is
re-read from its store every pass keeps each row block's labels and bounds in
a file of its own, so that the workers' memory stays bounded by a few chunks.
The files of pass ``g`` are ``g{g:08d}-b{i:06d}.npy``; pass ``g`` reads those of
pass ``g − 1`` and writes its own (each atomically: a ``.tmp`` file renamed
into place), so a task run twice (a retried task, a killed worker) reads the
same input.  A block whose file is missing or unreadable has no state: its
caller recomputes it (for the bounds, with a plain Lloyd step, which is exact).

The directory is created by :func:`create_state_directory` and removed by
:func:`remove_state_directory` with only the files named here: nothing else
is deleted.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

__all__ = ["create_state_directory", "write_block_state", "read_block_state",
           "remove_block_states", "remove_state_directory"]

_NAME = "g{:08d}-b{:06d}.npy"


def create_state_directory(base=None) -> str:
    """Create a new, empty directory for per-row state under ``base``.

    ``base`` None: Dask's ``temporary-directory`` setting, else the system's
    temporary directory.  It must be visible to every worker (as the data is).
    """
    if base is None:
        import dask

        base = dask.config.get("temporary-directory", None) or tempfile.gettempdir()
    return tempfile.mkdtemp(prefix="dqkm-row-state-", dir=os.fspath(base))


def _path(directory, generation, index):
    return os.path.join(directory, _NAME.format(int(generation), int(index)))


def write_block_state(directory, generation, index, state) -> bool:
    """Write one block's state (a 2-D float64 array) for pass ``generation``.

    Returns False, writing nothing, when ``directory`` does not exist on this
    worker (e.g. a worker on another host): the block then has no state.
    """
    if not os.path.isdir(directory):
        return False
    path = _path(directory, generation, index)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        np.save(f, np.ascontiguousarray(state, dtype=np.float64), allow_pickle=False)
    os.replace(tmp, path)
    return True


def read_block_state(directory, generation, index, shape):
    """The state :func:`write_block_state` wrote, or None if it is missing or
    not of ``shape`` (then the caller recomputes it)."""
    try:
        with open(_path(directory, generation, index), "rb") as f:
            state = np.load(f, allow_pickle=False)
    except (OSError, ValueError):
        return None
    return state if state.shape == tuple(shape) and state.dtype == np.float64 else None


def remove_block_states(directory, generation, blocks) -> None:
    """Remove the files of pass ``generation`` for the block indices ``blocks``."""
    for i in blocks:
        for name in (_path(directory, generation, i), _path(directory, generation, i) + ".tmp"):
            try:
                os.remove(name)
            except FileNotFoundError:
                pass


def remove_state_directory(directory, generations, n_blocks) -> None:
    """Remove the files of the passes ``generations``, then the directory if that
    leaves it empty (nothing else is deleted)."""
    for g in generations:
        remove_block_states(directory, g, range(n_blocks))
    try:
        os.rmdir(directory)
    except OSError:
        pass
