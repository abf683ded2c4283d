"""Run a nogil kernel over parts of its output on several threads (driver-side kernels).

palm4MSA runs on the driver between passes over the data, while the Dask workers
wait; its largest kernels (the chain gradient, the Gram sandwiches, the one-factor
gathers) write independent columns or rows of their output, so they are split into
contiguous ranges, one per thread.  Each output entry is computed by the same loop
in the same order as on one thread: the results are bit-identical whatever the
number of threads.

The number of threads is numba's ``NUMBA_NUM_THREADS`` (the machine's cores unless
set; read from numba's config, which starts no threads), at most ``_MAX_THREADS``, or
what :func:`limit_threads` sets on the calling thread; work below ``_MIN_WORK`` output
entries stays on the calling thread (a hand-off costs tens of microseconds).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import threading

import numba

__all__ = ["split_ranges", "run_split", "n_threads", "limit_threads", "shared_pool"]

_MAX_THREADS = 8
_MIN_WORK = 1 << 19

_POOLS: dict = {}
_LOCK = threading.Lock()
_LOCAL = threading.local()  # .limit: the calling thread's cap (limit_threads)

if hasattr(os, "register_at_fork"):  # a forked child must not reuse the parent's threads
    os.register_at_fork(after_in_child=_POOLS.clear)


def shared_pool(name, n):
    """The process's thread pool ``name`` of ``n`` threads, made on first use (a forked
    child, which has none of its parent's threads, makes its own).  Also the pool of the
    in-process pass runner (:mod:`dqkm.parallel.local_run`)."""
    with _LOCK:
        pool = _POOLS.get((name, n))
        if pool is None:
            pool = _POOLS[(name, n)] = concurrent.futures.ThreadPoolExecutor(
                n, thread_name_prefix=name)
        return pool


def _threads_wanted():
    limit = getattr(_LOCAL, "limit", None)
    return int(numba.config.NUMBA_NUM_THREADS if limit is None else limit)


@contextlib.contextmanager
def limit_threads(n):
    """Within the block, the calling thread's split kernels use at most ``n`` threads
    (1: no split)."""
    before = getattr(_LOCAL, "limit", None)
    _LOCAL.limit = int(n)
    try:
        yield
    finally:
        _LOCAL.limit = before


def n_threads(work):
    """Threads for a kernel writing ``work`` output entries (1 below ``_MIN_WORK``)."""
    if work < _MIN_WORK:
        return 1
    return max(1, min(_MAX_THREADS, _threads_wanted()))


def split_ranges(n, parts, step=1):
    """``[lo, hi)`` ranges covering ``0 … n`` in at most ``parts`` contiguous pieces,
    every boundary but the last a multiple of ``step``.

    >>> split_ranges(10, 3)
    [(0, 4), (4, 8), (8, 10)]
    >>> split_ranges(1000, 2, step=128)
    [(0, 512), (512, 1000)]
    """
    blocks = -(-n // step) if n > 0 else 0
    parts = max(1, min(parts, blocks))
    per = -(-blocks // parts) if blocks else 0
    out = []
    for p in range(parts):
        lo, hi = p * per * step, min(n, (p + 1) * per * step)
        if lo < hi:
            out.append((lo, hi))
    return out or [(0, n)]


def run_split(fn, n, work, step=1):
    """``fn(lo, hi)`` for the ranges of :func:`split_ranges` (``n`` items, multiples of
    ``step``): on the calling thread alone below ``_MIN_WORK`` entries of ``work``,
    else one range per thread, the first on the calling thread.  Returns the results
    in range order; an exception from any range is raised after every range ended."""
    ranges = split_ranges(n, n_threads(work), step)
    if len(ranges) == 1:
        return [fn(*ranges[0])]
    pool = shared_pool("dqkm-kernel", len(ranges) - 1)
    futures = [pool.submit(fn, lo, hi) for lo, hi in ranges[1:]]
    try:
        first = fn(*ranges[0])
    finally:
        concurrent.futures.wait(futures)
    return [first] + [f.result() for f in futures]
