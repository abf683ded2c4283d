"""What keeps a checkpoint directory safe: where it may be, and who writes it.

* :func:`check_checkpoint_path` refuses a path that is a file, a non-empty
  directory that is not a dqkm checkpoint, or a path that is, contains or lies
  inside a protected path (the input store, the CLI's ``--out``): dqkm deletes
  only what it can prove it wrote.
* :class:`CheckpointLock` is the lock file a fit holds on its checkpoint: created
  exclusively (``O_CREAT | O_EXCL``) with the host and pid of the fit, released
  at the end of the fit (also on an exception).  A lock left by a dead process
  of this host is taken over; any other lock refuses the second fit.
* :func:`input_store_paths` finds the local Zarr stores an input reads from.
"""

from __future__ import annotations

import gc
import json
import os
import re
import socket
import types
import uuid

from ..exceptions import CheckpointError

__all__ = ["CheckpointLock", "check_checkpoint_path", "input_store_paths", "is_dqkm_checkpoint",
           "LOCK_NAME", "ITER_RE", "TMP_RE", "KNOWN_FORMATS"]

LOCK_NAME = "dqkm-lock.json"
ITER_RE = re.compile(r"^(run-\d{3,}-)?iter-\d{6,}$")  # the state groups dqkm names
TMP_RE = re.compile(r"^(latest|zarr)\.json\.[A-Za-z0-9_.-]+\.tmp$|^latest\.json\.tmp$")
KNOWN_FORMATS = (1, 2, 3)  # checkpoint format versions this dqkm wrote or writes


def _real(path):
    return os.path.realpath(os.path.abspath(str(path)))


