"""Fitted models without pickle: ``dqkm.save`` / ``dqkm.load``.

A model is packed into a JSON header (estimator name, parameters, fitted
scalars) and named arrays (:func:`pack_model`), and written as a Zarr v3 group
(arrays + JSON attributes) or one ``.npz`` archive, with the format version of
:mod:`dqkm.data.formats` and a write id.  Loading instantiates only dqkm's own
estimators, found by name (:func:`_estimator_class`), and checks every
parameter, array and scalar against what the estimator declares.
"""

from __future__ import annotations

import importlib
import inspect
import io
import json
import os
import time
import uuid
import zipfile
from pathlib import Path

import numpy as np
import zarr
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from .._model_check import check_fitted, check_state
from ..exceptions import DqkmError, InvalidParameterError, ModelFileError
from ..kernels.hadamard import HadamardLandmarks
from ..kernels.sparse_factors import SparseFactors
from .atomic import AtomicTarget
from .formats import MODEL_FORMAT_VERSION
from .jsonvalues import json_default
from .stores import is_url, save_arrays

__all__ = ["save", "load", "model_info", "pack_model", "unpack_model", "pack_operator",
           "unpack_operator", "MODEL_FORMAT_VERSION"]

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
    ``HadamardLandmarks``); ``(None, {})`` for anything else.

    Parameters
    ----------
    op : object
        The operator to pack.
    prefix : str, default=''
        Prepended to every array name, so that several operators share one
        container.

    Returns
    -------
    kind : str or None
        The operator's class name, None when ``op`` is not a dqkm operator.
    arrays : dict of str to ndarray
        Its arrays, named ``prefix + name``.

    Examples
    --------
    >>> import numpy as np
    >>> from dqkm.io import pack_operator, unpack_operator
    >>> from dqkm.kernels import SparseFactors
    >>> op = SparseFactors([np.eye(2), np.array([[1.0, 2.0], [0.0, 3.0]])])
    >>> kind, arrays = pack_operator(op)
    >>> kind
    'SparseFactors'
    >>> bool(np.allclose(unpack_operator(kind, arrays).toarray(), op.toarray()))
    True
    >>> pack_operator(np.eye(2))
    (None, {})
    """
    if isinstance(op, SparseFactors):
        return "SparseFactors", {f"{prefix}{k}": v for k, v in op.to_arrays().items()}
    if isinstance(op, HadamardLandmarks):
        return "HadamardLandmarks", {f"{prefix}seeds": op.seeds, f"{prefix}blocks": op.blocks,
                                     f"{prefix}rows": op.rows}
    return None, {}


def unpack_operator(kind, arrays, prefix=""):
    """The operator :func:`pack_operator` packed.

    Parameters
    ----------
    kind : str
        The ``kind`` :func:`pack_operator` returned.
    arrays : mapping of str to ndarray
        The arrays it returned (other names may be there too).
    prefix : str, default=''
        The prefix it was given.

    Returns
    -------
    SparseFactors or HadamardLandmarks
        The operator, equal to the one packed.

    Examples
    --------
    >>> import numpy as np
    >>> from dqkm.io import pack_operator, unpack_operator
    >>> from dqkm.kernels import SparseFactors
    >>> kind, arrays = pack_operator(SparseFactors([np.array([[2.0, 0.0], [0.0, 1.0]])]))
    >>> unpack_operator(kind, arrays).toarray()
    array([[2., 0.],
           [0., 1.]])
    """
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
    # Found by name at run time, not imported: the data layer does not depend on the
    # estimators (tests/test_layering.py); only dqkm's own classes can be named.
    module = _MODEL_MODULES.get(name, "dqkm")
    cls = getattr(importlib.import_module(module), name, None)
    if not (isinstance(cls, type) and hasattr(cls, "_set_state")):
        raise ModelFileError(f"The model file names estimator {name!r}, which dqkm does not "
                             "know; it was written by another program or edited.")
    return cls


def _is_fitted(model) -> bool:
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

    Parameters
    ----------
    model : dqkm estimator
        Fitted or not.
    prefix : str, default=''
        Prepended to every array name.

    Returns
    -------
    header : dict
        JSON-able: ``estimator``, ``params`` and the fitted scalars.
    arrays : dict of str to ndarray
        Every array of the model, named ``prefix + name``.

    Examples
    --------
    >>> import numpy as np, dqkm
    >>> from dqkm.io import pack_model
    >>> km = dqkm.KMeans(2, random_state=0).fit(np.array([[0., 0], [0, 1], [5, 5], [5, 6]]))
    >>> header, arrays = pack_model(km)
    >>> header["estimator"], header["params"]["n_clusters"], "cluster_centers_" in arrays
    ('KMeans', 2, True)
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
    declares (``dqkm._model_check``): anything else is refused with
    ``ModelFileError`` naming ``source`` (the file) and the key.

    Parameters
    ----------
    header : dict
        The ``header`` :func:`pack_model` returned (or read back from JSON).
    arrays : mapping of str to ndarray
        Its arrays.
    prefix : str, default=''
        The prefix it was given.
    source : str, keyword-only
        What the error messages name as the origin (a file path).

    Returns
    -------
    estimator
        A new estimator of the packed class and parameters, fitted when the
        packed one was.

    Examples
    --------
    >>> import numpy as np, dqkm
    >>> from dqkm.io import pack_model, unpack_model
    >>> km = dqkm.KMeans(2, random_state=0).fit(np.array([[0., 0], [0, 1], [5, 5], [5, 6]]))
    >>> back = unpack_model(*pack_model(km))
    >>> bool((back.cluster_centers_ == km.cluster_centers_).all())
    True
    """
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

    ``path`` may be an fsspec URL.  A ``file://`` URL is a local path and gets
    the guarantees above.  Filesystems without atomic rename (``memory://``,
    object stores) get what they allow: a ``.npz`` is put as one object (a
    reader gets the old or the new one; ``overwrite=False`` uses the
    filesystem's exclusive create, atomic where the backend makes it so); a
    Zarr group is committed file by file with its root metadata as the commit
    point, and :func:`load` checks the write id of every array, so that a
    reader gets the old model, the new one, or a ``ModelFileError`` — never a
    mix (the module ``dqkm.data.atomic`` describes the protocol).

    Parameters
    ----------
    model : fitted dqkm estimator
        ``KMeans``, ``QKMeans``, ``KMeansL1``, ``SparseEmbeddedKMeans``,
        ``KMultipleMeans``, ``ClusterIndex`` or ``FactorNystroem``.
    path : str or PathLike
        ``*.npz`` for one NumPy archive, anything else for a Zarr group.
    overwrite : bool, default=False
        Replace an existing dqkm model at ``path``.

    Returns
    -------
    str
        ``path``.

    Examples
    --------
    >>> import os, shutil, tempfile
    >>> import numpy as np
    >>> tmp = tempfile.mkdtemp()
    >>> import dqkm
    >>> X = np.array([[0., 0.], [0., 1.], [10., 10.], [10., 11.]])
    >>> km = dqkm.KMeans(2, random_state=0).fit(X)
    >>> path = dqkm.save(km, os.path.join(tmp, "km.zarr"))
    >>> dqkm.load(path).predict(X).tolist() == km.predict(X).tolist()
    True
    >>> shutil.rmtree(tmp)
    """
    if not _is_model(model):
        raise InvalidParameterError(f"dqkm.save saves dqkm estimators; got "
                                    f"{type(model).__name__}.")
    check_is_fitted(model)
    header, arrays = pack_model(model)
    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    write_id = uuid.uuid4().hex
    header = {"format_version": MODEL_FORMAT_VERSION, **header, "write_id": write_id,
              "arrays": sorted(arrays)}
    if str(path).endswith(".npz"):
        with AtomicTarget(path, overwrite) as t:
            with t.open_tmp("wb") as f:
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
    if is_url(path):  # one read of the whole object (it is replaced as a whole)
        import fsspec

        with fsspec.open(str(path), "rb") as f:
            path = io.BytesIO(f.read())
    with np.load(path if isinstance(path, io.BytesIO) else str(path),
                 allow_pickle=False) as f:
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


def _arrays_carry(path, write_id):
    """Whether every array of the group at ``path`` carries ``write_id`` now."""
    try:
        return all(a.attrs.get(_WRITE_ID) == write_id
                   for _, a in zarr.open_group(str(path), mode="r").arrays())
    except Exception:  # noqa: BLE001 - being replaced: not now
        return False


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
    # every save has its own id: the same id after reading, in the root and in every
    # array, means no save came between (a store committed file by file, on a
    # filesystem without atomic rename, changes its arrays' metadata first)
    if write_id is not None and (_current_write_id(path) != write_id
                                 or not _arrays_carry(path, write_id)):
        raise _ChangedWhileReading(path)
    return header, arrays


def _has_zarr_metadata(path):
    """Whether ``path`` is a folder with a Zarr group's or array's root metadata."""
    return any((Path(path) / name).is_file()
               for name in ("zarr.json", ".zgroup", ".zarray"))


def _read_header(path):
    """``(header, arrays)`` of a saved model; ``ModelFileError`` naming the path if
    the file is damaged, truncated, not dqkm's, or lacks an array its header lists.

    A Zarr group replaced by a concurrent :func:`save` while being read (its
    arrays' write id differs from the header's) is read again.
    """
    for attempt in range(_READ_ATTEMPTS):
        try:
            header, arrays = (_read_npz if str(path).endswith(".npz") else _read_zarr)(path)
        except _ChangedWhileReading:
            time.sleep(0.001 * attempt)
            continue
        except FileNotFoundError:
            if not is_url(path) and Path(path).exists():
                if not _has_zarr_metadata(path):
                    raise ModelFileError(
                        f"{str(path)!r} is not a dqkm model: neither a Zarr group (no "
                        "zarr.json or .zgroup in it) nor a .npz archive; dqkm.load reads "
                        "what dqkm.save wrote.") from None
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

    Parameters
    ----------
    path : str or PathLike
        A Zarr group or ``.npz`` file written by :func:`save`.

    Returns
    -------
    estimator
        The fitted estimator, of the class that was saved.

    Raises
    ------
    FileNotFoundError
        Nothing at ``path``.
    ModelFileError
        The file is damaged, truncated or not a dqkm model, has another format
        version, or holds parameters, arrays or scalars that its estimator does
        not declare (the message names the path and the key).

    Examples
    --------
    >>> import os, shutil, tempfile
    >>> import numpy as np
    >>> tmp = tempfile.mkdtemp()
    >>> import dqkm
    >>> X = np.array([[0., 0.], [0., 1.], [10., 10.], [10., 11.]])
    >>> path = dqkm.save(dqkm.KMeans(2, random_state=0).fit(X), os.path.join(tmp, "km.npz"))
    >>> model = dqkm.load(path)
    >>> type(model).__name__, model.cluster_centers_.shape
    ('KMeans', (2, 2))
    >>> shutil.rmtree(tmp)
    """
    if not is_url(path) and not Path(path).exists():
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
    ``arrays``: each array's ``[shape, dtype]``.

    Parameters
    ----------
    path : str or path-like
        A model saved by :func:`dqkm.save` (``.zarr`` or ``.npz``).

    Returns
    -------
    dict
        ``estimator``, ``params``, the fitted scalars and ``arrays`` (each
        array's shape and dtype, not its values).

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np, dqkm
    >>> from dqkm.io import model_info
    >>> km = dqkm.KMeans(2, random_state=0).fit(np.array([[0., 0], [0, 1], [5, 5], [5, 6]]))
    >>> path = os.path.join(tempfile.mkdtemp(), "km.npz")
    >>> _ = dqkm.save(km, path)
    >>> info = model_info(path)
    >>> info["estimator"], info["params"]["n_clusters"], info["arrays"]["cluster_centers_"][0]
    ('KMeans', 2, [2, 2])
    """
    header, arrays = _read_header(path)
    header["arrays"] = {k: (list(v.shape), str(v.dtype)) for k, v in arrays.items()}
    return header
