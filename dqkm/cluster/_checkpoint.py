"""Checkpoints of a fit's driver state, written after every iteration.

Layout (a Zarr v3 group at ``path``)::

    path/zarr.json          group attributes: estimator, parameters, data shape/dtype
    path/iter-000012/       the state after iteration 12 (arrays + JSON attributes, and
                            what ``save(..., extra=...)`` adds, e.g. KMultipleMeans's
                            per-chunk rows of S in ``rows/``)
    path/latest.json        {"group": "iter-000012"} — replaced atomically (os.replace)

Each iteration writes a new ``iter-*`` group completely, then replaces
``latest.json`` in one atomic rename, then removes the previous group, so a
crash at any instant leaves a checkpoint that names a complete state.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import zarr

from .._json import json_default

__all__ = ["Checkpoint", "CheckpointMismatchError", "scheduler_lost"]

CHECKPOINT_FORMAT_VERSION = 1


class CheckpointMismatchError(ValueError):
    """The checkpoint was written by another estimator or for other data."""


def scheduler_lost(owner, error, checkpoint, saved):
    """The ``SchedulerLostError`` a fit raises, saying how to go on.

    ``saved`` describes the state in the checkpoint (e.g. ``"iteration 3 of
    run 1"``), or is None when the checkpoint holds none yet.
    """
    from ..parallel.engine import SchedulerLostError

    if checkpoint is None:
        hint = " Pass checkpoint=PATH to fit to be able to resume after such a failure."
    elif saved is None:
        hint = (f" The checkpoint {str(checkpoint)!r} holds no state yet; fit again with a new "
                "Client.")
    else:
        hint = (f" The state after {saved} is in the checkpoint {str(checkpoint)!r}: connect a "
                f"new Client and call fit(X, checkpoint={str(checkpoint)!r}, resume=True) to "
                "continue.")
    return SchedulerLostError(f"{owner}.fit: {error}{hint}")


class Checkpoint:
    """The checkpoint of one fit (see the module docstring for the layout)."""

    def __init__(self, path, identity: dict):
        if "://" in str(path):
            raise ValueError(f"checkpoint must be a local directory path; got {str(path)!r} "
                             "(atomic renames are needed).")
        self.path = os.path.abspath(str(path))
        self.identity = json.loads(json.dumps(identity, default=json_default))

    @property
    def _pointer(self):
        return os.path.join(self.path, "latest.json")

    def exists(self):
        return os.path.exists(self._pointer)

    def stored_identity(self):
        """The identity recorded in the checkpoint at ``path`` (``{}`` if none)."""
        if not self.exists():
            return {}
        group = zarr.open_group(self.path, mode="r")
        return dict(group.attrs.get("dqkm_checkpoint", {}).get("identity", {}))

    def check_identity(self):
        """Refuse a checkpoint of another estimator or another data set."""
        group = zarr.open_group(self.path, mode="r")
        found = dict(group.attrs.get("dqkm_checkpoint", {}))
        if found.get("format_version") != CHECKPOINT_FORMAT_VERSION:
            raise CheckpointMismatchError(f"{self.path!r} is not a dqkm checkpoint (format "
                                          f"{found.get('format_version')!r}).")
        mine = self.identity
        keys = sorted(set(mine) | set(found.get("identity", {})))
        for key in sorted(keys, key=lambda k: k != "estimator"):  # the estimator first
            a, b = found.get("identity", {}).get(key), mine.get(key)
            if a != b:
                raise CheckpointMismatchError(
                    f"checkpoint {self.path!r} was written for {key}={a!r}, but this fit has "
                    f"{key}={b!r}; refusing to mix them. Use another checkpoint path or "
                    "resume=False to start over.")

    def start(self):
        """A fresh checkpoint (removes any previous one at ``path``)."""
        if os.path.exists(self.path):
            shutil.rmtree(self.path)
        zarr.open_group(self.path, mode="w", zarr_format=3,
                        attributes={"dqkm_checkpoint": {
                            "format_version": CHECKPOINT_FORMAT_VERSION,
                            "identity": self.identity}})

    def save(self, iteration: int, arrays: dict, meta: dict, extra=None):
        """Write the state after ``iteration`` and make it the latest.

        Parameters
        ----------
        iteration : int
            Names the new group ``iter-NNNNNN``.
        arrays : dict of str to ndarray
        meta : dict
            JSON-serialisable values (NumPy scalars and arrays allowed).
        extra : callable, optional
            ``extra(directory)`` writes more content into the new group's
            directory (e.g. per-chunk state written by the workers) after the
            arrays and before ``latest.json`` names the group, so a crash in
            it leaves the previous state the latest.
        """
        name = f"iter-{iteration:06d}"
        sub = os.path.join(self.path, name)
        if os.path.exists(sub):
            shutil.rmtree(sub)
        group = zarr.open_group(sub, mode="w", zarr_format=3)
        for k, v in arrays.items():
            v = np.asarray(v)
            a = group.create_array(k, shape=v.shape, dtype=v.dtype,
                                   chunks=tuple(max(n, 1) for n in v.shape))
            a[...] = v
        group.attrs["state"] = json.loads(json.dumps(meta, default=json_default))
        if extra is not None:
            extra(sub)
        previous = self._latest_name()
        tmp = self._pointer + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"group": name}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._pointer)
        if previous and previous != name:
            shutil.rmtree(os.path.join(self.path, previous), ignore_errors=True)

    def _latest_name(self):
        if not os.path.exists(self._pointer):
            return None
        with open(self._pointer) as f:
            return json.load(f)["group"]

    def latest_path(self):
        """The directory of the latest complete state (None if there is none)."""
        name = self._latest_name()
        return None if name is None else os.path.join(self.path, name)

    def load(self):
        """``(arrays, meta)`` of the latest complete state."""
        self.check_identity()
        group = zarr.open_group(os.path.join(self.path, self._latest_name()), mode="r")
        arrays = {k: np.asarray(a[...]) for k, a in group.arrays()}
        return arrays, dict(group.attrs["state"])
