"""Running a finished Dask collection: the active client, the cores, the progress flag,
and :func:`compute_settled` (what the atomic writers of the data layer compute with).

Graph building stays in :mod:`dqkm.parallel`; :mod:`dqkm.parallel.engine`
re-exports these names.
"""

from __future__ import annotations

import contextlib
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import dask

__all__ = ["active_client", "compute_settled", "cpu_count", "local_progress", "progress",
           "progress_enabled", "show_progress"]

# The one switch for per-pass bars, shared with the verbose=2 progress views.
from ..progress import DASK_BARS as _PROGRESS  # noqa: E402


@contextlib.contextmanager
def progress(enabled: bool = True):
    """Show a progress bar for every pass over the data inside this block.

    Works with the threaded scheduler (``dask.diagnostics.ProgressBar``) and
    with a ``distributed.Client`` (``distributed.progress``: a text bar in a
    terminal, a widget displayed in Jupyter with ``ipywidgets``, a text bar in
    Jupyter without it).
    """
    old = _PROGRESS["enabled"]
    _PROGRESS["enabled"] = bool(enabled)
    try:
        yield
    finally:
        _PROGRESS["enabled"] = old


def progress_enabled() -> bool:
    """Whether a :func:`progress` block is active."""
    return _PROGRESS["enabled"]


def cpu_count() -> int:
    """The cores of this machine (at least 1)."""
    return os.cpu_count() or 1


def active_client():
    """The default ``distributed.Client`` if one is active and in use, else None."""
    if dask.config.get("scheduler", None) not in (None, "dask.distributed", "distributed"):
        return None
    try:
        from distributed import default_client
    except ImportError:  # pragma: no cover - distributed is a dependency
        return None
    try:
        return default_client()
    except ValueError:
        return None


def show_progress(futures):
    """distributed's progress bar (text in a terminal, widget in Jupyter), if enabled."""
    if _PROGRESS["enabled"]:
        from ..progress import show_dask_progress

        show_dask_progress(futures)


def local_progress():
    """dask's ProgressBar on stderr for the local schedulers, if enabled."""
    if not _PROGRESS["enabled"]:
        return contextlib.nullcontext()
    from dask.diagnostics import ProgressBar

    return ProgressBar(out=sys.stderr)


def compute_settled(*objs):
    """Compute ``objs`` (e.g. stores to Zarr); on failure, return only after every
    task already running has ended.

    A scheduler raises at the first failed task while other blocks may still
    be writing; cleaning up a temporary store before they finish would let
    them recreate part of it.  Used by the atomic writers of the data layer.
    """
    client = active_client()
    if client is not None:
        from distributed import wait

        futures = client.compute(list(objs))
        show_progress(futures)
        wait(futures)
        return tuple(client.gather(futures))
    with ThreadPoolExecutor(cpu_count()) as pool:  # leaving the block joins every task
        with local_progress():
            return dask.compute(*objs, scheduler="threads", pool=pool)