def is_dqkm_checkpoint(path):
    """The format version of the dqkm checkpoint at ``path`` (None if it is not one).

    A dqkm checkpoint is a directory whose ``zarr.json`` carries the group
    attribute ``dqkm_checkpoint`` with a known ``format_version``.
    """
    try:
        with open(os.path.join(str(path), "zarr.json")) as f:
            found = json.load(f)["attributes"]["dqkm_checkpoint"]["format_version"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return found if found in KNOWN_FORMATS else None


def _only_dqkm_leftovers(names):
    """True if every entry is a lock or temporary pointer file dqkm names."""
    return all(n == LOCK_NAME or TMP_RE.match(n) for n in names)


def check_checkpoint_path(path, protected=None):
    """Refuse a checkpoint path dqkm could not use without harm.

    Parameters
    ----------
    path : str or PathLike
        The checkpoint directory.
    protected : dict of str to path, optional
        What the checkpoint may not be, contain or lie inside, by description
        (e.g. ``{"the input store": "data.zarr", "--out": "model.zarr"}``).

    Raises
    ------
    CheckpointError
        A URL, a file, a non-empty directory that is not a dqkm checkpoint,
        or a path that overlaps a protected one.
    """
    text = str(path)
    if "://" in text:
        raise CheckpointError(f"checkpoint must be a local directory path; got {text!r} "
                              "(atomic renames and an exclusive lock file are needed). Pass a "
                              "local directory.")
    real = _real(path)
    for what, other in (protected or {}).items():
        if other is None or "://" in str(other):
            continue
        o = _real(other)
        if real == o or o.startswith(real + os.sep) or real.startswith(o + os.sep):
            relation = ("is" if real == o else "contains" if o.startswith(real + os.sep)
                        else "lies inside")
            raise CheckpointError(
                f"checkpoint {text!r} {relation} {what} {str(other)!r}; a checkpoint directory "
                "is replaced by a fresh fit, so it must be apart from the data and the outputs. "
                "Pass another checkpoint directory, e.g. a new one next to them.")
    if not os.path.lexists(real):
        return
    if not os.path.isdir(real):
        raise CheckpointError(f"checkpoint {text!r} is a file, not a directory; dqkm does not "
                              "replace it. Pass a new or empty directory as checkpoint.")
    names = os.listdir(real)
    if names and is_dqkm_checkpoint(real) is None and not _only_dqkm_leftovers(names):
        shown = ", ".join(repr(n) for n in sorted(names)[:5]) + (", ..." if len(names) > 5
                                                                 else "")
        hint = (" Its zarr.json does not name a dqkm checkpoint of a known format (if it is a "
                "damaged dqkm checkpoint, remove it yourself)." if "zarr.json" in names else "")
        raise CheckpointError(
            f"checkpoint {text!r} is a non-empty directory that is not a dqkm checkpoint (it "
            f"holds {shown}); dqkm deletes only checkpoints it wrote.{hint} Pass a new or "
            "empty directory as checkpoint.")


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user
        return True
    return True


class CheckpointLock:
    """The lock of one fit on the checkpoint directory ``path``.

    The lock file ``path/dqkm-lock.json`` holds ``host``, ``pid`` and a random
    ``token``; it is created with ``O_CREAT | O_EXCL``, so of two fits only one
    gets it.  A lock whose pid is not running on this host is stale and taken
    over (renamed away under a unique name, then checked to be the stale one).
    """

    def __init__(self, path):
        self.path = os.path.abspath(str(path))
        self.file = os.path.join(self.path, LOCK_NAME)
        self.token = None

    def _read(self, file=None):
        try:
            with open(file or self.file) as f:
                held = json.load(f)
            return {"host": str(held["host"]), "pid": int(held["pid"]),
                    "token": str(held["token"])}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError):
            return None  # being written, or damaged

    def _create(self, content):
        fd = os.open(self.file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        with os.fdopen(fd, "w") as f:
            json.dump(content, f)
            f.flush()
            os.fsync(f.fileno())

    def _take_over(self, stale):
        """Remove the stale lock ``stale``; False if another fit got there first."""
        aside = f"{self.file}.stale-{uuid.uuid4().hex}"
        try:
            os.rename(self.file, aside)
        except FileNotFoundError:
            return True  # removed meanwhile: try to create it again
        moved = self._read(aside)
        if moved and moved["token"] == stale["token"]:
            os.unlink(aside)
            return True
        try:  # a live lock taken in between: put it back
            self._create(moved)
        except (OSError, TypeError):
            pass
        os.unlink(aside)
        return False

    def acquire(self):
        """Take the lock (creating the directory if needed).

        Raises
        ------
        CheckpointError
            The checkpoint is locked by a running fit (or its lock file is
            unreadable), naming the path, host and pid.
        """
        os.makedirs(self.path, exist_ok=True)
        host = socket.gethostname()
        token = uuid.uuid4().hex
        for _ in range(5):
            try:
                self._create({"dqkm_checkpoint_lock": 1, "host": host, "pid": os.getpid(),
                              "token": token})
            except FileExistsError:
                held = self._read()
                if held == {}:
                    continue  # released meanwhile
                if held is not None and held["host"] == host and not _pid_alive(held["pid"]):
                    self._take_over(held)
                    continue
                raise self._locked(held) from None
            self.token = token
            return self
        raise self._locked(self._read())

    def _locked(self, held):
        if not held:
            return CheckpointError(
                f"checkpoint {self.path!r} is locked: its lock file {self.file!r} is being "
                "written or is unreadable. If no fit uses this checkpoint, delete that file and "
                "fit again.")
        return CheckpointError(
            f"checkpoint {self.path!r} is locked by another fit (host {held['host']!r}, pid "
            f"{held['pid']}). Wait until that fit ends or use another checkpoint path; if that "
            f"process is no longer running, delete the lock file {self.file!r}.")

    def release(self):
        """Remove the lock file if it is still this lock's."""
        if self.token is None:
            return
        held = self._read()
        if held and held["token"] == self.token:
            os.unlink(self.file)
        self.token = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
        return False


def _store_path(obj):
    """The local path a Zarr array/group/store or dqkm chunk reader reads, else None."""
    directory = getattr(obj, "directory", None)
    if type(obj).__name__ == "LocalChunkReader" and isinstance(directory, str):
        # the array's directory: the store is its outermost enclosing Zarr node
        while os.path.isfile(os.path.join(os.path.dirname(directory), "zarr.json")):
            directory = os.path.dirname(directory)
        return directory
    if not type(obj).__module__.startswith("zarr"):
        return None
    store = getattr(obj, "store", obj)
    root = getattr(store, "root", None)
    return None if root is None else str(root)


def input_store_paths(X, limit=20_000):
    """The local Zarr stores an input reads from, as far as they can be found.

    ``X`` a path: that path.  A Zarr array or group: its store's root.  A
    Dask array: the Zarr arrays and dqkm chunk readers reachable from its
    graph (at most ``limit`` objects are visited, so the search stays cheap;
    a store beyond them is not found).  URLs are not local and are ignored.
    """
    if isinstance(X, (str, os.PathLike)):
        return [] if "://" in str(X) else [str(X)]
    found = _store_path(X)
    if found is not None:
        return [found]
    graph = getattr(X, "__dask_graph__", None)
    if graph is None:
        return []
    layers = getattr(graph(), "layers", None)
    todo = list(layers.values()) if layers is not None else [graph()]
    seen, paths = set(), []
    skip = (str, bytes, int, float, complex, type, types.ModuleType, types.CodeType,
            types.BuiltinFunctionType)
    while todo and len(seen) < limit:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, skip) or obj is None:
            continue
        seen.add(id(obj))
        path = _store_path(obj)
        if path is not None:
            if "://" not in path:
                paths.append(path)
            continue
        if isinstance(obj, dict) and "__builtins__" in obj:  # a module's globals
            continue
        if type(obj).__module__ == "numpy":
            continue
        todo.extend(gc.get_referents(obj))
    return sorted(set(paths))
