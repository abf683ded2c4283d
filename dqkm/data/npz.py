"""Named arrays in one ``.npz`` archive, without pickle (the sparse-factor files).

A leaf of the data layer: it imports nothing from dqkm, so that
:mod:`dqkm.kernels` (whose ``SparseFactors.save``/``load`` call it) stays
free of Dask.
"""

from __future__ import annotations

import os

import numpy as np

__all__ = ["read_arrays", "write_arrays"]


def write_arrays(path, arrays):
    """Write the dict ``arrays`` (name → ndarray) as ``.npz`` to ``path``: a filename
    (used as given, no suffix added) or a binary file object."""
    if isinstance(path, (str, os.PathLike)):
        with open(path, "wb") as f:
            np.savez(f, **arrays)
    else:
        np.savez(path, **arrays)


def read_arrays(path):
    """Every array of the ``.npz`` archive at ``path`` (a filename or a binary file
    object), read with ``allow_pickle=False``."""
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}
