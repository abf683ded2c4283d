"""Running a finished Dask collection: the active client, the cores, the progress flag,
and :func:`compute_settled` (what the atomic writers of the data layer compute with).

Graph building stays in :mod:`dqkm.parallel`; :mod:`dqkm.parallel.engine`
re-exports these names.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import os
import queue
import sys
import threading
import time
import traceback
from concurrent.futures import Executor, Future, InvalidStateError

import dask
from dask.diagnostics import ProgressBar

from ..exceptions import WorkersPausedError
# The one switch for per-pass bars, shared with the verbose=2 progress views.
from ..progress import DASK_BARS as _PROGRESS
from ..progress import show_dask_progress

__all__ = ["active_client", "compute_settled", "cpu_count", "local_progress", "progress",
           "progress_enabled", "settle_timeout", "show_progress", "paused_timeout",
           "scheduler_workers", "wait_watched"]


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
        show_dask_progress(futures)


def local_progress():
    """dask's ProgressBar on stderr for the local schedulers, if enabled."""
    if not _PROGRESS["enabled"]:
        return contextlib.nullcontext()
    return ProgressBar(out=sys.stderr)


def settle_timeout() -> float:
    """Seconds a failed or interrupted write waits for its running tasks to end
    (the Dask config key ``dqkm.settle-timeout``, default 30)."""
    return float(dask.config.get("dqkm.settle-timeout", 30))


def paused_timeout() -> float:
    """Seconds every worker may stay paused before a computation gives up (the Dask
    config key ``dqkm.paused-timeout``, default 120)."""
    return float(dask.config.get("dqkm.paused-timeout", 120))


_POLL = 2.0


def scheduler_workers(client) -> dict:
    """Every worker's info from the scheduler (newer ``distributed`` lists only 5
    unless asked for all with ``n_workers=-1``); empty while the client has no
    scheduler (its cached info then holds no ``workers``: a lost scheduler is told
    by the computation's own error, not by a KeyError here)."""
    params = inspect.signature(client.scheduler_info).parameters
    info = client.scheduler_info(n_workers=-1) if "n_workers" in params else client.scheduler_info()
    return info.get("workers", {})


def _paused_message(workers, seconds) -> str:
    pause = dask.config.get("distributed.worker.memory.pause", 0.8)
    mib = 2**20
    detail = "; ".join(
        f"{addr}: {(w.get('metrics') or {}).get('memory', 0) / mib:.0f} MiB of its "
        f"memory_limit {float(w.get('memory_limit') or 0) / mib:.0f} MiB"
        for addr, w in sorted(workers.items()))
    return (f"every worker of the Dask cluster has been paused for {seconds:.0f} s, so the "
            f"computation cannot go on and was cancelled. distributed pauses a worker whose "
            f"process memory is above {pause:g} of its memory_limit ({detail}). A worker "
            f"process with dask, numba and dqkm's kernels loaded takes a few hundred MiB "
            f"before it holds any data: give the workers a larger memory_limit (or fewer "
            f"threads each), or smaller chunks. The wait is set by the Dask config key "
            f"dqkm.paused-timeout.")


def _drop_frames(error) -> None:
    """Clear the finished frames ``error`` and the errors chained to it refer to.

    A poll's ``TimeoutError`` comes out of distributed's ``sync``, which keeps it
    in a closure of the frames its traceback holds: a reference cycle through
    frames whose locals hold the awaited futures.  Left to Python's cyclic
    garbage collector, the results of those futures (a persisted X, a pass's
    inputs) stayed held on the workers after the fit returned, until the
    collector happened to run.
    """
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)  # skips the frames still running
        error.__traceback__ = None
        error = error.__context__ or error.__cause__


def wait_watched(client, futures, timeout=None):
    """``distributed.wait(futures)``, raising :class:`~dqkm.exceptions.WorkersPausedError`
    (after cancelling ``futures``) when every worker of the cluster stays paused for
    :func:`paused_timeout` seconds (or ``timeout``).

    A paused worker starts no task; when its memory does not come down (a worker
    whose process alone is above distributed's pause threshold), a computation
    would wait forever.  Ends normally when the futures are done, also when some
    of them failed (``gather`` raises their error).
    """
    from distributed import wait  # distributed is imported only where a Client is in use

    limit = paused_timeout() if timeout is None else float(timeout)
    since = None
    while True:
        try:
            wait(futures, timeout=_POLL)
            return
        except TimeoutError as e:
            _drop_frames(e)
        workers = scheduler_workers(client)
        if not workers or any(w.get("status") != "paused" for w in workers.values()):
            since = None
            continue
        now = time.monotonic()
        since = now if since is None else since
        if now - since >= limit:
            client.cancel(futures)
            raise WorkersPausedError(_paused_message(workers, now - since))


