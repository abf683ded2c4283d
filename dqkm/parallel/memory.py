"""What one task of a pass needs, against what a worker can give it.

A pass whose task cannot fit in a worker gets the worker killed by its nanny,
the task retried on the next worker until none is left, and the fit either
fails with ``KilledWorker`` or waits for workers that never come back.
:func:`check_task_memory` refuses such a pass *before* it is submitted, with
the memory it needs and the knob that changes it.

A task may use :data:`TASK_FRACTION` of its worker's ``memory_limit`` divided
by the worker's threads (tasks run side by side); the rest is the worker
process itself (Python, NumPy, numba and dask: a few hundred MB), the
results it holds and the margin before distributed pauses (80 %) and
restarts (95 %) it.
"""

from __future__ import annotations

from ..exceptions import DataError
from .engine import active_client, scheduler_workers

__all__ = ["TASK_FRACTION", "RESIDENT_FRACTION", "task_budget", "resident_budget",
           "check_task_memory", "check_resident_memory", "MemoryBudgetError", "format_bytes"]

#: The share of a worker's memory_limit (per thread) one task may use.
TASK_FRACTION = 0.5
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


def task_budget():
    """Bytes one task may use on the tightest worker, or None without limits.

    None with the local schedulers (no worker memory limit) or when a worker
    has no ``memory_limit``.
    """
    client = active_client()
    if client is None:
        return None
    budgets = []
    for w in scheduler_workers(client).values():
        limit = w.get("memory_limit") or 0
        if not limit:
            return None
        budgets.append(TASK_FRACTION * float(limit) / max(1, int(w.get("nthreads") or 1)))
    return min(budgets) if budgets else None


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
    budget = task_budget() if budget is None else budget
    if budget is not None and need > budget:
        detail = ", ".join(f"{k} {format_bytes(v)}" for k, v in parts.items() if v)
        raise MemoryBudgetError(
            f"{what}: one task needs about {format_bytes(need)} ({detail}), but a worker can "
            f"give a task {format_bytes(budget)} ({TASK_FRACTION:g} of its memory_limit per "
            f"thread). {knobs}")
    return need
