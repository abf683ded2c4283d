"""The one-iteration pattern shared by every dqkm algorithm.

1. the driver's small state is *broadcast* once per pass: one graph key that
   every block depends on (never embedded into each block's task);
2. one blockwise pass computes a small partial result per chunk;
3. the partials are combined by a tree of fan-in ``split_every`` (depth
   ``⌈log_split_every(n_chunks)⌉``, never a linear chain);
4. one ``compute`` per pass brings the aggregate back to the driver.

This module is the only place in dqkm that builds Dask graphs by hand: every
pass, per-block task and hand-made array of :mod:`dqkm.parallel` comes from its
helpers (``dask.task_spec`` tasks in one ``HighLevelGraph`` layer, keys from
``dask.base.tokenize`` of the inputs, or fresh per call for a task that is not a
pure function of them).  It holds no algorithm of its own.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import operator
import uuid
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import dask
import dask.array as da
import dask.threaded
import numpy as np
from dask.base import tokenize
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph
from dask.task_spec import DataNode, GraphNode, List, Task, TaskRef

from ..data.execute import (active_client, compute_settled, cpu_count, local_progress, progress,
                            scheduler_workers, show_progress, wait_watched)
from .blas import _CONTROLLER, blas_limit_context, driver_blas, one_blas_thread  # noqa: F401
from .local_run import inline_cheap, run_graph

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_SPLIT_EVERY",
    "BlockPass",
    "PerBlock",
    "active_client",
    "array_from_blocks",
    "array_from_tasks",
    "blocks_held_in_memory",
    "block_offsets",
    "block_sources",
    "driver_blas",
    "one_blas_thread",
    "broadcast",
    "compute",
    "compute_with_states",
    "compute_settled",
    "cpu_count",
    "map_blocks_reduce",
    "map_blocks_with_state",
    "map_tasks",
    "map_rows",
    "progress",
    "sum_partials",
    "tree_reduce",
]

DEFAULT_SPLIT_EVERY = 8

class SchedulerLostError(RuntimeError):
    """The connection to the Dask scheduler was lost during a pass."""


def scheduler_lost(client, error) -> bool:
    """Whether ``error``, raised while ``client`` gathered a pass, means the scheduler is gone.

    Told by the client's status (no longer ``"running"``: it lost the scheduler
    and is reconnecting or closed) and by the error's type: a closed comm, or
    the plain ``OSError`` that distributed's ``connect`` raises when it gives up,
    from the ``OSError`` of its last attempt (a refused connection, a timeout, a
    closed comm).  An error raised by a task (a ``FileNotFoundError``, a
    ``StoreError``, also one whose message mentions a connection) is not: it
    reaches the client without its ``__cause__``.
    """
    from distributed.comm import CommClosedError

    if client.status != "running" or isinstance(error, CommClosedError):
        return True
    return type(error) is OSError and isinstance(error.__cause__, OSError)


def compute(*objs):
    """``dask.compute`` with the BLAS thread limit and the optional progress bar.

    This is the single ``compute`` of one iteration.  A lost scheduler raises
    :class:`SchedulerLostError` (not a bare cancellation); workers that all stay
    paused raise :class:`~dqkm.exceptions.WorkersPausedError` instead of waiting
    forever (:func:`~dqkm.data.execute.wait_watched`).
    """
    client = active_client()
    if client is not None:
        with _scheduler_watch(client):
            futures = client.compute(list(objs))
            show_progress(futures)
            wait_watched(client, futures)
            return tuple(client.gather(futures))
    with blas_limit_context(), local_progress():
        get, threads = _local_get(objs)
        if get is None:
            return dask.compute(*objs)
        graph = HighLevelGraph.merge(*(o.__dask_graph__() for o in objs))
        keys = [o.key for o in objs]
        graph = dict(graph.cull(set(keys)))
        return run_graph(graph, keys, threads=threads) or tuple(get(graph, keys))


# dask's local schedulers by their config names (dask.config "scheduler")
_LOCAL_GETS = {None: dask.threaded.get, "threads": dask.threaded.get,
               "threading": dask.threaded.get, "sync": dask.get, "synchronous": dask.get,
               "single-threaded": dask.get}


def _local_get(objs):
    """``(get, threaded)``: the local scheduler's ``get`` for a compute of ``Delayed``
    passes and whether it is the threaded one, or ``(None, False)`` (use
    ``dask.compute``).  A pass's graph is built whole by this module's helpers
    (X's blocks already optimized by ``to_delayed``): culled and run by
    :func:`~dqkm.parallel.local_run.run_graph` or the configured local scheduler,
    it gives what ``dask.compute`` gives, without its collection handling."""
    if not objs or not all(isinstance(o, Delayed) for o in objs):
        return None, False
    name = dask.config.get("scheduler", None)
    name = name if name is None else str(name).lower()
    return _LOCAL_GETS.get(name), name in (None, "threads", "threading")


@contextlib.contextmanager
def _scheduler_watch(client, when="during a pass"):
    """A lost scheduler raises :class:`SchedulerLostError`, not a bare cancellation."""
    try:
        yield
    except (concurrent.futures.CancelledError, OSError) as e:
        if not scheduler_lost(client, e):
            raise
        raise SchedulerLostError(
            f"lost the connection to the Dask scheduler {client.scheduler.address} "
            f"{when} ({type(e).__name__}: {e}).") from e


def compute_with_states(bp: "BlockPass"):
    """One compute of a :func:`map_blocks_with_state` pass: ``(result, blocks)``.

    The reduced result comes back to this process; each block's state stays
    where it was computed: in this process with local threads (the arrays), on
    the workers with a client (``Future`` objects).  Either is what
    :func:`array_from_blocks` takes.  Errors as :func:`compute`.
    """
    client = active_client()
    if client is None:
        ((result, blocks),) = compute(bp.together)
        return result, list(blocks)
    with _scheduler_watch(client):
        futures = client.compute([bp.result, *bp.states])
        show_progress(futures)
        wait_watched(client, futures)
        return futures[0].result(), list(futures[1:])


class _Broadcast(Delayed):
    """A :func:`broadcast` key, with the object it holds (``value``)."""
    __slots__ = ("value",)


def broadcast(obj: Any, name: str = "state") -> Delayed:
    """Put ``obj`` in the graph once, as a single key all blocks depend on.

    The key is ``dask.base.tokenize`` of ``obj``: the same state gets the same
    key (an object tokenizes by its ``__dask_tokenize__`` where it has one).
    A pass over re-read X on a cluster sends it to every worker (:func:`_block_tasks`).
    """
    key = f"dqkm-{name}-{tokenize(obj)}"  # a DataNode: a tuple is data, never a task
    out = _Broadcast(key, HighLevelGraph.from_collections(key, {key: DataNode(key, obj)}))
    out.value = obj
    return out


def block_offsets(chunks: Sequence[int]) -> np.ndarray:
    """Row offset of each block: ``[0, c0, c0 + c1, ...]`` (length n_blocks + 1)."""
    return np.concatenate([[0], np.cumsum(np.asarray(chunks, dtype=np.int64))])


def _check_row_chunks(X: da.Array) -> None:
    if X.ndim == 2 and X.numblocks[1] != 1:
        raise ValueError(
            "X must be chunked along rows only; got chunks "
            f"{X.chunks[1]} along features. Fix it with X.rechunk({{1: -1}})."
        )


# X's row blocks and what a pass task takes of each (block_sources), kept while X
# lives: a fit's passes all read the same X, and rebuilding them (``to_delayed``
# optimizes X's graph) was a third of a pass's graph building.  By ``id`` with a
# weak reference (a Dask array compares elementwise, so it cannot be a dict key);
# an entry goes when its array does.
_BLOCKS: dict = {}


def _row_blocks(X: da.Array) -> tuple[list, list]:
    """``(blocks, sources)``: X's row blocks (``Delayed``) and :func:`block_sources`."""
    _check_row_chunks(X)
    hit = _BLOCKS.get(id(X))
    if hit is not None and hit[0]() is X:
        return hit[1], hit[2]
    blocks = list(np.asarray(X.to_delayed(optimize_graph=True)).reshape(-1))
    sources = block_sources(blocks, _block_nbytes(X))
    _BLOCKS[id(X)] = (weakref.ref(X), blocks, sources)
    weakref.finalize(X, _BLOCKS.pop, id(X), None)
    return blocks, sources


def _check_tree(split_every: int, n_parts: int) -> None:
    if split_every < 2:
        raise ValueError(f"split_every must be an int >= 2; got {split_every!r}.")
    if not n_parts:
        raise ValueError("tree_reduce needs at least one partial result.")


def _tree_tasks(layer: dict, keys: list, combine: Callable, split_every: int,
                prefix: str) -> Any:
    """Add the tasks of a ``combine`` tree over ``keys`` to ``layer``; return the root key.
    Written as ``Task`` objects with ``TaskRef`` dependencies (``delayed``: ~1 ms per pass)."""
    _check_tree(split_every, len(keys))
    level = 0
    while len(keys) > 1:
        nxt = []
        for i in range(0, len(keys), split_every):
            k = f"{prefix}-{level}-{i}"
            layer[k] = Task(k, combine, List(*(TaskRef(j) for j in keys[i:i + split_every])))
            nxt.append(k)
        keys = nxt
        level += 1
    return keys[0]


def _graph(layer: dict, name: str, deps: list) -> HighLevelGraph:
    """``layer`` on top of the graphs of ``deps`` (each distinct graph once: the
    blocks of one array share theirs)."""
    graphs = [d.__dask_graph__() for d in deps]  # held: their ids stay theirs
    one = {id(g): d for g, d in zip(graphs, deps)}
    return HighLevelGraph.from_collections(name, layer, dependencies=list(one.values()))


def _delayed_from_layer(layer: dict, key: Any, name: str, deps: list) -> Delayed:
    return Delayed(key, _graph(layer, name, deps), layer=name)


def tree_reduce(parts: list, combine: Callable, split_every: int = DEFAULT_SPLIT_EVERY,
                name: str = "combine") -> Delayed:
    """Combine delayed partials by a tree of fan-in ``split_every``.

    ``combine`` receives a list of partials and returns one partial.  The graph
    depth is ``⌈log_split_every(len(parts))⌉`` and no task has more than
    ``split_every`` dependencies.
    """
    _check_tree(split_every, len(parts))
    if len(parts) == 1:
        return parts[0]
    layer_name = f"dqkm-{name}-{tokenize(combine, [p.key for p in parts], split_every)}"
    layer: dict = {}
    root = _tree_tasks(layer, [p.key for p in parts], combine, split_every, layer_name)
    return _delayed_from_layer(layer, root, layer_name, list(parts))


def map_blocks_reduce(
    X: da.Array,
    chunk: Callable,
    combine: Callable,
    aggregate: Callable | None = None,
    *,
    args: Sequence = (),
    split_every: int | None = None,
    with_offsets: bool = False,
    name: str = "pass",
) -> Delayed:
    """One pass over X: ``chunk`` per row block, tree ``combine``, ``aggregate``.

    Parameters
    ----------
    X : dask array of shape (n_samples, n_features), chunked along rows only
    chunk : callable ``chunk(block, *args[, block_index, row_offset])``
        Returns a small partial result (e.g. K×D sums).
    combine : callable ``combine(list_of_partials) -> partial``
    aggregate : callable ``aggregate(partial) -> result``, optional
    args : broadcast objects (from :func:`broadcast`), small constants, or
        :class:`PerBlock` lists (element ``i`` goes to block ``i``'s task)
    with_offsets : if True, ``chunk`` also receives the block index and the
        global row offset of the block (for per-block seeds and row ids).

    Returns
    -------
    Delayed
        Compute it (with :func:`compute`) to get the aggregate.
    """
    layer_name = f"dqkm-{name}-" + tokenize(X.name, chunk, combine, aggregate, args,
                                            split_every, with_offsets)
    layer, deps, parts = _block_tasks(X, chunk, args, with_offsets, layer_name)
    out = _tree_tasks(layer, parts, combine, _fan_in(split_every), f"{layer_name}-combine")
    if aggregate is not None:
        k = f"{layer_name}-aggregate"
        layer[k] = Task(k, aggregate, TaskRef(out))
        out = k
    return _delayed_from_layer(layer, out, layer_name, deps)


def _fan_in(split_every) -> int:
    return DEFAULT_SPLIT_EVERY if split_every is None else int(split_every)


class PerBlock:
    """An argument of a blockwise pass that differs per row block: element ``i``
    goes to the task of block ``i`` (a block's kept state, its weights, its rows
    of another array).  An element that is a ``Delayed`` (a persisted result, a
    block of another Dask array) is referred to by its key; any other element is
    put in the task as it is (None, a small array)."""

    __slots__ = ("values",)

    def __init__(self, values):
        self.values = list(values)

    def __dask_tokenize__(self):
        return ("dqkm-per-block", [v.key if isinstance(v, Delayed) else v for v in self.values])


def _task_arg(value, deps: list):
    """``value`` as a task argument: a ``Delayed`` by reference (its graph joins
    ``deps``), a plain constant inline."""
    if isinstance(value, Delayed):
        deps.append(value)
        return TaskRef(value.key)
    if dask.is_dask_collection(value):
        raise TypeError(f"a blockwise pass takes broadcast (Delayed) state or plain constants "
                        f"(or PerBlock lists of them) as args; got a {type(value).__name__}. "
                        "Wrap it with broadcast() after computing it.")
    return value


def _block_tasks(X: da.Array, chunk: Callable, args: Sequence, with_offsets: bool,
                 layer_name: str):
    """One task ``chunk(block, *args[, i, offset])`` per row block of X, each block's
    read inlined in it (:func:`block_sources`): ``(layer, deps, keys)``.

    On a cluster of several workers, when blocks are read inside their tasks, the
    :func:`broadcast` arguments are first sent to every worker: the scheduler
    places a task with its dependencies, and as a key held by one worker they
    drew nearly all the blocks of a pass over re-read X to that worker.
    """
    blocks, sources = _row_blocks(X)
    offsets = block_offsets(X.chunks[0])
    for a in args:
        if isinstance(a, PerBlock) and len(a.values) != len(blocks):
            raise ValueError(f"a PerBlock argument has {len(a.values)} elements for "
                             f"{len(blocks)} row blocks of X; give one per block.")
    deps: list = []
    client = None
    if any(isinstance(a, _Broadcast) for a in args) and \
            not all(isinstance(s, TaskRef) for s in sources):
        client = active_client()
        if client is not None and len(scheduler_workers(client)) < 2:
            client = None  # a key stays recomputable if its one worker dies
    shared = [None if isinstance(a, PerBlock) else
              _everywhere(client, a) if client is not None and isinstance(a, _Broadcast) else
              _task_arg(a, deps) for a in args]
    layer: dict = {}
    keys = []
    for i, src in enumerate(sources):
        extra = (i, int(offsets[i])) if with_offsets else ()
        task_args = [_task_arg(a.values[i], deps) if isinstance(a, PerBlock) else s
                     for a, s in zip(args, shared)]
        k = f"{layer_name}-{i}"
        layer[k] = Task(k, chunk, src, *task_args, *extra)
        keys.append(k)
    # the blocks share X's graph: one of them brings it in (unless nothing of it is left)
    if any(isinstance(s, TaskRef) or s.dependencies for s in sources):
        deps.insert(0, blocks[0])
    return layer, deps, keys


def _everywhere(client, b: _Broadcast):
    """``b``'s object held by every worker of ``client``: a ``Future``, which a task
    takes as an argument as it takes a key (the graph keeps it while it lives)."""
    with _scheduler_watch(client):
        # in a list: scatter sends a list's, tuple's or dict's items as futures of their own
        return client.scatter([b.value], broadcast=True, hash=False)[0]


@dataclass(frozen=True)
class BlockPass:
    """The lazy outputs of :func:`map_blocks_with_state`, one graph for all three.

    Attributes
    ----------
    result : Delayed
        The tree-reduced partial results.
    states : list of Delayed
        Each block's new state (persist them to keep them beside their blocks).
    together : Delayed
        ``(result, [state of each block])`` as one key: one collection to compute
        when the states are to come back to this process.
    """

    result: Delayed
    states: list
    together: Delayed


def _pass_name(name: str, pure: bool, *inputs) -> str:
    """A pass's layer name: tokenize of its inputs, or, for a task that is not a pure
    function of them (it writes files, reads files that change, updates its state
    in place), a fresh name per call, as ``dask.delayed(pure=False)`` gives."""
    return f"dqkm-{name}-" + (tokenize(*inputs) if pure else uuid.uuid4().hex)


def map_blocks_with_state(X: da.Array, chunk: Callable, combine: Callable, *, args: Sequence = (),
                          split_every: int | None = None, with_offsets: bool = False,
                          name: str = "pass", pure: bool = True) -> BlockPass:
    """One pass over X whose blocks each carry a state to the next pass.

    ``chunk(block, *args[, block_index, row_offset])`` returns ``(new_state,
    partial)``; the partials are tree-reduced by ``combine`` (fan-in
    ``split_every``) as in :func:`map_blocks_reduce`.  The previous states are
    passed in ``args`` as a :class:`PerBlock` list (persisted ``Delayed`` results,
    plain values or None).  With ``pure=False`` the keys are fresh per call
    (see :func:`_pass_name`).
    """
    layer_name = _pass_name(name, pure, X.name, chunk, combine, args, split_every, with_offsets)
    layer, deps, keys = _block_tasks(X, chunk, args, with_offsets, layer_name)
    states, parts = [], []
    for k in keys:
        layer[f"{k}-state"] = Task(f"{k}-state", operator.getitem, TaskRef(k), 0)
        layer[f"{k}-part"] = Task(f"{k}-part", operator.getitem, TaskRef(k), 1)
        states.append(f"{k}-state")
        parts.append(f"{k}-part")
    root = _tree_tasks(layer, parts, combine, _fan_in(split_every), f"{layer_name}-combine")
    both = f"{layer_name}-together"
    layer[both] = Task(both, _result_and_states, TaskRef(root), *(TaskRef(k) for k in states))
    graph = _graph(layer, layer_name, deps)
    return BlockPass(Delayed(root, graph, layer=layer_name),
                     [Delayed(k, graph, layer=layer_name) for k in states],
                     Delayed(both, graph, layer=layer_name))


@inline_cheap
def _result_and_states(result, *states):
    return result, list(states)


def map_tasks(func: Callable, args: Sequence[Sequence], *, name: str,
              pure: bool = True) -> list:
    """One task ``func(*args[i])`` for each ``i``, as a list of ``Delayed``.

    A ``Delayed`` argument (e.g. a block's persisted state) is referred to by its
    key, so each task runs where that result is.  With ``pure=False`` the keys
    are fresh per call (see :func:`_pass_name`).
    """
    layer_name = _pass_name(name, pure, func, [list(a) for a in args])
    layer, deps = _call_tasks(func, args, layer_name, lambda i: f"{layer_name}-{i}")
    graph = _graph(layer, layer_name, deps)
    return [Delayed(k, graph, layer=layer_name) for k in layer]


def _call_tasks(func, args, layer_name, key_of):
    layer: dict = {}
    deps: list = []
    for i, a in enumerate(args):
        k = key_of(i)
        layer[k] = Task(k, func, *(_task_arg(v, deps) for v in a))
    return layer, deps


def _block_key(name: str, i: int, chunks) -> tuple:
    return (name, i) if len(chunks) == 1 else (name, i, 0)


def array_from_tasks(func: Callable, args: Sequence[Sequence], chunks, dtype, *, name: str,
                     meta=None) -> da.Array:
    """A Dask array chunked along rows whose block ``i`` is ``func(*args[i])``.

    ``chunks`` is ``(row_chunks,)`` or ``(row_chunks, (n_columns,))``; a
    ``Delayed`` argument is referred to by its key.  The name is ``tokenize``
    of the function, the arguments and the layout.
    """
    chunks = tuple(tuple(int(c) for c in cs) for cs in chunks)
    layer_name = f"dqkm-{name}-" + tokenize(func, [list(a) for a in args], chunks, dtype)
    layer, deps = _call_tasks(func, args, layer_name,
                              lambda i: _block_key(layer_name, i, chunks))
    return da.Array(_graph(layer, layer_name, deps), layer_name, chunks, dtype=dtype, meta=meta)


def array_from_blocks(blocks: Sequence, chunks, dtype, *, name: str, meta=None) -> da.Array:
    """A Dask array chunked along rows whose block ``i`` is ``blocks[i]`` itself: an
    in-memory array or a distributed ``Future`` of one.  ``name`` must be unique
    to these blocks (the caller documents how it is made)."""
    graph = {_block_key(name, i, chunks): b for i, b in enumerate(blocks)}
    return da.Array(graph, name, chunks, dtype=dtype, meta=meta)


def blocks_held_in_memory(X: da.Array) -> bool:
    """Whether X's graph is its blocks' values or futures (a persisted array), with
    no task that reads or computes a block."""
    graph = dict(X.__dask_graph__())
    return len(graph) == int(np.prod(X.numblocks)) and not any(
        isinstance(v, GraphNode) and not hasattr(v, "value") for v in graph.values())


#: Blocks of at least this many bytes are produced inside the task that uses them.
INLINE_BYTES = 1 << 20


def block_sources(blocks, nbytes) -> list:
    """What each pass task takes as its block: the task that produces the block,
    inlined with the chain of tasks only it uses (a read from Zarr, a
    generator, a slice or cast of them), else a reference to its key.

    Blocks under :data:`INLINE_BYTES` (``nbytes``, one per block) stay tasks
    of their own: holding one ahead of its consumer costs nothing.

    An inlined read runs inside the pass task, so its chunk lives only while
    that task runs: a worker holds one chunk per running task.  As a task of
    its own, every read done ahead of its consumer (a worker is handed more
    root tasks than it has threads) was one more chunk held in memory: two
    64 MiB chunks per one-thread worker were measured, enough to push a
    worker that already held its libraries past distributed's restart line.
    Persisted blocks (already in memory) and results several blocks share
    are referred to by their key.
    """
    graph = dict(blocks[0].__dask_graph__()) if blocks else {}
    users: dict = {}
    for node in graph.values():
        for dep in getattr(node, "dependencies", ()):
            users[dep] = users.get(dep, 0) + 1
    return [(_inlined(graph, blk.key, users) if size >= INLINE_BYTES else None)
            or TaskRef(blk.key) for blk, size in zip(blocks, nbytes)]


def _block_nbytes(X) -> list:
    row = X.dtype.itemsize * int(np.prod(X.shape[1:], dtype=np.int64))
    return [int(r) * row for r in X.chunks[0]]


def _inlined(graph, key, users):
    node = graph.get(key)
    if not isinstance(node, Task):
        return None
    subs = {}
    for dep in node.dependencies:
        sub = _inlined(graph, dep, users) if users.get(dep, 0) == 1 else None
        if sub is not None:
            subs[dep] = sub
    return node.substitute(subs) if subs else node


def _call_on_block(blocks, func, *args):
    (block,) = blocks  # X is chunked along rows only: one block per row range
    return func(block, *args)


def map_rows(X: da.Array, func: Callable, *args, dtype, name: str = "rows") -> da.Array:
    """Lazy per-row results ``func(block, *args)`` (1-D, aligned with X's row chunks).

    ``X.map_blocks(func, drop_axis=1)`` would hand ``func`` a concatenation of
    the blocks along the dropped axis, i.e. a copy of every block (0.1 s per
    800 MB on each ``predict``); here each task gets the stored block itself.
    ``args`` are constants or :func:`broadcast` objects; a NumPy array above
    1 MiB is broadcast (one key for all tasks, as ``map_blocks`` does), smaller
    ones are embedded in each task.
    """
    _check_row_chunks(X)
    args = [broadcast(a, f"{name}-arg") if isinstance(a, np.ndarray) and a.nbytes > 2**20
            else a for a in args]
    extra = [a for arg in args for a in (arg, None)]
    return da.blockwise(_call_on_block, "i", X, "ij", func, None, *extra, concatenate=False,
                        dtype=dtype, meta=np.empty((0,), dtype=dtype),
                        name=f"dqkm-{name}-{tokenize(X.name, func, args)}")


def sum_partials(parts: list):
    """Combine tuples of arrays/numbers by elementwise sum (float64 stays float64)."""
    first = parts[0]
    if isinstance(first, dict):
        return {k: sum_partials([p[k] for p in parts]) for k in first}
    if isinstance(first, tuple):
        return tuple(sum_partials([p[j] for p in parts]) for j in range(len(first)))
    out = first.copy() if isinstance(first, np.ndarray) else first
    for p in parts[1:]:
        out = out + p
    return out
