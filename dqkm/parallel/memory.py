"""What one task of a pass needs, against what a worker can give it.

A pass whose task cannot fit in a worker gets the worker paused (at
``distributed.worker.memory.pause`` of its ``memory_limit``) or killed by its
nanny (at ``terminate``), the task retried on the next worker until none is
left, and the fit either fails with ``KilledWorker`` or waits for workers that
never come back.  :func:`check_task_memory` refuses such a pass *before* it is
submitted, with the memory it needs and the knob that changes it, and
:func:`row_tile` sizes the row tiles a task works through so that it fits.

The budget is the real headroom of the tightest worker: its ``memory_limit``
times the pause fraction, minus its process memory measured on it now, with
dqkm's modules loaded (Python, NumPy, numba's loaded kernels, dask and the
results it holds: a few hundred MB before any task), minus
:data:`MARGIN_FRACTION` of the limit, divided by its threads (tasks run side
by side). Where the workers have no pause or terminate threshold the headroom
rule has no line to keep below, and a task may use :data:`TASK_FRACTION` of
the limit per thread; where they do, it may use no more than that either.

A worker's own memory is measured, not assumed, because it is not constant:
it grows when the worker first runs a kind of task (the modules and numba
kernels that task loads) and by distributed's bounded logs of recent tasks,
and glibc may keep freed memory for reuse (where ``MALLOC_TRIM_THRESHOLD_`` is
unset, as dqkm's cluster configurations do by default; distributed's nanny
sets it low: see distributed's "Worker Memory Management" page).  dqkm keeps
nothing on a worker between tasks (no cache, no scratch buffers, no results
but those a fit persists), so that memory is not dqkm's to release; it calls
no ``malloc_trim``, which distributed documents as a diagnostic experiment,
not as a practice.
"""

from __future__ import annotations

import math

import dask
import numpy as np
import psutil

from ..data.execute import scheduler_workers
from ..data.spill import spill_task_parts
from ..data.zarr_reader import compressed_read_bytes, zarr_python_read_bytes
from ..exceptions import DataError
from .engine import _scheduler_watch, active_client, compute

__all__ = ["TASK_FRACTION", "RESIDENT_FRACTION", "MARGIN_FRACTION", "task_budget",
           "worker_headroom", "worker_rss", "resident_budget", "check_task_memory",
           "check_resident_memory", "row_tile", "check_pass_memory", "chunk_bytes",
           "CHUNK_KNOBS", "check_shuffle_memory", "gather_rows", "MemoryBudgetError",
           "with_compressed_read", "format_bytes"]

#: The share of a worker's memory_limit (per thread) one task may use at most.
TASK_FRACTION = 0.5
#: The share of a worker's memory_limit kept free below its pause line.
MARGIN_FRACTION = 0.05
#: The share of the workers' total memory_limit that results held in memory
#: between passes (e.g. KMultipleMeans's rows of S) may take.
RESIDENT_FRACTION = 0.25


class MemoryBudgetError(DataError, MemoryError):
    """A pass's tasks need more memory than the workers can give one task."""


def format_bytes(n):
    """``'1.5 GiB'``, ``'300 MiB'``, ``'12 KiB'``."""
    n = float(n)
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}" if n < 10 * size else f"{n / size:.0f} {unit}"
    return f"{n:.0f} B"


def memory_line():
    """The fraction of ``memory_limit`` a worker must stay under: distributed's
    ``pause`` fraction, else its ``terminate`` fraction, else None (neither set)."""
    for key in ("distributed.worker.memory.pause", "distributed.worker.memory.terminate"):
        value = dask.config.get(key, None)
        if value not in (None, False) and float(value) > 0:
            return float(value)
    return None


def worker_headroom(worker, line=None):
    """Bytes one task may use on ``worker`` (an entry of the scheduler's worker info).

    ``min(TASK_FRACTION · limit, line · limit − process memory − MARGIN_FRACTION
    · limit) / threads`` (at least 0), with ``line`` from :func:`memory_line`;
    ``TASK_FRACTION · limit / threads`` when there is no line; None when the
    worker has no ``memory_limit``.
    """
    limit = float(worker.get("memory_limit") or 0)
    if not limit:
        return None
    threads = max(1, int(worker.get("nthreads") or 1))
    line = memory_line() if line is None else line
    room = TASK_FRACTION * limit
    if line:
        process = float((worker.get("metrics") or {}).get("memory") or 0)
        room = min(room, line * limit - process - MARGIN_FRACTION * limit)
    return max(0.0, room) / threads


def worker_rss():
    """This process's resident memory (bytes).  Run on the workers by
    :func:`task_budget`: a function of dqkm's, sent by reference, so a worker that
    has not run a dqkm task yet imports dqkm before it measures, as a task would."""
    return psutil.Process().memory_info().rss


