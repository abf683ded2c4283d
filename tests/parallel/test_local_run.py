"""dqkm.parallel.local_run: passes over blocks in memory run without dask's local scheduler,
with the results, errors and fallbacks of dask's own run."""

import threading

import dask
import dask.array as da
import numpy as np
import pytest
from dask.callbacks import Callback

import dqkm
import dqkm.parallel.engine as eng
from dqkm.parallel.engine import (PerBlock, broadcast, compute, compute_with_states,
                                  map_blocks_reduce, map_blocks_with_state, sum_partials)


def _sums(block, c):
    return block.sum(axis=0) * c, block.shape[0]


def _counting_gets(monkeypatch):
    used = []
    for name, real in list(eng._LOCAL_GETS.items()):
        monkeypatch.setitem(eng._LOCAL_GETS, name,
                            lambda dsk, keys, real=real: used.append(keys) or real(dsk, keys))
    return used


@pytest.mark.parametrize("scheduler", ["threads", "sync"])
def test_a_pass_over_blocks_in_memory_runs_its_tasks_in_this_process_without_dask(
        scheduler, monkeypatch):
    used = _counting_gets(monkeypatch)
    threads = []

    def chunk(block, c):
        threads.append(threading.current_thread().name)
        return _sums(block, c)

    x = np.arange(80.0).reshape(40, 2)
    X = da.from_array(x, chunks=(5, 2)).persist()
    d = map_blocks_reduce(X, chunk, sum_partials, args=(broadcast(2.0),), split_every=3)
    with dask.config.set(scheduler=scheduler):
        ((sums, n),) = compute(d)
    assert used == []  # dask's scheduler was not asked
    np.testing.assert_array_equal(sums, x.sum(axis=0) * 2.0)
    assert n == 40 and len(threads) == 8
    if scheduler == "threads":  # the 8 block tasks ran on the pass pool
        assert all(t.startswith("dqkm-pass") for t in threads)
    else:
        assert set(threads) == {threading.current_thread().name}


def test_a_pass_with_a_task_of_another_library_goes_to_dask(monkeypatch):
    used = _counting_gets(monkeypatch)
    X = da.from_array(np.ones((40, 2)), chunks=(5, 2)) * 3.0  # blocks computed by 'mul' tasks
    d = map_blocks_reduce(X, _sums, sum_partials, args=(1.0,))
    with dask.config.set(scheduler="threads"):
        ((sums, n),) = compute(d)
    assert used == [[d.key]]
    np.testing.assert_array_equal(sums, [120.0, 120.0])


def test_dask_callbacks_and_a_custom_pool_see_every_task(monkeypatch):
    # a callback (a progress bar, a profiler) is run by dask's scheduler: it sees the tasks
    X = da.from_array(np.ones((40, 2)), chunks=(5, 2)).persist()
    d = map_blocks_reduce(X, _sums, sum_partials, args=(1.0,))
    seen = []
    with Callback(posttask=lambda key, *a: seen.append(key)), \
            dask.config.set(scheduler="threads"):
        ((sums, _),) = compute(d)
    assert sum(isinstance(k, str) and k.startswith("dqkm-pass") for k in seen) >= 8
    used = _counting_gets(monkeypatch)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool, dask.config.set(scheduler="threads", pool=pool):
        compute(d)
    assert used == [[d.key]]


def test_an_error_in_a_block_task_is_raised_as_it_is():
    class Odd(ValueError):
        pass

    def chunk(block, c):
        if block[0, 0] == 10.0:
            raise Odd("block 1")
        return _sums(block, c)

    X = da.from_array(np.arange(80.0).reshape(40, 2), chunks=(5, 2)).persist()
    d = map_blocks_reduce(X, chunk, sum_partials, args=(1.0,))
    with dask.config.set(scheduler="threads"), pytest.raises(Odd, match="block 1"):
        compute(d)


def test_a_compute_from_inside_a_pass_task_does_not_wait_on_its_own_pool():
    inner = da.from_array(np.ones((40, 2)), chunks=(5, 2)).persist()

    def chunk(block, c):
        ((s, n),) = compute(map_blocks_reduce(inner, _sums, sum_partials, args=(1.0,)))
        return block.sum(axis=0) + s, block.shape[0]

    X = da.from_array(np.zeros((40, 2)), chunks=(5, 2)).persist()
    d = map_blocks_reduce(X, chunk, sum_partials, args=(1.0,))
    out = []
    t = threading.Thread(target=lambda: out.append(compute(d)), daemon=True)
    with dask.config.set(scheduler="threads"):
        t.start()
        t.join(60)
    assert not t.is_alive(), "a nested compute waited on the pool its task occupies"
    ((sums, n),) = out[0]
    np.testing.assert_array_equal(sums, [320.0, 320.0])  # 8 blocks × 40 ones