def compute_settled(*objs):
    """Compute ``objs`` (e.g. stores to Zarr); on any exception, ``KeyboardInterrupt``
    included, stop the computation and return only after the tasks already running
    have ended.

    A scheduler raises at the first failed task while other blocks may still be
    writing; cleaning up a temporary store before they finish would let them
    recreate part of it.  Used by the atomic writers of the data layer:

    * with a ``distributed.Client``, the computation's futures are cancelled and
      every worker is asked, until none runs a task of this computation, which
      of them it still runs;
    * with the threaded scheduler, the tasks run on a pool that, once the
      computation failed, starts no further task and is waited on.  A
      ``KeyboardInterrupt`` (or another non-``Exception`` error) that ends any
      thread of the process during the computation — say Zarr's I/O thread,
      which the tasks then wait on forever — ends the computation at once with
      that error.

    The wait is bounded by :func:`settle_timeout`: a task still running then
    (blocked forever on a thread that died) is left behind.
    """
    client = active_client()
    if client is not None:
        return _compute_distributed(client, objs)
    pool = _SettlingPool(cpu_count())
    _ACTIVE.add(pool)
    _install_excepthook()
    try:
        with local_progress():
            return dask.compute(*objs, scheduler="threads", pool=pool)
    except BaseException as e:
        pool.abort(e)
        pool.wait_idle(settle_timeout())
        raise
    finally:
        _ACTIVE.discard(pool)
        pool.shutdown(wait=False)


def _compute_distributed(client, objs):
    futures = client.compute(list(objs))
    try:
        show_progress(futures)
        wait_watched(client, futures)
        return tuple(client.gather(futures))
    except BaseException:
        client.cancel(futures)
        tokens = {_token(f.key) for f in futures}
        for obj in objs:  # the workers run fused tasks, named for a key of the graph
            tokens.update(_token(k) for k in obj.__dask_graph__().keys())
        _wait_settled(client, tokens, settle_timeout())
        raise


def _token(key):
    """The last ``-`` part of a key's name: what a task fused from it keeps (the graph's
    ``("store-map-<token>", i)`` runs as ``("array-store-map-<token>", i)``)."""
    name = key[0] if isinstance(key, tuple) else key
    return str(name).rsplit("-", 1)[-1]


def _running_keys(tokens, dask_worker=None):
    """The keys of the tasks that occupy a thread of this worker (cancelled ones
    included: a thread cannot be stopped) whose name ends in one of ``tokens``."""
    return [ts.key for ts in dask_worker.state.all_running_tasks if _token(ts.key) in tokens]


def _wait_settled(client, tokens, timeout):
    """Return once no worker runs a task whose name ends in one of ``tokens``, or
    after ``timeout`` seconds; a worker that does not answer counts as settled."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            running = client.run(_running_keys, tokens, on_error="return")
        except Exception:  # noqa: BLE001 - the cluster is gone: nothing runs there
            return
        if not any(isinstance(v, list) and v for v in running.values()):
            return
        time.sleep(0.02)


# ---------------------------------------------------------------- threaded scheduler
_ACTIVE: set = set()  # the pools of the threaded computations in progress


def _install_excepthook():
    """Chain a ``threading.excepthook`` that aborts the computations in progress when
    a thread dies of a non-``Exception`` error (``KeyboardInterrupt``); again if
    the hook was replaced since (pytest, for one, restores its own after a test)."""
    if getattr(threading.excepthook, "_dqkm_settling", False):
        return
    previous = threading.excepthook

    def hook(args):
        if args.exc_type is not None and not issubclass(args.exc_type, Exception):
            for pool in list(_ACTIVE):
                pool.abort(args.exc_value if args.exc_value is not None else args.exc_type())
        previous(args)

    hook._dqkm_settling = True
    threading.excepthook = hook


class _SettlingPool(Executor):
    """Daemon threads running the tasks of one threaded computation.

    :meth:`abort` fails every outstanding future at once (so that the scheduler's
    loop, waiting on them, raises) and starts no further task; :meth:`wait_idle`
    waits, bounded, for the tasks already running.
    """

    def __init__(self, n_threads):
        self._queue = queue.SimpleQueue()
        self._cond = threading.Condition()
        self._pending = set()
        self._running = 0
        self._aborted = None
        self._max_workers = n_threads  # what dask's threaded scheduler sizes its batches by
        self._threads = [threading.Thread(target=self._work, daemon=True,
                                          name=f"dqkm-compute-{i}") for i in range(n_threads)]
        for t in self._threads:
            t.start()

    def submit(self, fn, /, *args, **kwargs):
        fut = Future()
        with self._cond:
            if self._aborted is None:
                self._pending.add(fut)
                # the submitter's contextvars, as dask's own pool propagates them
                self._queue.put((fut, contextvars.copy_context(), fn, args, kwargs))
                return fut
        fut.set_exception(self._aborted)
        return fut

    def _work(self):
        while (item := self._queue.get()) is not None:
            fut, ctx, fn, args, kwargs = item
            with self._cond:
                if self._aborted is not None:
                    continue
                self._running += 1
            try:
                result, error = ctx.run(fn, *args, **kwargs), None
            except BaseException as e:  # noqa: BLE001 - handed to the scheduler's loop
                result, error = None, e
            with self._cond:
                self._running -= 1
                self._pending.discard(fut)
                self._cond.notify_all()
            with contextlib.suppress(InvalidStateError):  # failed by abort() meanwhile
                if error is None:
                    fut.set_result(result)
                else:
                    fut.set_exception(error)

    def abort(self, exc):
        """Fail every outstanding future with ``exc``; start no further task."""
        with self._cond:
            if self._aborted is None:
                self._aborted = exc
            pending, self._pending = list(self._pending), set()
        for fut in pending:
            with contextlib.suppress(InvalidStateError):
                fut.set_exception(exc)

    def wait_idle(self, timeout):
        """Return once no task runs, or after ``timeout`` seconds."""
        with self._cond:
            self._cond.wait_for(lambda: self._running == 0, timeout)

    def shutdown(self, wait=True, *, cancel_futures=False):
        for _ in self._threads:
            self._queue.put(None)
        if wait:
            for t in self._threads:
                t.join()