def task_budget():
    """Bytes one task may use on the tightest worker now (:func:`worker_headroom`),
    or None without limits (the local schedulers, or a worker without
    ``memory_limit``).

    The process memory is measured on the workers now (:func:`worker_rss`), not
    taken from their last heartbeat: right after a pass a heartbeat may still
    report that pass's peak, and a worker just started reports its memory
    before dqkm's modules are loaded, a few hundred MB less than a task of a
    pass finds there.
    """
    client = active_client()
    if client is None:
        return None
    workers = scheduler_workers(client)
    if not workers:
        return None
    if any(not w.get("memory_limit") for w in workers.values()):
        return None
    with _scheduler_watch(client, "measuring the workers' memory before a pass"):
        now = client.run(worker_rss, on_error="ignore")  # a worker lost now: its heartbeat
    budgets = []
    for addr, w in workers.items():
        if addr in now:
            w = dict(w, metrics=dict(w.get("metrics") or {}, memory=now[addr]))
        budgets.append(worker_headroom(w))
    return min(budgets)


def _budget_words(budget):
    line = memory_line()
    if line is None:
        return (f"a worker can give a task {format_bytes(budget)} ({TASK_FRACTION:g} of its "
                "memory_limit per thread)")
    return (f"a worker can give a task {format_bytes(budget)} (what the tightest worker has "
            f"left below {line:g} of its memory_limit, less a {MARGIN_FRACTION:g} margin, per "
            f"thread; at most {TASK_FRACTION:g} of the limit)")


def resident_budget():
    """Bytes the workers may hold between passes, or None without limits."""
    client = active_client()
    if client is None:
        return None
    limits = [float(w.get("memory_limit") or 0) for w in scheduler_workers(client).values()]
    if not limits or not all(limits):
        return None
    return RESIDENT_FRACTION * sum(limits)


def check_resident_memory(what, need, knobs, budget=None):
    """Raise :class:`MemoryBudgetError` when results kept in the workers' memory
    between passes (``need`` bytes, over all workers) exceed
    :data:`RESIDENT_FRACTION` of their total ``memory_limit``."""
    budget = resident_budget() if budget is None else budget
    if budget is not None and need > budget:
        raise MemoryBudgetError(
            f"{what} keeps about {format_bytes(need)} in the workers' memory between "
            f"passes, more than {format_bytes(budget)} ({RESIDENT_FRACTION:g} of their total "
            f"memory_limit). {knobs}")
    return int(need)


def check_task_memory(what, parts, knobs, budget=None):
    """Raise :class:`MemoryBudgetError` when ``sum(parts.values())`` exceeds the budget.

    Parameters
    ----------
    what : str
        The pass, e.g. ``"KMultipleMeans pass"``.
    parts : dict of str to int
        Bytes of each part of one task's working set (named in the message).
    knobs : str
        How to make it fit (the parameters to change).
    budget : int, optional
        Default :func:`task_budget`; no check when None.

    Returns
    -------
    int
        The bytes one task needs.
    """
    need = int(sum(parts.values()))
    if budget is None:
        budget = task_budget()
    if budget is not None and need > budget:
        detail = ", ".join(f"{k} {format_bytes(v)}" for k, v in parts.items() if v)
        raise MemoryBudgetError(
            f"{what}: one task needs about {format_bytes(need)} ({detail}), but "
            f"{_budget_words(budget)}. {knobs}")
    return need


def row_tile(what, *, rows, per_row, fixed, knobs, min_rows=1, budget=None):
    """Rows per tile a task works through so that its working set fits the budget.

    The task holds ``fixed`` bytes whatever its tiles (its input chunk, the
    broadcast state, its partial result) and ``per_row`` bytes per row of the
    tile it works on.

    Parameters
    ----------
    what : str
        The pass (named in the error).
    rows : int
        Rows of the task's chunk: the tile when there is no budget, or when
        the whole chunk fits.
    per_row, fixed : int
        Bytes per tile row and bytes independent of the tile.
    knobs : str
        How to make a pass fit that does not.
    min_rows : int, default=1
        The smallest tile the pass works with.
    budget : int, optional
        Default :func:`task_budget`.

    Returns
    -------
    int
        The tile, in ``[min(min_rows, rows), rows]``.

    Raises
    ------
    MemoryBudgetError
        When even a tile of ``min_rows`` rows does not fit.
    """
    rows = max(1, int(rows))
    low = min(int(min_rows), rows)
    if budget is None:
        budget = task_budget()
    if budget is None:
        return rows
    check_task_memory(what, {"the chunk and fixed state": int(fixed),
                             f"a tile of {low} rows": int(per_row) * low}, knobs, budget)
    fits = math.floor((budget - fixed) / max(1, per_row))
    return int(max(low, min(rows, fits)))


