"""Zarr v3 array stores: open, load and save, atomically.

* :func:`open_store` / :func:`load_array` — a Zarr array (or a group's array,
  or a CSR group) as a lazy Dask array chunked along rows; local paths enter
  the graph absolute.
* :func:`save_array` / :func:`save_arrays` — chunk-aligned Zarr v3 stores,
  written under a temporary name and renamed into place, so a failed write
  never leaves a partial store under the target name (:mod:`dqkm.data.atomic`).
"""

from __future__ import annotations

from pathlib import Path

import dask.array as da
import numpy as np
import scipy.sparse as sp
import zarr

from ..exceptions import InvalidParameterError
from .atomic import AtomicTarget
from .chunks import auto_row_chunks
from .csr import is_csr_store, load_csr, save_csr
from .execute import compute_settled
from .paths import is_url, local_path
from .zarr_reader import from_zarr

__all__ = ["open_store", "load_array", "save_array", "save_arrays", "check_writable",
           "is_url", "local_path", "dimension_names", "group_dimension_names"]

_DEFAULT_COMPONENT = "X"


def open_store(path, component=None, *, storage_options=None):
    """Open a Zarr array stored at ``path`` (or the array ``component`` of the group there).

    A group with one array opens that array; a group with several opens
    ``component`` (default ``"X"``).  A local path is opened as an absolute
    path, so that arrays read from it mean the same files on every worker.

    Parameters
    ----------
    path : str or PathLike
        A local path or an fsspec URL of a Zarr array or group.
    component : str, optional
        The array of a group to open (default ``"X"`` when the group holds
        several).
    storage_options : dict, optional
        Passed to fsspec for URLs.

    Returns
    -------
    zarr.Array

    Examples
    --------
    >>> import os, shutil, tempfile
    >>> import numpy as np
    >>> tmp = tempfile.mkdtemp()
    >>> from dqkm.io import open_store, save_array
    >>> path = save_array(np.ones((6, 2), np.float32), os.path.join(tmp, "x.zarr"))
    >>> open_store(path).shape
    (6, 2)
    >>> shutil.rmtree(tmp)
    """
    if not is_url(path) and not Path(path).exists():
        raise FileNotFoundError(f"No Zarr store at {str(path)!r}.")
    node = zarr.open(str(path), mode="r", storage_options=storage_options) if is_url(path) \
        else zarr.open(local_path(path), mode="r")
    if isinstance(node, zarr.Group):
        names = sorted(name for name, _ in node.arrays())
        if component is None:
            component = _DEFAULT_COMPONENT if _DEFAULT_COMPONENT in names else (
                names[0] if len(names) == 1 else None)
        if component not in names:
            raise ValueError(f"The Zarr group at {str(path)!r} holds arrays {names}; pass "
                             "component=<name> to choose one.")
        node = node[component]
    return node


def load_array(path, component=None, *, chunks=None, storage_options=None) -> da.Array:
    """A Zarr array (any dtype and ndim) as a lazy Dask array chunked along rows.

    A CSR group written by :func:`dqkm.sparse.save_csr` comes back as a Dask
    array of CSR chunks (its own row chunks; ``chunks`` must be None).  A local
    ``path`` enters the graph as an absolute path; a task that cannot see the
    store raises :class:`~dqkm.exceptions.StoreError` naming it and the worker.

    Parameters
    ----------
    path : str or PathLike
        A local path or an fsspec URL of a Zarr array, a group or a CSR group.
    component : str, optional
        The array of a group to read (default ``"X"`` when it holds several).
    chunks : int, optional
        Rows per chunk (default: the store's row chunks).
    storage_options : dict, optional
        Passed to fsspec for URLs.

    Returns
    -------
    dask.array.Array
        Lazy; each task reads its rows from the store.

    Examples
    --------
    >>> import os, shutil, tempfile
    >>> import numpy as np
    >>> tmp = tempfile.mkdtemp()
    >>> from dqkm.io import load_array, save_array
    >>> path = save_array(np.arange(12.).reshape(6, 2), os.path.join(tmp, "x.zarr"))
    >>> load_array(path, chunks=3).sum().compute()
    np.float64(66.0)
    >>> shutil.rmtree(tmp)
    """
    path = local_path(path)
    if is_csr_store(path, storage_options):
        if chunks is not None:
            raise InvalidParameterError("chunks cannot be changed when loading a CSR group; "
                                        "rechunk the returned Dask array instead.")
        return load_csr(path, storage_options=storage_options)
    return from_zarr(open_store(path, component, storage_options=storage_options), chunks)


