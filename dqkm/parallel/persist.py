"""Persisting X for a fit, and letting it go after.

A fit persists X in the workers' memory (or this process's, with local
threads) when asked or when it fits comfortably (:func:`maybe_persist`);
after the fit, :func:`release_persisted` computes the estimator's lazy fitted
attributes so that nothing keeps X (unless ``dqkm.keep-persisted`` asks to).
"""

from __future__ import annotations

import logging

import dask
import dask.array as da
import psutil

from ..data.execute import active_client, scheduler_workers, wait_watched
from .blas import blas_limit_context

logger = logging.getLogger(__name__)

__all__ = ["maybe_persist", "release_persisted", "releases_persisted", "driver_memory_bytes"]


def driver_memory_bytes() -> float:
    """Memory available to this (the driver's) process now."""
    return float(psutil.virtual_memory().available)


def _cluster_memory_bytes() -> float:
    client = active_client()
    if client is not None:
        total = sum(float(w.get("memory_limit") or 0) for w in scheduler_workers(client).values())
        if total > 0:
            return total
    return driver_memory_bytes()


def maybe_persist(X: da.Array, persist: bool | str = "auto", fraction: float = 0.5):
    """Persist X in the workers' memory when asked, or when it fits comfortably.

    ``persist='auto'`` persists when ``X.nbytes`` is at most ``fraction`` of the
    total ``memory_limit`` of the cluster's workers (or of the available
    memory with local threads).  Otherwise X is re-read from its source
    (Zarr) on every pass and memory stays bounded by a few chunks per worker.

    Returns ``(X, persisted)``.  What is persisted here lives as long as the
    returned array is referenced; after a fit, :func:`release_persisted`
    makes sure the fitted model does not keep it.
    """
    if persist not in ("auto", True, False):
        raise ValueError(f"persist must be 'auto', True or False; got {persist!r}.")
    if persist == "auto":
        budget = _cluster_memory_bytes() * fraction
        persist = X.nbytes <= budget
        logger.debug("persist='auto': %.1f MB of data, budget %.1f MB -> %s",
                     X.nbytes / 1e6, budget / 1e6, persist)
    if not persist:
        return X, False
    (X,) = _persist(X)
    return X, True


def _persist(*arrays) -> tuple:
    """The arrays persisted in one graph: on the workers, waited for with the pause
    watch (:func:`~dqkm.data.execute.wait_watched`), or in this process."""
    client = active_client()
    if client is None:
        with blas_limit_context():
            return dask.persist(*arrays)
    from distributed import futures_of

    done = client.persist(list(arrays))
    wait_watched(client, futures_of(done))
    return tuple(done)



def _holds_dask(value) -> bool:
    if isinstance(value, tuple):
        return any(isinstance(v, da.Array) for v in value)
    return isinstance(value, da.Array)


def releases_persisted(persisted: bool) -> bool:
    """Whether :func:`release_persisted` lets X go after a fit that ``persisted``
    it (so its lazy fitted attributes are computed at the end of the fit)."""
    return bool(persisted) and not dask.config.get("dqkm.keep-persisted", False)


def release_persisted(estimator, persisted: bool) -> None:
    """After a fit on X persisted by :func:`maybe_persist`: let X go.

    The estimator's lazy fitted attributes (``labels_``, and tuples of Dask
    arrays such as KMultipleMeans's ``similarity_``) are graphs on the
    persisted X; they are persisted themselves (computed once, kept in the
    workers' memory, or the driver's with local threads: one small array per
    chunk), so that once the fit returns nothing references X and its chunks
    are freed.  Nothing is done when X was not persisted (the attributes then
    read X from its source when computed), nor when the dask config key
    ``dqkm.keep-persisted`` is true: X then stays in memory as long as the
    lazy ``labels_`` that refer to it.
    """
    if not releases_persisted(persisted):
        return
    names = [k for k, v in vars(estimator).items()
             if k.endswith("_") and not k.startswith("_") and _holds_dask(v)]
    if not names:
        return
    flat = [a for k in names for a in (getattr(estimator, k) if isinstance(
        getattr(estimator, k), tuple) else (getattr(estimator, k),))]
    lazy = [a for a in flat if isinstance(a, da.Array)]
    new = dict(zip(map(id, lazy), _persist(*lazy)))
    for k in names:
        value = getattr(estimator, k)
        if isinstance(value, tuple):
            setattr(estimator, k, tuple(new.get(id(a), a) for a in value))
        else:
            setattr(estimator, k, new[id(value)])
