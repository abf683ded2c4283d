"""Zarr v3 storage for data, labels and fitted models.

* :func:`as_dask_array` — NumPy, Dask, a Zarr array, or a Zarr store path/URL
  → a 2-D float Dask array chunked along rows only.
* :func:`save_array` / :func:`save_arrays` / :func:`load_array` — chunk-aligned
  Zarr v3 stores, written under a temporary name and renamed into place, so a
  failed write never leaves a partial store under the target name.
* :func:`save` / :func:`load` — fitted models without pickle (Zarr group or
  ``.npz`` + JSON, with a format version).
"""

from __future__ import annotations

import inspect
import json
import os
import time
import uuid
from pathlib import Path

import dask.array as da
import numpy as np
import zarr

from ._atomic import AtomicTarget as _AtomicTarget
from ._json import json_default
from .exceptions import DqkmError, ModelFileError
from .zarr_chunk_reader import from_zarr
from .parallel.data import to_dask
from .parallel.engine import compute_settled

__all__ = ["as_dask_array", "save_array", "save_arrays", "load_array", "open_store", "save",
           "load", "MODEL_FORMAT_VERSION"]

MODEL_FORMAT_VERSION = 1
_DEFAULT_COMPONENT = "X"


# ----------------------------------------------------------------------------- reading
def _is_url(path) -> bool:
    return isinstance(path, str) and "://" in path


def _is_path(X) -> bool:
    return isinstance(X, (str, os.PathLike))


def _local(path) -> str:
    """A local path as an absolute one (what a graph may carry to workers started
    elsewhere); a URL as it is."""
    return str(path) if _is_url(path) else os.path.abspath(os.fspath(path))


def open_store(path, component=None, *, storage_options=None):
    """Open a Zarr array stored at ``path`` (or the array ``component`` of the group there).

    A group with one array opens that array; a group with several opens
    ``component`` (default ``"X"``).  A local path is opened as an absolute
    path, so that arrays read from it mean the same files on every worker.
    """
    if not _is_url(path) and not Path(path).exists():
        raise FileNotFoundError(f"No Zarr store at {str(path)!r}.")
    node = zarr.open(str(path), mode="r", storage_options=storage_options) if _is_url(path) \
        else zarr.open(_local(path), mode="r")
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


def _from_zarr(arr, chunks=None) -> da.Array:
    # One task per stored chunk reading its file directly where possible, else
    # zarr-python; absolute paths, and tasks that check they see the store
    # (see dqkm.zarr_chunk_reader).
    return from_zarr(arr, chunks)


def load_array(path, component=None, *, chunks=None, storage_options=None) -> da.Array:
    """A Zarr array (any dtype and ndim) as a lazy Dask array chunked along rows.

    A CSR group written by :func:`dqkm.sparse.save_csr` comes back as a Dask
    array of CSR chunks (its own row chunks; ``chunks`` must be None).  A local
    ``path`` enters the graph as an absolute path; a task that cannot see the
    store raises :class:`~dqkm.exceptions.StoreError` naming it and the worker.
    """
    from .sparse import is_csr_store, load_csr

    path = _local(path)
    if is_csr_store(path, storage_options):
        if chunks is not None:
            raise ValueError("chunks cannot be changed when loading a CSR group; rechunk the "
                             "returned Dask array instead.")
        return load_csr(path, storage_options=storage_options)
    return _from_zarr(open_store(path, component, storage_options=storage_options), chunks)


