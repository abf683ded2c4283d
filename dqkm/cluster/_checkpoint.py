"""What a fit's checkpoint must match, and the error for a lost scheduler.

The checkpoint store itself (layout, lock, atomic writes, resume checks) is
:mod:`dqkm.data.checkpoint`; its names are imported here for the fit driver.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..data.checkpoint import (LOCK_NAME, Checkpoint, CheckpointLock, CheckpointMismatchError,
                               check_checkpoint_path, checkpointing)
from ..exceptions import CheckpointError
from ..parallel.engine import SchedulerLostError

__all__ = ["Checkpoint", "CheckpointError", "CheckpointLock", "CheckpointMismatchError",
           "check_checkpoint_path", "checkpointing", "identity_from_params", "scheduler_lost",
           "IGNORED_PARAMS", "LOCK_NAME"]

#: Constructor parameters left out of every checkpoint identity because they
#: cannot change the result: where X is kept during the fit, and what the fit
#: shows.  (``split_every`` stays in: it sets the order of the float64 sums.)
IGNORED_PARAMS = ("persist", "verbose")


def _value(v):
    """A JSON-comparable form of a parameter value (arrays by a hash of their bytes)."""
    if isinstance(v, dict):
        return {str(k): _value(x) for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
    if isinstance(v, (list, tuple)) and not any(hasattr(x, "__len__") and not isinstance(x, str)
                                                for x in v):
        return [_value(x) for x in v]
    if isinstance(v, (np.generic,)):
        return v.item()
    if isinstance(v, (str, bool, int, float)) or v is None:
        return v
    if hasattr(v, "__array__") or isinstance(v, (list, tuple)):
        a = np.ascontiguousarray(np.asarray(v))
        return {"array_sha256": hashlib.sha256(a.tobytes()).hexdigest(),
                "shape": list(a.shape), "dtype": a.dtype.str}
    if isinstance(v, (np.random.RandomState, np.random.Generator)):
        return None  # the RNG state itself is in the checkpoint
    return f"<{type(v).__name__}>"


def _row_chunks(chunks):
    """Row chunk sizes, run-length encoded: [[size, count], ...]."""
    out = []
    for c in (int(x) for x in chunks):
        if out and out[-1][0] == c:
            out[-1][1] += 1
        else:
            out.append([c, 1])
    return out


def identity_from_params(estimator, Xd, *, ignored=(), fingerprint=None, **overrides):
    """The identity of a fit: the estimator, X's shape, dtype and row chunks,
    every parameter of ``get_params(deep=False)`` but :data:`IGNORED_PARAMS`
    and ``ignored`` (arrays by SHA-256 of their bytes; a RandomState instance
    as None), ``overrides``, and X's ``fingerprint``."""
    identity = {"estimator": type(estimator).__name__, "n_samples": int(Xd.shape[0]),
                "n_features": int(Xd.shape[1]), "dtype": str(Xd.dtype),
                "row_chunks": _row_chunks(Xd.chunks[0])}
    for k, v in estimator.get_params(deep=False).items():
        if k not in IGNORED_PARAMS and k not in ignored:
            identity[k] = _value(v)
    identity.update({k: _value(v) for k, v in overrides.items()})
    if fingerprint is not None:
        identity["data_fingerprint"] = fingerprint
    return identity


def scheduler_lost(owner, error, checkpoint, saved):
    """The ``SchedulerLostError`` a fit raises, saying how to go on.

    ``saved`` describes the state in the checkpoint (e.g. ``"iteration 3 of
    run 1"``), or is None when the checkpoint holds none yet.
    """
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
