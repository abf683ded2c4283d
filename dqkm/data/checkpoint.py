"""Checkpoints of a fit's driver state, written after every iteration.

Layout (a Zarr v3 group at ``path``)::

    path/zarr.json          group attributes: format version and the fit's identity
    path/dqkm-lock.json     the lock of the fit writing the checkpoint (while it runs)
    path/iter-000012/       the state after iteration 12 of the first run (run r > 1:
                            ``run-00r-iter-000012``) (arrays + JSON attributes, and
                            what ``save(..., extra=...)`` adds, e.g. KMultipleMeans's
                            per-chunk rows of S in ``rows/``), with ``dqkm-files.json``
                            (every file of the group and its size)
    path/latest.json        {"group": "iter-000012"} — replaced atomically (os.replace)

Each iteration writes a new ``iter-*`` group completely, then replaces
``latest.json`` in one atomic rename (from a temporary file named for its
writer), then removes the previous group, so a crash at any instant leaves a
checkpoint that names a complete state.

Safety rules: a fit locks its checkpoint (:class:`CheckpointLock`); a fresh
fit removes only what dqkm names in a directory it proves to be a dqkm
checkpoint (``zarr.json``, ``latest.json``, its temporary files and the
``iter-*`` groups), and refuses any other non-empty directory, a file, and
a path that is, contains or lies inside the input store.  Resuming checks the
identity (estimator, every parameter that can change the result, the data's
shape, dtype, row chunks and fingerprint) and that the state is complete:
every array has the SHA-256 recorded when it was written and every file of
the group is there with its size.  Anything else is a :class:`CheckpointError`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import uuid
from fnmatch import fnmatch

import numpy as np
import zarr

from ..exceptions import CheckpointError
from .checkpoint_guard import (ITER_RE, LOCK_NAME, TMP_RE, CheckpointLock,
                               check_checkpoint_path, input_store_paths)
from .chunks import describe_row_chunks
# the fit driver's layout (version 3: run and iteration stored apart; groups of runs after
# the first named ``run-NNN-iter-NNNNNN``); the version lives in the format registry.
from .formats import CHECKPOINT_FORMAT_VERSION
from .jsonvalues import json_default

__all__ = ["Checkpoint", "CheckpointError", "CheckpointLock", "CheckpointMismatchError",
           "check_checkpoint_path", "checkpointing", "input_store_paths", "LOCK_NAME"]

_FILES = "dqkm-files.json"

# Keys reported first when an identity differs (the later ones often follow from them).
_KEY_ORDER = ("estimator", "n_samples", "n_features", "dtype", "row_chunks", "embedding",
              "n_components", "n_clusters", "n_prototypes", "n_neighbors", "solver",
              "detect_outliers", "svd_algorithm", "init", "random_state")


class CheckpointMismatchError(CheckpointError, ValueError):
    """The checkpoint was written by another estimator, with other parameters or
    for other data."""


def _describe(key, value):
    if key == "row_chunks" and isinstance(value, list):
        return describe_row_chunks([s for s, n in value for _ in range(n)])
    if key == "data_fingerprint":
        return f"data fingerprint {str(value)[:12]}…"
    return f"{key}={value!r}"


def _sha(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def _files(directory):
    """``{relative path: size}`` of every file under ``directory``."""
    out = {}
    for root, _, names in os.walk(directory):
        for n in names:
            full = os.path.join(root, n)
            out[os.path.relpath(full, directory).replace(os.sep, "/")] = os.path.getsize(full)
    return out


class Checkpoint:
    """The checkpoint of one fit (see the module docstring for the layout)."""

    def __init__(self, path, identity: dict, *, protected=None):
        check_checkpoint_path(path, protected)
        self.path = os.path.abspath(str(path))
        self.identity = json.loads(json.dumps(identity, default=json_default))

    @property
    def _pointer(self):
        return os.path.join(self.path, "latest.json")

    def _damaged(self, what):
        return CheckpointError(
            f"checkpoint {self.path!r} is damaged: {what}. It cannot be resumed; fit with "
            "resume=False to start over (this replaces the checkpoint), or use another "
            "checkpoint path.")

    def exists(self):
        return os.path.exists(self._pointer)

    def stored_identity(self):
        """The identity recorded in the checkpoint at ``path`` (``{}`` if none or unreadable)."""
        try:
            with open(os.path.join(self.path, "zarr.json")) as f:
                found = json.load(f)["attributes"]["dqkm_checkpoint"]
            return dict(found.get("identity", {}))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}

    def check_identity(self, skip=()):
        """Refuse a checkpoint of another estimator, other parameters or other data
        (the keys in ``skip`` are left to the caller, e.g. ``max_iter``)."""
        try:
            with open(os.path.join(self.path, "zarr.json")) as f:
                found = dict(json.load(f)["attributes"]["dqkm_checkpoint"])
        except FileNotFoundError:
            raise self._damaged("its zarr.json (the checkpoint's identity) is missing") from None
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise self._damaged(f"its zarr.json cannot be read ({type(e).__name__}: "
                                f"{e})") from None
        version = found.get("format_version")
        if version != CHECKPOINT_FORMAT_VERSION:
            older = (isinstance(version, int) and version < CHECKPOINT_FORMAT_VERSION)
            raise CheckpointMismatchError(
                f"checkpoint {self.path!r} has format {version!r}"
                f"{' (written by an older dqkm)' if older else ''}, but this dqkm resumes "
                f"format {CHECKPOINT_FORMAT_VERSION}; fit with resume=False to start over "
                "(this replaces the checkpoint), or use another checkpoint path.")
        stored, mine = found.get("identity", {}), self.identity
        keys = set(mine) | set(stored)
        first = [k for k in _KEY_ORDER if k in keys]
        rest = sorted(keys - set(first) - {"data_fingerprint"})
        for key in first + rest + ["data_fingerprint"]:
            a, b = stored.get(key), mine.get(key)
            if a == b or key in skip:
                continue
            if key == "row_chunks":
                what = f"X in {_describe(key, a)}, but this X is in {_describe(key, b)}"
            elif key == "data_fingerprint":
                what = ("other data of the same shape (the row counts and float64 column sums "
                        "of its chunks differ from this X's)")
            else:
                what = f"{_describe(key, a)}, but this fit has {_describe(key, b)}"
            raise CheckpointMismatchError(
                f"checkpoint {self.path!r} was written for {what}; refusing to mix them. Use "
                "another checkpoint path or resume=False to start over.")

    def start(self):
        """A fresh checkpoint: removes what dqkm named in a previous one at ``path``
        (never anything else) and records the identity."""
        check_checkpoint_path(self.path)
        os.makedirs(self.path, exist_ok=True)
        for name in os.listdir(self.path):
            full = os.path.join(self.path, name)
            if ITER_RE.match(name) and os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full)
            elif name in ("latest.json", "zarr.json") or TMP_RE.match(name):
                os.unlink(full)
        zarr.open_group(self.path, mode="a", zarr_format=3,
                        attributes={"dqkm_checkpoint": {
                            "format_version": CHECKPOINT_FORMAT_VERSION,
                            "identity": self.identity}})

    def save(self, iteration: int, arrays: dict, meta: dict, extra=None, run=0):
        """Write the state after ``iteration`` of run ``run`` and make it the latest.

        Parameters
        ----------
        iteration : int
            Names the new group ``iter-NNNNNN`` (not the latest one's name).
        arrays : dict of str to ndarray
            Stored with their SHA-256, checked by :meth:`load`.
        meta : dict
            JSON-serialisable values (NumPy scalars and arrays allowed).
        extra : callable, optional
            ``extra(directory)`` writes more content into the new group's
            directory (e.g. per-chunk state written by the workers) after the
            arrays and before ``latest.json`` names the group, so a crash in
            it leaves the previous state the latest.  Its files are listed
            with their sizes, checked by :meth:`load`.
        run : int, default=0
            The run (from 0) of a fit with several; a run after the first
            prefixes the name: ``run-NNN-iter-NNNNNN`` (NNN from 2).
        """
        name = f"iter-{iteration:06d}" if run == 0 else f"run-{run + 1:03d}-iter-{iteration:06d}"
        previous = self._latest_name(strict=False)
        if name == previous:
            raise ValueError(f"checkpoint state {name} would replace the latest state in place")
        sub = os.path.join(self.path, name)
        if os.path.exists(sub):
            shutil.rmtree(sub)
        group = zarr.open_group(sub, mode="w", zarr_format=3)
        sums = {}
        for k, v in arrays.items():
            v = np.asarray(v)
            a = group.create_array(k, shape=v.shape, dtype=v.dtype,
                                   chunks=tuple(max(n, 1) for n in v.shape))
            a[...] = v
            sums[k] = {"sha256": _sha(v), "shape": list(v.shape), "dtype": v.dtype.str}
        if extra is not None:
            extra(sub)
        state = json.loads(json.dumps(meta, default=json_default))
        group.attrs["state"] = state
        group.attrs["dqkm_arrays"] = sums
        files = {k: n for k, n in _files(sub).items() if k != "zarr.json"}
        self._write_json(os.path.join(sub, _FILES), files)
        self._write_json(self._pointer, {"group": name})
        if previous and previous != name:
            shutil.rmtree(os.path.join(self.path, previous), ignore_errors=True)

    def _write_json(self, target, obj):
        """Write ``obj`` to ``target`` atomically, through a temporary file of this writer."""
        tmp = (f"{target}.{socket.gethostname().replace('.', '_')}-{os.getpid()}-"
               f"{uuid.uuid4().hex[:8]}.tmp")
        try:
            with open(tmp, "w") as f:
                json.dump(obj, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def _latest_name(self, strict=True):
        try:
            with open(self._pointer) as f:
                name = json.load(f)["group"]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as e:
            if not strict:
                return None
            raise self._damaged(f"latest.json cannot be read ({type(e).__name__}: {e})") from None
        if not isinstance(name, str) or not ITER_RE.match(name):
            if not strict:
                return None
            raise self._damaged(f"latest.json names {name!r}, not a state group")
        return name

    def latest_path(self):
        """The directory of the latest complete state (None if there is none)."""
        name = self._latest_name()
        return None if name is None else os.path.join(self.path, name)

    def record_identity(self):
        """Replace the identity recorded in ``zarr.json`` by this fit's (atomically)."""
        target = os.path.join(self.path, "zarr.json")
        with open(target) as f:
            node = json.load(f)
        node["attributes"]["dqkm_checkpoint"]["identity"] = self.identity
        self._write_json(target, node)

    def check_max_iter(self, max_iter, iteration, run=0):
        """Allow ``max_iter`` to differ from the checkpoint's when the saved state
        (after ``iteration`` of run ``run``) is on the path of a fit with
        ``max_iter``: the first run, at most ``max_iter`` iterations in.  The
        recorded identity then takes the new ``max_iter``."""
        stored = self.stored_identity().get("max_iter")
        if stored == max_iter:
            return
        if run > 0 or iteration > max_iter:
            where = f"iteration {iteration}" + (f" of run {run + 1}" if run else "")
            raise CheckpointMismatchError(
                f"checkpoint {self.path!r} was written for max_iter={stored!r} and holds the "
                f"state after {where}, but this fit has max_iter={max_iter!r}; a fit with "
                "another max_iter resumes only a first run stopped at or before its max_iter. "
                "Use another checkpoint path or resume=False to start over.")
        self.record_identity()

    def load(self, optional=(), skip=()):
        """``(arrays, meta)`` of the latest complete state, checked.

        Parameters
        ----------
        optional : sequence of str
            Glob patterns (relative to the state group) of array directories
            the state's reader does without: such an array may be missing
            entirely (not in part).
        skip : sequence of str
            Identity keys the caller checks itself (see :meth:`check_max_iter`).

        Raises
        ------
        CheckpointMismatchError
            Another estimator, other parameters or other data.
        CheckpointError
            A damaged checkpoint: unreadable ``latest.json`` or ``zarr.json``,
            a missing state group, array or file, or an array whose bytes
            differ from those written (a missing chunk, a truncated file).
        """
        self.check_identity(skip)
        name = self._latest_name()
        sub = os.path.join(self.path, name)
        if not os.path.isdir(sub):
            raise self._damaged(f"latest.json names the state {name!r}, which is missing")
        try:
            group = zarr.open_group(sub, mode="r")
            meta = dict(group.attrs["state"])
            sums = dict(group.attrs["dqkm_arrays"])
            with open(os.path.join(sub, _FILES)) as f:
                files = json.load(f)
        except Exception as e:  # noqa: BLE001 - any read failure means a damaged state
            raise self._damaged(f"the state {name!r} cannot be read ({type(e).__name__}: "
                                f"{e})") from None
        arrays = {}
        for k, want in sums.items():
            try:
                a = np.asarray(group[k][...])
            except Exception as e:  # noqa: BLE001
                raise self._damaged(f"the array {name}/{k} cannot be read ({type(e).__name__}: "
                                    f"{e})") from None
            if list(a.shape) != want["shape"] or a.dtype.str != want["dtype"] or \
                    _sha(a) != want["sha256"]:
                raise self._damaged(f"the array {name}/{k} differs from what was written "
                                    "(a chunk is missing or altered)")
            arrays[k] = a
        for rel, size in files.items():
            full = os.path.join(sub, *rel.split("/"))
            if os.path.isfile(full) and os.path.getsize(full) == size:
                continue
            parts = rel.split("/")
            gone = any(fnmatch("/".join(parts[:i]), pat) and
                       not os.path.exists(os.path.join(sub, *parts[:i]))
                       for pat in optional for i in range(1, len(parts)))
            if not gone:
                found = (f"{os.path.getsize(full)} bytes instead of {size}"
                         if os.path.isfile(full) else "missing")
                raise self._damaged(f"the file {name}/{rel} is {found}")
        self._remove_strays(keep=name)
        return arrays, meta

    def _remove_strays(self, keep):
        """Remove ``iter-*`` groups other than ``keep`` and stale temporary pointers
        (left by a crash); the caller holds the lock."""
        for n in os.listdir(self.path):
            full = os.path.join(self.path, n)
            if n != keep and ITER_RE.match(n) and os.path.isdir(full) \
                    and not os.path.islink(full):
                shutil.rmtree(full, ignore_errors=True)
            elif TMP_RE.match(n):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(full)


@contextlib.contextmanager
def checkpointing(path, *, inputs=None, identity, resume, optional=(), protected=None,
                  skip=("max_iter",)):
    """Open the checkpoint of one fit, locked for its duration.

    Parameters
    ----------
    path : str, PathLike or None
        None: no checkpoint; yields ``(None, None)``.
    inputs : object, optional
        The fit's X as given: the local Zarr stores it reads
        (:func:`input_store_paths`) are protected.
    identity : callable
        ``identity()`` the fit's identity (called once the lock is held, as it
        may run a pass over X).
    resume : bool
    optional : sequence of str
        See :meth:`Checkpoint.load`.
    protected : dict, optional
        More paths the checkpoint must stay apart from (description → path).
    skip : sequence of str
        Identity keys the fit checks itself once it has the state (``max_iter``:
        :meth:`Checkpoint.check_max_iter`).

    Yields
    ------
    (Checkpoint, (arrays, meta) or None)
        The state to resume from, or None (a fresh checkpoint was started).
    """
    if not path:
        yield None, None
        return
    guarded = dict(protected or {})
    for i, p in enumerate(input_store_paths(inputs) if inputs is not None else []):
        guarded[f"the input store{'' if i == 0 else f' #{i + 1}'}"] = p
    ck = Checkpoint(path, {}, protected=guarded)
    with CheckpointLock(ck.path):
        ck.identity = json.loads(json.dumps(identity(), default=json_default))
        if resume and ck.exists():
            saved = ck.load(optional, skip)
        else:
            ck.start()
            saved = None
        yield ck, saved