def as_dask_array(X, chunks=None, *, component=None, storage_options=None) -> da.Array:
    """X as a 2-D float Dask array chunked along rows only.

    Parameters
    ----------
    X : ndarray, scipy.sparse matrix, Dask array, zarr.Array, or str/PathLike
        A path (local or fsspec URL such as ``s3://bucket/data.zarr``) to a Zarr
        array, to a group (its array ``component``, default ``"X"``) or to a
        CSR group (:mod:`dqkm.sparse`).  Sparse input (CSR, COO) stays sparse:
        a Dask array of CSR chunks.
    chunks : int or tuple, optional
        Rows per chunk.  Default: the store's row chunks, or ~64 MB chunks
        for in-memory data.

    Returns
    -------
    dask.array.Array of shape (n_samples, n_features), float32 or float64
        float32/float64 input keeps its dtype; other real dtypes become float64.

    Raises
    ------
    ValueError
        Not 2-D, or a large Dask array chunked along features (the message
        shows the ``rechunk`` call).
    TypeError
        Non-numeric data.
    """
    import scipy.sparse as sp

    from .sparse import check_sparse, sparse_to_dask

    if _is_path(X):
        Xd = load_array(X, component, chunks=chunks, storage_options=storage_options)
    elif sp.issparse(X):
        Xd = sparse_to_dask(X, chunks)
    elif isinstance(X, da.Array) and sp.issparse(X._meta):
        Xd = check_sparse(X, "as_dask_array")
        Xd = Xd if chunks is None else Xd.rechunk({0: chunks})
    elif type(X).__module__.startswith("zarr"):
        Xd = _from_zarr(X, chunks)
    else:
        Xd = to_dask(X, chunks=chunks)
    if Xd.ndim != 2:
        raise ValueError(f"Expected a 2-D array (n_samples, n_features); got {Xd.ndim}-D with "
                         f"shape {Xd.shape}. Reshape your data, e.g. X.reshape(-1, 1).")
    if Xd.dtype.kind not in "fiub":
        raise TypeError(f"X must hold real numbers; got dtype {Xd.dtype}.")
    if Xd.dtype not in (np.float32, np.float64):
        Xd = Xd.astype(np.float64)
    return to_dask(Xd)


# ----------------------------------------------------------------------------- writing
def _regular_rows(X: da.Array) -> da.Array:
    """Zarr needs equal chunks (the last may be smaller): rechunk rows if not."""
    rows = X.chunks[0]
    if len(rows) > 1 and (len(set(rows[:-1])) > 1 or rows[-1] > rows[0]):
        X = X.rechunk({0: max(rows)})
    if X.ndim > 1 and X.numblocks[1] > 1:
        X = X.rechunk({i: -1 for i in range(1, X.ndim)})
    return X


def check_writable(path, overwrite=False):
    """Raise now (before a long computation) what :func:`save_arrays` or
    :func:`save_array` would raise for ``path`` later: ``TargetExistsError`` (a
    ``FileExistsError``) if it exists and ``overwrite`` is false, ``StoreError``
    if it exists but is not a Zarr store or dqkm model file."""
    _AtomicTarget(path, overwrite).check()