# ----------------------------------------------------------------------------- writing
def dimension_names(ndim, name=None, rows="sample"):
    """The names of an array's dimensions in the stores dqkm writes (Zarr v3
    ``dimension_names``, which ``xarray.open_zarr`` reads as the dimensions):
    ``rows`` for the first, ``"feature"`` (or ``"<name>_feature"``) for the
    second, ``"dim_<axis>"`` (or ``"<name>_dim_<axis>"``) beyond."""
    prefix = "" if name is None else f"{name}_"
    rest = [f"{prefix}feature" if axis == 1 else f"{prefix}dim_{axis}"
            for axis in range(1, ndim)]
    return tuple([rows] + rest) if ndim else ()


def group_dimension_names(shapes: dict) -> dict:
    """Dimension names of the arrays of one group (name -> shape): rows are
    ``"sample"`` when all arrays have as many rows (row-aligned data), else
    ``"<name>_rows"``; ``X``'s second dimension is ``"feature"``, the other
    arrays' are prefixed by their name (sizes may differ)."""
    n_rows = {s[0] for s in shapes.values() if len(s)}
    return {name: dimension_names(
        len(s), None if name == "X" else name,
        "sample" if len(n_rows) == 1 else f"{name}_rows") for name, s in shapes.items()}


def _regular_rows(X: da.Array) -> da.Array:
    """Zarr needs equal chunks (the last may be smaller): rechunk rows if not."""
    rows = X.chunks[0]
    if len(rows) > 1 and (len(set(rows[:-1])) > 1 or rows[-1] > rows[0]):
        X = X.rechunk({0: max(rows)})
    if X.ndim > 1 and X.numblocks[1] > 1:
        X = X.rechunk({i: -1 for i in range(1, X.ndim)})
    return X


def _in_memory(X: np.ndarray) -> da.Array:
    """An in-memory array to write: 2-D in ~64 MB row chunks, else 1 Mi-row chunks."""
    if X.ndim == 2:
        return da.from_array(X, chunks=(auto_row_chunks(*X.shape, X.dtype.itemsize), -1))
    return da.from_array(X, chunks=max(1, min(len(X), 1 << 20)))


def check_writable(path, overwrite=False):
    """Raise now (before a long computation) what :func:`save_arrays` or
    :func:`save_array` would raise for ``path`` later: ``TargetExistsError`` (a
    ``FileExistsError``) if it exists and ``overwrite`` is false, ``StoreError``
    if it exists but is not a Zarr store or dqkm model file.

    Parameters
    ----------
    path : str or path-like
        Where the store or model is to be written.
    overwrite : bool, default=False
        As for :func:`save_array`: whether an existing Zarr store or dqkm
        model file there may be replaced.

    Returns
    -------
    None
        When the write would be allowed.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> from dqkm.io import check_writable, save_array
    >>> path = os.path.join(tempfile.mkdtemp(), "x.zarr")
    >>> check_writable(path)  # nothing there yet: fine
    >>> _ = save_array(np.zeros((4, 2)), path)
    >>> check_writable(path)
    Traceback (most recent call last):
    ...
    dqkm.data.atomic.TargetExistsError: ...
    >>> check_writable(path, overwrite=True)
    """
    AtomicTarget(path, overwrite).check()


