"""Run a pass's own graph in this process, level by level, without dask's local scheduler.

A Lloyd pass over persisted blocks with little work per block (few features, few
clusters) spent as much time in dask's threaded scheduler as in its kernels: a
pass over 8 tiny blocks that keeps its labels took 8.8 ms with it and 2.4 ms
with this runner, graph building included (ordering the graph, one queue round
trip per task, the getitem and combine tasks each handed to a thread), against
~8 ms of kernel time for 1M rows at 2 features.  :func:`run_graph` takes the graphs
:mod:`dqkm.parallel.engine` builds when they touch nothing but values already
in memory and dqkm's own tasks: it groups the tasks by depth, hands a level's
tasks to a thread pool when there are several (the block tasks) and runs the
rest (the getitems, the combine tree, the final tuple) in the calling thread.
Each task is called as dask calls it (``node(values)``), so results and
exceptions are the ones the threaded scheduler gives.

Anything else stays with dask (:func:`run_graph` returns ``None``): a task of
another library (a read of X's blocks that is its own task, a legacy tuple
task), a task without inputs (a block generated or read as a task of its own,
whose outputs dask's scheduler releases as it goes, where a level would hold
them all), a dask callback or progress bar that expects to see the tasks, or a
custom ``pool`` in dask's config.
"""

from __future__ import annotations

import concurrent.futures
import operator
import threading
from typing import Any

import dask
from dask.callbacks import Callback
from dask.task_spec import Alias, DataNode, GraphNode, Task

from ..data.execute import cpu_count
from ..kernels._split import shared_pool

__all__ = ["run_graph", "inline_cheap"]

# tasks whose work is a lookup or a tuple: run where their inputs are
_CHEAP: set = {operator.getitem}


def inline_cheap(func):
    """Mark ``func`` as cheap: :func:`run_graph` runs its tasks in the calling thread."""
    _CHEAP.add(func)
    return func


def _ours(key) -> bool:
    name = key[0] if isinstance(key, tuple) and key else key
    return isinstance(name, str) and name.startswith("dqkm-")


def _levels(graph: dict):
    """Tasks grouped by depth (a task's inputs are all in earlier levels), or None
    when the graph holds a node this runner does not take."""
    deps = {}
    for k, node in graph.items():
        if isinstance(node, Task):
            if not _ours(k) or not node.dependencies:
                # another library's task, or one that makes its output from nothing (a
                # block generated or read as a task of its own): dask's scheduler
                # orders those so that their outputs do not all wait in memory at once
                return None
            deps[k] = node.dependencies
        elif isinstance(node, (DataNode, Alias)):
            deps[k] = node.dependencies
        elif isinstance(node, GraphNode) or isinstance(node, (tuple, list, dict)):
            return None  # another node kind, or a legacy task that may hold keys
        else:
            deps[k] = ()
    depth = _depths(deps)
    if depth is None:
        return None
    levels: list = [[] for _ in range(1 + max(depth.values(), default=-1))]
    for k, lvl in depth.items():
        levels[lvl].append(k)
    return levels


def _depths(deps: dict):
    """Each key's depth (0: no dependency), by a depth-first walk; None for a graph
    with a missing key or a cycle (dask's scheduler then raises its own error)."""
    depth: dict = {}
    path: set = set()  # keys entered and not yet left: the walk's current path
    for root in deps:
        stack = [(root, False)]
        while stack:
            k, leaving = stack.pop()
            if leaving:
                depth[k] = 1 + max((depth[d] for d in deps[k]), default=-1)
                path.discard(k)
                continue
            if k in depth:
                continue
            path.add(k)
            stack.append((k, True))
            for d in deps[k]:
                if d in path or d not in deps:
                    return None
                if d not in depth:
                    stack.append((d, False))
    return depth


def _bypasses_nothing() -> bool:
    """Whether nothing would miss the tasks dask's local scheduler runs: no dask
    callback (a progress bar, a profiler) and no custom ``pool`` in dask's config."""
    return not Callback.active and dask.config.get("pool", None) is None


def _call(node, values):
    return node(values) if isinstance(node, GraphNode) else node


def run_graph(graph: dict, keys: list, *, threads: bool) -> tuple | None:
    """The values of ``keys`` in ``graph`` (a culled task graph), or None when dask
    must run it (see the module docstring).  ``threads``: the configured local
    scheduler is dask's threaded one (else its synchronous one: every task runs in
    the calling thread)."""
    if not _bypasses_nothing():
        return None
    levels = _levels(graph)
    if levels is None:
        return None
    # a compute from inside a pass task runs its tasks in that task's thread
    # (handing them to the pool it occupies could wait on itself)
    threads = threads and not threading.current_thread().name.startswith("dqkm-pass")
    n = int(dask.config.get("num_workers", None) or cpu_count())
    values: dict[Any, Any] = {}
    for level in levels:
        heavy = [k for k in level if isinstance(graph[k], Task)
                 and graph[k].func not in _CHEAP]
        if threads and n > 1 and len(heavy) > 1:
            _run_parallel(shared_pool("dqkm-pass", n), graph, heavy, values)
            heavy = set(heavy)
            level = [k for k in level if k not in heavy]
        for k in level:
            values[k] = _call(graph[k], values)
    return tuple(values[k] for k in keys)


def _run_parallel(pool, graph, keys, values):
    """Run ``keys``' tasks on ``pool``; the first error (in task order) is raised
    once every started task has ended, the tasks not yet started cancelled."""
    futures = [pool.submit(graph[k], values) for k in keys]
    try:
        concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
    finally:
        for f in futures:
            f.cancel()
        concurrent.futures.wait(futures)
    for k, f in zip(keys, futures):
        if f.cancelled():
            continue
        exc = f.exception()
        if exc is not None:
            raise exc
        values[k] = f.result()