def test_kept_states_and_fits_are_the_same_as_with_dask_scheduler(monkeypatch):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3000, 3)).astype(np.float32)
    X = da.from_array(x, chunks=(400, 3)).persist()

    def chunk(block, prev, i, off):
        return block[:, 0] * 2 + (0 if prev is None else prev), block.sum()

    bp = map_blocks_with_state(X, chunk, sum, args=(PerBlock([None] * 8),), with_offsets=True)

    def run():
        res, states = compute_with_states(bp)
        fit = dqkm.KMeans(6, random_state=0, algorithm="hamerly").fit(X)
        return res, states, fit

    with dask.config.set(scheduler="threads"):
        res, states, fit = run()
        with Callback():  # forces dask's scheduler for the same computations
            res2, states2, fit2 = run()
    assert res == res2
    for a, b in zip(states, states2):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(fit.cluster_centers_, fit2.cluster_centers_)
    np.testing.assert_array_equal(fit.labels_, fit2.labels_)
    assert fit.inertia_ == fit2.inertia_ and fit.n_iter_ == fit2.n_iter_


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork (POSIX)")
def test_a_forked_child_runs_passes_on_pools_of_its_own():
    import os

    X = da.from_array(np.ones((40, 2)), chunks=(5, 2)).persist()
    d = map_blocks_reduce(X, _sums, sum_partials, args=(1.0,))
    with dask.config.set(scheduler="threads"):
        compute(d)  # the parent's pool exists
        pid = os.fork()
        if pid == 0:  # child: the parent's pool threads do not exist here
            import signal

            signal.signal(signal.SIGALRM, signal.SIG_DFL)  # not pytest-timeout's handler
            signal.alarm(30)  # a child that waits on them is killed (exit code -14)
            try:
                ((sums, n),) = compute(d)
                os._exit(0 if n == 40 and sums.tolist() == [40.0, 40.0] else 3)
            except BaseException:
                os._exit(4)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_task_depths_of_shared_inputs_cycles_and_missing_keys():
    from dqkm.parallel.local_run import _depths

    # a diamond and a task that takes both a node and that node's input
    deps = {"x": (), "a": ("x",), "b": ("x",), "c": ("a", "b"), "d": ("c", "a", "x")}
    assert _depths(deps) == {"x": 0, "a": 1, "b": 1, "c": 2, "d": 3}
    assert _depths({"a": ("b",), "b": ("a",)}) is None  # a cycle: dask reports it
    assert _depths({"a": ("missing",)}) is None


def test_blocks_made_by_tasks_without_inputs_go_to_dask(monkeypatch):
    # a dqkm array whose blocks are generated by tasks of their own (under the 1 MiB
    # inlining line): run level by level they would all be held at once
    from dqkm.parallel.engine import array_from_tasks

    used = _counting_gets(monkeypatch)
    X = array_from_tasks(np.ones, [((5, 2),)] * 8, ((5,) * 8, (2,)), np.float64, name="gen")
    d = map_blocks_reduce(X, _sums, sum_partials, args=(broadcast(1.0),))
    with dask.config.set(scheduler="threads"):
        ((sums, n),) = compute(d)
    assert used == [[d.key]] and n == 40
    np.testing.assert_array_equal(sums, [40.0, 40.0])


def test_a_failed_pass_returns_only_once_its_started_tasks_have_ended():
    # the caller's clean-up after a failed pass (removing the files its tasks write)
    # must not race with a task still writing: every started task has ended, the
    # others never start.  The first task to start fails (whichever block the level
    # hands out first: its order follows the graph's, which may vary between
    # processes), on a pool of two threads whatever the machine's cores.
    import time

    lock = threading.Lock()
    started, ended = [], set()

    def chunk(block, c):
        i = int(block[0, 0]) // 10
        with lock:
            started.append(i)
            first = len(started) == 1
        if first:
            raise ValueError("first task")
        time.sleep(0.3)
        ended.add(i)
        return _sums(block, c)

    X = da.from_array(np.arange(80.0).reshape(40, 2), chunks=(5, 2)).persist()
    d = map_blocks_reduce(X, chunk, sum_partials, args=(broadcast(1.0),))
    with dask.config.set(scheduler="threads", num_workers=2), \
            pytest.raises(ValueError, match="first task"):
        compute(d)
    assert set(started[1:]) == ended and len(started) < 8