def save_arrays(arrays: dict, path, *, overwrite=False, attrs=None, storage_options=None,
                compressors="auto", array_attrs=None):
    """Write several row-aligned arrays as one Zarr v3 group (one pass, atomic).

    ``arrays`` maps names to NumPy or Dask arrays; each is stored chunk-aligned
    with its Dask row chunks.  ``compressors`` is passed to Zarr ("auto": Zarr's
    default, zstd; None: uncompressed — see :func:`save_array`).  ``attrs`` are
    the group's attributes, ``array_attrs`` those of every array.  The group
    appears at ``path`` complete or not at all; ``overwrite=False`` is
    exclusive (of writers racing for a new path, one succeeds) and
    ``overwrite=True`` replaces only a Zarr store (see ``dqkm._atomic``).
    Returns ``path``.

    Parameters
    ----------
    arrays : dict of str to ndarray or dask.array.Array
        Row-aligned arrays (same number of rows).
    path : str or PathLike
        Where the group is written (a local path or an fsspec URL).
    overwrite : bool, default=False
        Replace an existing Zarr store at ``path``.
    attrs : dict, optional
        JSON attributes of the group.
    storage_options : dict, optional
        Passed to fsspec for URLs.
    compressors : "auto", None or Zarr compressors, default="auto"
    array_attrs : dict, optional
        JSON attributes of every array.

    Returns
    -------
    str
        ``path``.

    Examples
    --------
    >>> import os, shutil, tempfile
    >>> import numpy as np
    >>> tmp = tempfile.mkdtemp()
    >>> from dqkm.io import load_array, save_arrays
    >>> path = save_arrays({"X": np.ones((4, 2)), "y": np.arange(4)}, os.path.join(tmp, "g.zarr"))
    >>> load_array(path, "y").compute().tolist()
    [0, 1, 2, 3]
    >>> shutil.rmtree(tmp)
    """
    with AtomicTarget(path, overwrite) as t:
        group = zarr.open_group(t.tmp_url, mode="w", zarr_format=3,
                                storage_options=storage_options if t.url else None)
        if attrs:
            group.attrs.update(attrs)
        dims = group_dimension_names({k: np.shape(v) for k, v in arrays.items()})
        stores = []
        for name, arr in arrays.items():
            if not isinstance(arr, da.Array):
                # in memory: written here by Zarr (no graph that would carry the data to
                # a distributed scheduler)
                arr = np.asarray(arr)
                rows = (max(1, min(arr.shape[0], 65536)),) if arr.ndim else ()
                z = group.create_array(name, shape=arr.shape, dtype=arr.dtype,
                                       chunks=rows + tuple(max(1, n) for n in arr.shape[1:]),
                                       compressors=compressors,
                                       dimension_names=dims[name])
                if array_attrs:
                    z.attrs.update(array_attrs)
                z[...] = arr
                continue
            arr = _regular_rows(arr) if arr.ndim else arr
            z = group.create_array(name, shape=arr.shape, dtype=arr.dtype,
                                   chunks=tuple(max(1, c[0]) for c in arr.chunks),
                                   compressors=compressors, dimension_names=dims[name])
            if array_attrs:
                z.attrs.update(array_attrs)
            stores.append(da.store(arr, z, lock=False, compute=False))
        if stores:
            compute_settled(*stores)
    return path


def save_array(X, path, *, overwrite=False, attrs=None, storage_options=None,
               compressors="auto"):
    """Write one array as a Zarr v3 array store (chunk-aligned, atomic).

    ``compressors`` is passed to Zarr: "auto" is Zarr's default (zstd level 0);
    None stores chunks uncompressed, which reads several times faster at the
    cost of disk — worth it for float data that compresses little and is read
    once per iteration.

    Sparse X (a scipy.sparse matrix or a Dask array of CSR chunks) is written
    as a CSR group by :func:`dqkm.sparse.save_csr`.

    Parameters
    ----------
    X : ndarray, dask.array.Array or scipy.sparse matrix
        The array to write (any dtype; chunk-aligned with its Dask row chunks).
    path : str or PathLike
        Where the store is written (a local path or an fsspec URL).
    overwrite : bool, default=False
        Replace an existing Zarr store at ``path`` (nothing else is replaced).
    attrs : dict, optional
        JSON attributes of the array.
    storage_options : dict, optional
        Passed to fsspec for URLs.
    compressors : "auto", None or Zarr compressors, default="auto"

    Returns
    -------
    str
        ``path``.

    Examples
    --------
    >>> import os, shutil, tempfile
    >>> import numpy as np
    >>> tmp = tempfile.mkdtemp()
    >>> from dqkm.io import load_array, save_array
    >>> path = save_array(np.eye(3), os.path.join(tmp, "eye.zarr"), compressors=None)
    >>> load_array(path).compute().trace()
    np.float64(3.0)
    >>> shutil.rmtree(tmp)
    """
    if sp.issparse(X) or (isinstance(X, da.Array) and sp.issparse(X._meta)):
        return save_csr(X, path, overwrite=overwrite, attrs=attrs,
                        storage_options=storage_options)
    with AtomicTarget(path, overwrite) as t:
        arr = X if isinstance(X, da.Array) else _in_memory(np.asarray(X))
        arr = _regular_rows(arr)
        z = zarr.create_array(t.tmp_url, shape=arr.shape, dtype=arr.dtype,
                              chunks=tuple(c[0] for c in arr.chunks), zarr_format=3,
                              compressors=compressors,
                              dimension_names=dimension_names(arr.ndim),
                              storage_options=storage_options if t.url else None)
        if attrs:
            z.attrs.update(attrs)
        compute_settled(da.store(arr, z, lock=False, compute=False))
    return path