#: How to make a pass over chunks of X fit that does not.
CHUNK_KNOBS = ("Store X in chunks of fewer rows (or rechunk it), or give the workers a larger "
               "memory_limit (or fewer threads each).")


def chunk_bytes(X):
    """Bytes of the largest row chunk of a dense Dask array ``X`` (None for
    sparse chunks, whose size is their non-zeros', or a non-2-D X)."""
    meta = getattr(X, "_meta", None)
    if getattr(X, "ndim", 0) != 2 or not isinstance(meta, np.ndarray):
        return None
    return max(X.chunks[0], default=0) * int(X.shape[1]) * X.dtype.itemsize


def check_pass_memory(what, X, *, per_row=0, fixed=0, work="its per-row results",
                      state="the broadcast state and partial sums", knobs=CHUNK_KNOBS):
    """Refuse, before it starts, a pass over dense ``X`` whose task cannot fit.

    One task holds its chunk of X, ``per_row`` bytes per row of it (the kernel's
    per-row outputs: labels, distances, ...) and ``fixed`` bytes (the state it
    is given and the partial result it returns); the kernels tile their
    temporaries to the cache, so these are the task's working set.

    Returns
    -------
    int or None
        The bytes one task needs (None for sparse chunks: not checked).

    Raises
    ------
    MemoryBudgetError
        When that exceeds :func:`task_budget` (with the parts it counted).
    """
    chunk = chunk_bytes(X)
    if chunk is None:
        return None
    rows = max(X.chunks[0], default=0)
    parts = {"chunk of X": chunk, work: int(per_row) * rows, state: int(fixed)}
    # the broadcast state is there before the read (the partial sums come after it:
    # counted as held, the larger need)
    return check_task_memory(what, with_compressed_read(parts, X, held=(state,)), knobs)


def with_compressed_read(parts, X, block="chunk of X", held=()):
    """``parts`` plus what reading a block of X holds beside the decoded block while
    the task reads it: for X read from a compressed Zarr store by dqkm's chunk
    reader, its compressed chunk (:func:`~dqkm.data.zarr_reader.compressed_read_bytes`);
    for X read through zarr-python, its fetched and decoded buffers
    (:func:`~dqkm.data.zarr_reader.zarr_python_read_bytes`).  The read's buffers are
    freed before the task allocates its later parts, so they count only beyond
    those: every part but ``block`` (the name of its decoded block) and those named
    in ``held``, which are in memory during the read (the broadcast state, the
    previous pass's per-row state the task is given)."""
    compressed, through_zarr = compressed_read_bytes(X), zarr_python_read_bytes(X)
    read = max(compressed, through_zarr)
    what = ("its compressed chunk while decoding it" if compressed >= through_zarr
            else "zarr-python's read buffers of its block")
    later = sum(v for k, v in parts.items() if k != block and k not in held)
    if read > later:
        parts = dict(parts, **{what: read - later})
    return parts


def check_shuffle_memory(Xd):
    """Refuse, before any pass, a ClusterIndex build through the spill-file shuffle
    (:func:`dqkm.parallel.shuffle.permute_rows`) whose tasks cannot fit a worker.

    Phase 1 of the shuffle holds, per task, one block of X with its rows'
    destinations, sort order and squared norms and one sorted tile
    (:func:`dqkm.data.spill.spill_task_parts`); phase 2 holds one ~1 MB output
    block.  Raises :class:`MemoryBudgetError` with the memory that task needs
    when the tightest worker's headroom (:func:`task_budget`) is smaller;
    returns the bytes.
    """
    rows = max(Xd.chunks[0], default=0)
    parts = spill_task_parts(rows, Xd.shape[1] * Xd.dtype.itemsize, sq_norms=True)
    return check_task_memory("ClusterIndex build (shuffle of X's rows by cluster)",
                             with_compressed_read(parts, Xd, block="block of X"), CHUNK_KNOBS)


def gather_rows(arr):
    """A 1-D Dask array (e.g. labels) as a NumPy array on the driver, its blocks
    fetched a few at a time.

    ``compute`` of a whole array concatenates its blocks in one task on one
    worker (then sends that copy): twice the array on that worker, which on a
    large X is more than its headroom.  Here the workers compute waves of two
    blocks per thread, each wave fetched before the next starts, and the driver
    concatenates: a worker holds no more than a wave's blocks.
    """
    client = active_client()
    if client is None or arr.numblocks[0] <= 1:
        return np.asarray(compute(arr)[0])
    threads = sum(max(1, int(w.get("nthreads") or 1))
                  for w in scheduler_workers(client).values())
    wave = max(2, 2 * threads)
    blocks = list(np.asarray(arr.to_delayed(optimize_graph=True)).ravel())
    parts = []
    for a in range(0, len(blocks), wave):
        parts.extend(np.asarray(p) for p in compute(*blocks[a:a + wave]))
    return np.concatenate(parts)