def save_arrays(arrays: dict, path, *, overwrite=False, attrs=None, storage_options=None,
                compressors="auto", array_attrs=None):
    """Write several row-aligned arrays as one Zarr v3 group (one pass, atomic).

    ``arrays`` maps names to NumPy or Dask arrays; each is stored chunk-aligned
    with its Dask row chunks.  ``compressors`` is passed to Zarr ("auto": Zarr's
    default, zstd; None: uncompressed — see :func:`save_array`).  ``attrs`` are
    the group's attributes, ``array_attrs`` those of every array.  The group
    appears at ``path`` complete or not at all; ``overwrite=False`` is
    exclusive (of writers racing for a new path, one succeeds) and
    ``overwrite=True`` replaces only a Zarr store (see :mod:`dqkm._atomic`).
    Returns ``path``.
    """
    with _AtomicTarget(path, overwrite) as t:
        group = zarr.open_group(t.tmp_url, mode="w", zarr_format=3,
                                storage_options=storage_options if t.url else None)
        if attrs:
            group.attrs.update(attrs)
        stores = []
        for name, arr in arrays.items():
            if not isinstance(arr, da.Array):
                # in memory: written here by Zarr (no graph that would carry the data to
                # a distributed scheduler)
                arr = np.asarray(arr)
                rows = (max(1, min(arr.shape[0], 65536)),) if arr.ndim else ()
                z = group.create_array(name, shape=arr.shape, dtype=arr.dtype,
                                       chunks=rows + tuple(max(1, n) for n in arr.shape[1:]),
                                       compressors=compressors)
                if array_attrs:
                    z.attrs.update(array_attrs)
                z[...] = arr
                continue
            arr = _regular_rows(arr) if arr.ndim else arr
            z = group.create_array(name, shape=arr.shape, dtype=arr.dtype,
                                   chunks=tuple(max(1, c[0]) for c in arr.chunks),
                                   compressors=compressors)
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
    None stores chunks uncompressed, which reads ~4× faster (measured: 0.045 s
    vs 0.18–0.32 s for 200 MB of float32) at the cost of disk — worth it for
    float data that compresses little and is read once per iteration.

    Sparse X (a scipy.sparse matrix or a Dask array of CSR chunks) is written
    as a CSR group by :func:`dqkm.sparse.save_csr`.
    """
    import scipy.sparse as sp

    if sp.issparse(X) or (isinstance(X, da.Array) and sp.issparse(X._meta)):
        from .sparse import save_csr

        return save_csr(X, path, overwrite=overwrite, attrs=attrs,
                        storage_options=storage_options)
    with _AtomicTarget(path, overwrite) as t:
        arr = X if isinstance(X, da.Array) else to_dask(np.asarray(X)) if np.ndim(X) == 2 \
            else da.from_array(np.asarray(X), chunks=max(1, min(len(X), 1 << 20)))
        arr = _regular_rows(arr)
        z = zarr.create_array(t.tmp_url, shape=arr.shape, dtype=arr.dtype,
                              chunks=tuple(c[0] for c in arr.chunks), zarr_format=3,
                              compressors=compressors,
                              storage_options=storage_options if t.url else None)
        if attrs:
            z.attrs.update(attrs)
        compute_settled(da.store(arr, z, lock=False, compute=False))
    return path


# ----------------------------------------------------------------------------- models
# markers of a parameter saved as a nested model / operator (its arrays under a prefix)
_NESTED = "__dqkm_estimator__"
_OPERATOR = "__dqkm_operator__"
# estimators that dqkm.load may rebuild besides dqkm's top-level ones (name -> module);
# nothing else is instantiated
_MODEL_MODULES = {"ClusterIndex": "dqkm.neighbors",
                  "FactorNystroem": "dqkm.kernel_approximation"}


def _is_model(v) -> bool:
    return hasattr(v, "_get_state") and hasattr(v, "get_params") and not isinstance(v, type)


def pack_operator(op, prefix=""):
    """``(kind, arrays)`` of a dqkm linear operator (``SparseFactors``,
    ``HadamardLandmarks``); ``(None, {})`` for anything else."""
    from .kernels.hadamard import HadamardLandmarks
    from .kernels.sparse_factors import SparseFactors

    if isinstance(op, SparseFactors):
        return "SparseFactors", {f"{prefix}{k}": v for k, v in op.to_arrays().items()}
    if isinstance(op, HadamardLandmarks):
        return "HadamardLandmarks", {f"{prefix}seeds": op.seeds, f"{prefix}blocks": op.blocks,
                                     f"{prefix}rows": op.rows}
    return None, {}


def unpack_operator(kind, arrays, prefix=""):
    """The operator :func:`pack_operator` packed."""
    from .kernels.hadamard import HadamardLandmarks
    from .kernels.sparse_factors import SparseFactors

    own = {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}
    if kind == "SparseFactors":
        return SparseFactors.from_arrays(own)
    if kind == "HadamardLandmarks":
        return HadamardLandmarks(own["seeds"], own["blocks"], own["rows"])
    raise ModelFileError(f"The model file holds an operator of kind {kind!r}, which dqkm does "
                         "not know (SparseFactors, HadamardLandmarks).")


def _split_params(params, prefix=""):
    plain, arrays = {}, {}
    for k, v in params.items():
        kind, op_arrays = pack_operator(v, f"{prefix}param__{k}__")
        if _is_model(v):
            header, nested = pack_model(v, f"{prefix}param__{k}__")
            plain[k] = {_NESTED: header}
            arrays.update(nested)
        elif kind is not None:
            plain[k] = {_OPERATOR: kind}
            arrays.update(op_arrays)
        elif isinstance(v, np.ndarray) or (hasattr(v, "__array__") and not np.isscalar(v)):
            arrays[f"{prefix}param__{k}"] = np.asarray(v)
        elif v is None or isinstance(v, (bool, int, float, str, dict, list, np.generic)):
            plain[k] = v
        elif isinstance(v, os.PathLike):  # e.g. a store path: loaded back as str
            plain[k] = os.fspath(v)
        else:
            raise TypeError(f"Parameter {k!r}={v!r} of the model cannot be saved without "
                            "pickle; set it to an int/float/str/None (or a dqkm estimator or "
                            "operator) first.")
    return plain, arrays


def _estimator_class(name):
    import importlib

    import dqkm

    module = _MODEL_MODULES.get(name)
    cls = getattr(importlib.import_module(module), name) if module else getattr(dqkm, name, None)
    if not (isinstance(cls, type) and hasattr(cls, "_set_state")):
        raise ModelFileError(f"The model file names estimator {name!r}, which dqkm does not "
                             "know; it was written by another program or edited.")
    return cls


def _is_fitted(model) -> bool:
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    try:
        check_is_fitted(model)
    except NotFittedError:
        return False
    return True


def pack_model(model, prefix=""):
    """``(header, arrays)`` of a dqkm estimator, fitted or not, without pickle.

    ``header`` (JSON-able): the estimator's name, its parameters (a parameter
    that is itself a dqkm estimator is packed the same way, nested) and, when
    fitted, the fitted state's scalars (``None`` when unfitted).  ``arrays``:
    every array, named ``prefix + name`` (parameters ``prefix + 'param__' + name``),
    so that several models share one container.  :func:`unpack_model` inverts it.
    """
    params, arrays = _split_params(model.get_params(deep=False), prefix)
    header = {"estimator": type(model).__name__, "params": params, "state": None}
    if _is_fitted(model):
        state_arrays, meta = model._get_state()
        arrays.update({f"{prefix}{k}": v for k, v in state_arrays.items()})
        header["state"] = meta
    return json.loads(json.dumps(header, default=json_default)), arrays


def unpack_model(header, arrays, prefix="", *, source="(in memory)"):
    """The estimator :func:`pack_model` packed (fitted if it was).

    The parameters must be the estimator's, and the fitted state what it
    declares (:mod:`dqkm._model_check`): anything else is refused with
    ``ModelFileError`` naming ``source`` (the file) and the key.
    """
    from ._model_check import check_fitted, check_state

    if not isinstance(header, dict) or not isinstance(header.get("params"), dict):
        raise ModelFileError(f"The model file {source} has no estimator parameters in its "
                             "header; it was not written by dqkm.save.")
    cls = _estimator_class(header.get("estimator"))
    known = {p.name for p in inspect.signature(cls.__init__).parameters.values()
             if p.name != "self" and p.kind != p.VAR_KEYWORD}
    params = {}
    for k, v in header["params"].items():
        if k not in known:
            raise ModelFileError(f"The model file {source} gives {cls.__name__} the parameter "
                                 f"{k!r}, which is not one of its parameters {sorted(known)}.")
        if isinstance(v, dict) and _NESTED in v:
            params[k] = unpack_model(v[_NESTED], arrays, f"{prefix}param__{k}__", source=source)
        elif isinstance(v, dict) and _OPERATOR in v:
            params[k] = unpack_operator(v[_OPERATOR], arrays, f"{prefix}param__{k}__")
        else:
            params[k] = v
    own, state = f"{prefix}param__", {}
    for name, v in arrays.items():
        if name.startswith(own) and "__" not in name[len(own):]:
            if name[len(own):] not in known:
                raise ModelFileError(f"The model file {source} holds the array {name!r}, "
                                     f"which is not a parameter of {cls.__name__}.")
            params[name[len(own):]] = v          # an array-valued parameter
        elif name.startswith(prefix) and not name.startswith(own):
            state[name[len(prefix):]] = v        # this model's state (and states it nests)
    model = cls(**params)
    if header.get("state") is None:
        return model
    check_state(cls.__name__, params, state, header["state"], source, prefix)
    model = model._set_state(state, header["state"])
    check_fitted(model, source)
    return model


def save(model, path, *, overwrite=False):
    """Save a fitted dqkm model without pickle.

    ``path`` ending in ``.npz``: one NumPy archive (``allow_pickle=False``)
    holding the arrays and a JSON header; otherwise a Zarr v3 group (arrays +
    JSON attributes).  Both carry ``format_version``, the names of the arrays
    and a write id that every array of a Zarr group repeats, so that a reader
    never mixes two saves.  Estimators given as parameters (a
    ``ClusterIndex``'s clusterer, a ``FactorNystroem``'s landmark model) are
    saved with it; a ``ClusterIndex`` whose index lives in its own Zarr
    ``store`` saves the store's location, not its rows.

    The model appears at ``path`` complete or not at all, also when
    interrupted.  ``overwrite=False`` is exclusive: of several saves racing
    for a new path one succeeds, the others raise ``TargetExistsError`` (a
    ``FileExistsError``).  ``overwrite=True`` replaces the file (``.npz``) in
    one ``os.replace`` or swaps the Zarr group in one rename, so that a
    concurrent :func:`load` gets the old model or the new one; it replaces
    only a Zarr store or a dqkm ``.npz``, anything else raises ``StoreError``.
    """
    if not _is_model(model):
        raise TypeError(f"dqkm.save saves dqkm estimators; got {type(model).__name__}.")
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(model)
    header, arrays = pack_model(model)
    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    write_id = uuid.uuid4().hex
    header = {"format_version": MODEL_FORMAT_VERSION, **header, "write_id": write_id,
              "arrays": sorted(arrays)}
    if str(path).endswith(".npz"):
        with _AtomicTarget(path, overwrite) as t:
            with open(t.tmp, "wb") as f:
                np.savez(f, __header__=np.frombuffer(json.dumps(header).encode(), np.uint8),
                         **arrays)
        return path
    return save_arrays(arrays, path, overwrite=overwrite, attrs={"dqkm": header},
                       array_attrs={_WRITE_ID: write_id})


_WRITE_ID = "dqkm_write_id"
_READ_ATTEMPTS = 20


class _ChangedWhileReading(Exception):
    pass


def _read_npz(path):
    with np.load(str(path), allow_pickle=False) as f:
        if "__header__" not in f.files:
            raise ModelFileError(f"{str(path)!r} is a .npz archive but not a dqkm model (no "
                                 "'__header__' entry).")
        header = json.loads(bytes(f["__header__"]).decode())
        arrays = {k: f[k] for k in f.files if k != "__header__"}
    return header, arrays


def _current_write_id(path):
    try:
        return dict(zarr.open_group(str(path), mode="r").attrs.get("dqkm", {})).get("write_id")
    except Exception:  # noqa: BLE001 - being replaced: no id now
        return None


def _read_zarr(path):
    group = zarr.open(str(path), mode="r")
    if not isinstance(group, zarr.Group) or "dqkm" not in group.attrs:
        raise ModelFileError(f"{str(path)!r} is a Zarr store but not a dqkm model (no 'dqkm' "
                             "attribute); data stores are read with dqkm.io.as_dask_array.")
    header = dict(group.attrs["dqkm"])
    write_id = header.get("write_id")
    arrays = {}
    try:
        for name, a in group.arrays():
            if write_id is not None and a.attrs.get(_WRITE_ID) != write_id:
                raise _ChangedWhileReading(name)
            arrays[name] = np.asarray(a[...])
    except Exception:
        if write_id is not None and _current_write_id(path) != write_id:
            raise _ChangedWhileReading(path) from None
        raise
    # every save has its own id: the same id after reading means no save came between
    if write_id is not None and _current_write_id(path) != write_id:
        raise _ChangedWhileReading(path)
    return header, arrays


def _read_header(path):
    """``(header, arrays)`` of a saved model; ``ModelFileError`` naming the path if
    the file is damaged, truncated, not dqkm's, or lacks an array its header lists.

    A Zarr group replaced by a concurrent :func:`save` while being read (its
    arrays' write id differs from the header's) is read again.
    """
    import zipfile

    for attempt in range(_READ_ATTEMPTS):
        try:
            header, arrays = (_read_npz if str(path).endswith(".npz") else _read_zarr)(path)
        except _ChangedWhileReading:
            time.sleep(0.001 * attempt)
            continue
        except FileNotFoundError:
            if not _is_url(path) and Path(path).exists():
                time.sleep(0.001 * attempt)
                continue     # a file of the group vanished: replaced while being read
            raise
        except ModelFileError:
            raise
        except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError, TypeError,
                UnicodeDecodeError) as e:
            raise ModelFileError(f"The model file {str(path)!r} is damaged or truncated "
                                 f"({type(e).__name__}: {e}); save the model again.") from e
        break
    else:
        raise ModelFileError(f"The model at {str(path)!r} kept changing while being read "
                             f"({_READ_ATTEMPTS} attempts): another process is saving to it.")
    if not isinstance(header, dict):
        raise ModelFileError(f"The model file {str(path)!r} has a header that is not a JSON "
                             "object; it was not written by dqkm.save.")
    missing = sorted(set(header.get("arrays", ())) - set(arrays))
    if missing:
        raise ModelFileError(f"The model file {str(path)!r} lacks the arrays {missing} its "
                             "header lists; it is damaged or truncated: save the model again.")
    return header, arrays


def load(path):
    """Load a model written by :func:`save` (no code is executed from the file).

    Raises
    ------
    FileNotFoundError
        Nothing at ``path``.
    ModelFileError
        The file is damaged, truncated or not a dqkm model, has another format
        version, or holds parameters, arrays or scalars that its estimator does
        not declare (the message names the path and the key).
    """
    if not _is_url(path) and not Path(path).exists():
        raise FileNotFoundError(f"No dqkm model at {str(path)!r}.")
    header, arrays = _read_header(path)
    version = header.get("format_version")
    if version != MODEL_FORMAT_VERSION:
        raise ModelFileError(f"{str(path)!r} has model format version {version}; this dqkm "
                             f"reads version {MODEL_FORMAT_VERSION}.")
    source = repr(str(path))
    try:
        return unpack_model(header, arrays, source=source)
    except ModelFileError as e:
        if source in str(e):
            raise
        raise ModelFileError(f"The model file {source}: {e}") from e
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        if isinstance(e, DqkmError):
            raise
        raise ModelFileError(f"The model file {source} cannot be rebuilt "
                             f"({type(e).__name__}: {e}); it was damaged or edited after "
                             "dqkm.save: save the model again.") from e


def model_info(path) -> dict:
    """The JSON header of a saved model (estimator, parameters, fitted scalars) and
    ``arrays``: each array's ``[shape, dtype]``."""
    header, arrays = _read_header(path)
    header["arrays"] = {k: (list(v.shape), str(v.dtype)) for k, v in arrays.items()}
    return header
