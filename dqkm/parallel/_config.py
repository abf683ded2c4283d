"""dqkm's dask config keys: their defaults (``dqkm/dqkm.yaml``) registered with dask.

``dask.config.get("dqkm")`` lists them once :mod:`dqkm.parallel` is imported. Keys:

``dqkm.fast-zarr-read`` (default ``true``)
    Read uncompressed or blosc/zstd Zarr chunks straight from their files, without
    zarr's asynchronous machinery; ``false`` always reads through zarr.

``dqkm.keep-persisted`` (default ``false``)
    After a fit that persisted X (``persist=True``, or ``'auto'`` when X fits),
    keep X in memory as long as the lazy ``labels_`` refer to it.  ``false``:
    ``labels_`` are persisted on their own and X is released when the fit
    returns (:func:`dqkm.parallel.persist.release_persisted`).  Set it with
    ``dask.config.set({"dqkm.keep-persisted": True})`` or
    ``DASK_DQKM__KEEP_PERSISTED=True``.

``dqkm.settle-timeout`` (default ``30``)
    Seconds a failed or interrupted write waits for its running tasks to end
    before dqkm removes its temporary store
    (:func:`dqkm.data.execute.compute_settled`).
"""

from importlib import resources

import dask.config
import yaml

__all__ = ["DEFAULTS", "register_defaults"]


def _packaged_defaults():
    text = resources.files("dqkm").joinpath("dqkm.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


#: The defaults shipped in ``dqkm/dqkm.yaml``.
DEFAULTS = _packaged_defaults()


def register_defaults():
    """Register :data:`DEFAULTS` with dask (values the user set keep priority)."""
    dask.config.update_defaults(DEFAULTS)
