"""The cluster index's Zarr v3 group: rows grouped by cluster, written and opened here.

A group holds the arrays ``X`` (rows in cluster order), ``ids`` (their
original row ids), ``sq_norms`` (their squared norms), ``offsets`` (cluster
``c`` is rows ``offsets[c]:offsets[c+1]``) and any ``extra_<name>`` per-row
arrays, and the attribute ``dqkm_index`` with the format version of
:mod:`dqkm.data.formats`, the write's ``uid`` and the shapes.  Paths are
made absolute here, before they enter a graph, so that a worker started in
another directory opens the same group.
"""

from __future__ import annotations

import uuid

import numpy as np
import zarr

from .formats import INDEX_FORMAT_VERSION
from .paths import local_path
from .stores import save_arrays

__all__ = ["write_index_store", "read_index_meta", "open_index_arrays", "INDEX_FORMAT_VERSION"]

_ATTR = "dqkm_index"


def write_index_store(arrays, path, *, overwrite=False, n_clusters, n_samples, n_features,
                      dtype):
    """Write the index ``arrays`` (names as in the module docstring) to a Zarr group at
    ``path``, atomically; return the absolute path (a URL as it is)."""
    path = local_path(path)
    save_arrays(arrays, path, overwrite=overwrite,
                # uid: this write's identity (a new one per write, so that a rewritten
                # index is never taken for the one it replaced)
                attrs={_ATTR: {"format_version": INDEX_FORMAT_VERSION,
                               "uid": uuid.uuid4().hex,
                               "n_clusters": int(n_clusters),
                               "n_samples": int(n_samples),
                               "n_features": int(n_features),
                               "dtype": str(dtype)}})
    return path


def read_index_meta(path):
    """``(path, offsets, uid)`` of the index group at ``path``: the absolute path, the
    cluster offsets and the write's uid; a ``ValueError`` for another format version."""
    path = local_path(path)
    g = zarr.open_group(path, mode="r")
    meta = dict(g.attrs.get(_ATTR, {}))
    if meta.get("format_version") != INDEX_FORMAT_VERSION:
        raise ValueError(f"{path!r} is not a dqkm cluster index of format version "
                         f"{INDEX_FORMAT_VERSION} (found {meta.get('format_version')}).")
    return path, np.asarray(g["offsets"][...]), meta.get("uid")


def open_index_arrays(path):
    """The lazily read Zarr arrays ``(X, ids, sq_norms)`` of the index group at ``path``."""
    g = zarr.open_group(str(path), mode="r")
    return g["X"], g["ids"], g["sq_norms"]
