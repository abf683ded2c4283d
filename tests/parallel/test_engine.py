import time

import dask
import dask.array as da
import numpy as np
import pytest
from dask.core import get_dependencies

import dqkm
from dqkm.parallel.engine import (PerBlock, array_from_blocks, array_from_tasks, broadcast,
                                  compute, map_blocks_reduce, map_blocks_with_state, map_rows,
                                  map_tasks, sum_partials, tree_reduce)


def _chunk(block, c):
    return (block.sum(axis=0) * c, block.shape[0])


def _graph_shape(d):
    dsk = dict(d.__dask_graph__())
    deps = {k: get_dependencies(dsk, k) for k in dsk}
    depth = {}

    def walk(k):
        if k not in depth:
            depth[k] = 1 + max((walk(j) for j in deps[k]), default=0)
        return depth[k]

    return max(len(v) for v in deps.values()), walk(d.key), dsk, deps


@pytest.mark.parametrize("n_blocks,split_every", [(64, 4), (64, 8), (10, 3), (1, 4)])
def test_reduction_is_a_tree(n_blocks, split_every):
    X = da.ones((n_blocks * 5, 3), chunks=(5, 3))
    c = broadcast(np.float64(2.0))
    d = map_blocks_reduce(X, _chunk, sum_partials, args=(c,), split_every=split_every)
    max_deps, depth, dsk, deps = _graph_shape(d)
    # every combine task has at most split_every inputs (chunk tasks: block + state)
    assert max_deps <= max(split_every, 2)
    # depth: block creation, chunk, then ceil(log_s(n)) combine levels
    levels = int(np.ceil(np.log(n_blocks) / np.log(split_every) - 1e-12)) if n_blocks > 1 else 0
    assert depth == 2 + levels
    # the state is one key that all chunk tasks depend on (broadcast once)
    users = [k for k, v in deps.items() if c.key in v]
    assert len(users) == n_blocks
    (total, count), = dask.compute(d)
    np.testing.assert_allclose(total, [2.0 * n_blocks * 5] * 3)
    assert count == n_blocks * 5


def test_rejects_feature_chunks_and_bad_split_every():
    X = da.ones((10, 4), chunks=(5, 2))
    with pytest.raises(ValueError, match=r"rechunk\(\{1: -1\}\)"):
        map_blocks_reduce(X, _chunk, sum_partials, args=(1.0,))
    with pytest.raises(ValueError, match="split_every must be an int >= 2"):
        map_blocks_reduce(da.ones((10, 4), chunks=(5, 4)), _chunk, sum_partials, args=(1.0,),
                          split_every=1)


def test_same_result_on_local_cluster(dist_client):
    X = da.from_array(np.arange(60.0).reshape(20, 3), chunks=(3, 3))
    d = map_blocks_reduce(X, _chunk, sum_partials, args=(broadcast(1.0),), split_every=2)
    (total, count), = compute(d)
    np.testing.assert_allclose(total, np.arange(60.0).reshape(20, 3).sum(0))
    assert count == 20


def test_blocks_run_with_one_blas_thread_and_the_limit_is_restored():
    from threadpoolctl import threadpool_info

    from dqkm.parallel import engine

    def blas_threads():
        return {i["filepath"]: i["num_threads"] for i in threadpool_info()
                if i["user_api"] == "blas"}

    before = blas_threads()
    assert before
    X = da.ones((40, 3), chunks=(10, 3))

    def chunk(block):
        return [max(blas_threads().values())]

    parts = engine.map_blocks_reduce(X, chunk, lambda ps: sum(ps, []), split_every=2)
    (seen,) = engine.compute(parts)
    assert seen == [1, 1, 1, 1]
    assert blas_threads() == before
    # the controller is cached, and rebuilt after new imports (a BLAS may come with them)
    engine.one_blas_thread()
    cached = engine._CONTROLLER["controller"]
    engine.one_blas_thread()
    assert engine._CONTROLLER["controller"] is cached
    import sys
    import types
    sys.modules["_dqkm_test_new_module"] = types.ModuleType("_dqkm_test_new_module")
    try:
        engine.one_blas_thread()
        assert engine._CONTROLLER["controller"] is not cached
    finally:
        del sys.modules["_dqkm_test_new_module"]


def test_in_memory_input_is_viewed_not_copied():
    """Validated in-memory X becomes a Dask array of row views (da.from_array would copy
    and hash the whole array on every predict); the public conversion still copies."""
    from dqkm.cluster._base import validate_input
    from dqkm.parallel.data import to_dask

    X = np.random.default_rng(0).standard_normal((1000, 7)).astype(np.float32)
    Xv = to_dask(X, chunks=(300, 300, 400), copy=False)
    assert Xv.chunks == ((300, 300, 400), (7,))

    def shares(A):  # does every task see X's own memory? (map_rows passes blocks as stored)
        return map_rows(A, lambda b: np.full(len(b), np.shares_memory(b, X)),
                        dtype=bool).compute(scheduler="sync")

    assert shares(Xv).tolist() == [True] * 1000
    np.testing.assert_array_equal(Xv.compute(), X)
    assert Xv.name != to_dask(X, chunks=300, copy=False).name  # never a shared cached key
    assert not shares(to_dask(X, chunks=300)).any()

    est = dqkm.KMeans(2).fit(X)
    Xd, lazy = validate_input(est, X, reset=False)
    assert not lazy and shares(Xd).all()
    np.testing.assert_array_equal(est.predict(X), est.predict(X.copy()))


def test_map_rows_aligns_with_row_chunks_and_takes_broadcast_state():
    X = da.from_array(np.arange(60, dtype=np.float64).reshape(20, 3), chunks=((7, 0, 13), 3))
    st = broadcast(np.array([1.0, 10.0, 100.0]), "weights")
    out = map_rows(X, lambda b, w: b @ w, st, dtype=np.float64)
    assert out.chunks == ((7, 0, 13),) and out.dtype == np.float64
    np.testing.assert_array_equal(out.compute(), X.compute() @ [1.0, 10.0, 100.0])
    # a large array argument is one key of the graph, not a copy in every task
    W = np.ones((3, 100_000))
    big = map_rows(X, lambda b, w: b @ w[:, 0], W, dtype=np.float64)
    dsk = dict(big.__dask_graph__())
    arg_keys = [k for k in dsk if isinstance(k, str) and k.startswith("dqkm-rows-arg")]
    assert len(arg_keys) == 1 and len(dsk) == 3 + 3 + 1  # X's blocks, the tasks, W once
    assert all(arg_keys[0] in dsk[(big.name, i)].dependencies for i in range(3))
    np.testing.assert_array_equal(big.compute(), X.compute().sum(axis=1))
    with pytest.raises(ValueError, match=r"chunked along rows only.*rechunk\(\{1: -1\}\)"):
        map_rows(X.rechunk((20, 2)), lambda b: b[:, 0], dtype=np.float64)


def test_map_blocks_reduce_rejects_lazy_array_args():
    X = da.ones((10, 2), chunks=(5, 2))
    with pytest.raises(TypeError, match="broadcast \\(Delayed\\) state or plain constants"):
        map_blocks_reduce(X, _chunk, sum_partials, args=(da.ones(3),))
    with pytest.raises(ValueError, match="split_every must be an int >= 2"):
        tree_reduce([broadcast(1.0)], sum_partials, split_every=1)


# ------------------------------------------------------------------ keys and lost schedulers
def test_keys_come_from_the_inputs():
    """Graphs built twice from the same inputs have the same keys (dask.base.tokenize),
    and other inputs give other keys."""
    X = da.from_array(np.arange(40.0).reshape(20, 2), chunks=5)
    c = broadcast(np.array([1.0, 2.0]), "c")
    assert broadcast(np.array([1.0, 2.0]), "c").key == c.key
    assert broadcast(np.array([1.0, 3.0]), "c").key != c.key
    first = map_blocks_reduce(X, _chunk, sum_partials, args=(c,))
    again = map_blocks_reduce(X, _chunk, sum_partials, args=(c,))
    other = map_blocks_reduce(X, _chunk, sum_partials, args=(broadcast(np.ones(2), "c"),))
    assert first.key == again.key != other.key
    assert map_rows(X, np.sum, 1, dtype=float).name == map_rows(X, np.sum, 1, dtype=float).name
    np.testing.assert_allclose(compute(first)[0][0], X.sum(axis=0).compute() * [1.0, 2.0])


def _raises_in_task(block):
    raise FileNotFoundError("no connection to the data share")


def test_a_task_error_mentioning_a_connection_is_raised_as_it_is(dist_client):
    """A fault raised inside a task, whose message happens to mention a connection,
    reaches the caller as itself: a lost scheduler is told by type and client status,
    not by the words of a message."""
    X = da.from_array(np.ones((8, 2)), chunks=4)
    with pytest.raises(FileNotFoundError, match="no connection to the data share"):
        compute(map_blocks_reduce(X, _raises_in_task, sum_partials))


def test_a_closed_comm_or_failed_connect_is_a_lost_scheduler(dist_client):
    from distributed.comm import CommClosedError

    from dqkm.parallel.engine import scheduler_lost

    failed_connect = OSError("Timed out trying to connect to tcp://127.0.0.1:1 after 1 s")
    failed_connect.__cause__ = ConnectionRefusedError("refused")
    assert scheduler_lost(dist_client, failed_connect)
    timed_out = OSError("Timed out trying to connect to tcp://127.0.0.1:1 after 1 s")
    timed_out.__cause__ = TimeoutError()
    assert scheduler_lost(dist_client, timed_out)
    assert scheduler_lost(dist_client, CommClosedError("in <TCP (closed)>"))
    assert not scheduler_lost(dist_client, FileNotFoundError("connection refused"))
    assert not scheduler_lost(dist_client, OSError("connection reset by a task"))


@pytest.mark.distributed
def test_paused_workers_end_a_fit_with_a_clear_error_instead_of_a_hang(tmp_path):
    """A worker whose process alone is above distributed's pause threshold never runs a
    task: the fit, a persist and an atomic write raise WorkersPausedError (and cancel
    their tasks) after ``dqkm.paused-timeout`` instead of waiting forever."""
    import logging

    from distributed import Client, LocalCluster

    from dqkm.exceptions import DqkmError, WorkersPausedError

    X = da.from_array(np.random.default_rng(0).random((2000, 4)), chunks=500)
    # an in-process worker measures this test process (hundreds of MiB) against 64 MiB
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      memory_limit="64MiB", dashboard_address=None,
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        deadline = time.monotonic() + 30
        while not all(w["status"] == "paused"
                      for w in client.scheduler_info(n_workers=-1)["workers"].values()):
            assert time.monotonic() < deadline, "the worker did not pause"
            time.sleep(0.1)
        with dask.config.set({"dqkm.paused-timeout": 1}):
            with pytest.raises(WorkersPausedError, match=r"(?s)every worker .* paused for "
                               r"\d+ s.*memory_limit 64 MiB.*dqkm\.paused-timeout"):
                dqkm.KMeans(3, max_iter=2, random_state=0, persist=False).fit(X)
            with pytest.raises(WorkersPausedError):
                dqkm.KMeans(3, max_iter=2, random_state=0, persist=True).fit(X)
            with pytest.raises(WorkersPausedError):
                dqkm.io.save_array(X, tmp_path / "x.zarr")
        assert isinstance(WorkersPausedError("x"), (DqkmError, MemoryError))
        assert not client.processing() or not any(client.processing().values())
    assert not (tmp_path / "x.zarr").exists()


def test_a_pass_reads_each_large_block_inside_the_task_that_uses_it(tmp_path):
    """A block of at least INLINE_BYTES read from Zarr (also sliced or cast on the way)
    is produced inside the pass task that uses it: no read is a task of its own whose
    chunk a worker would hold while waiting for its consumer (a worker is handed more
    root tasks than it has threads: one more chunk held per read done ahead).
    Persisted blocks, already in memory, and small blocks keep their own keys."""
    from dqkm import datasets
    from dqkm.parallel.engine import INLINE_BYTES

    rows = INLINE_BYTES // (4 * 4)
    X, _ = datasets.make_blobs(4 * rows, 4, 3, chunks=rows, random_state=0,
                               path=tmp_path / "X.zarr")
    expected = X.sum(axis=0).compute()
    for Y in (X, X[:, :].astype(np.float64)):
        d = map_blocks_reduce(Y, lambda b: b.sum(axis=0), sum_partials, name="inline")
        (opt,) = dask.optimize(d)
        keys = {str(k) for k in dict(opt.__dask_graph__())}
        assert all(k.startswith("dqkm-inline-") for k in keys), sorted(keys)[:3]
        assert len(keys) == 4 + 1  # one task per block, one combine
        np.testing.assert_allclose(compute(d)[0], expected, rtol=1e-5)
    for Y in (X.persist(), X[:64].rechunk(16)):  # in memory; small blocks
        d = map_blocks_reduce(Y, lambda b: b.sum(axis=0), sum_partials, name="inline")
        (opt,) = dask.optimize(d)
        assert any(not str(k).startswith("dqkm-inline-") for k in dict(opt.__dask_graph__()))
        np.testing.assert_allclose(compute(d)[0], Y.sum(axis=0).compute(), rtol=1e-5)


def _where(block, c):
    from distributed import get_worker

    return {get_worker().address: 1}


def _count_workers(parts):
    out = {}
    for p in parts:
        for k, v in p.items():
            out[k] = out.get(k, 0) + v
    return out


def test_a_pass_over_reread_blocks_runs_on_every_worker(tmp_path, dist_client):
    """Blocks read inside their pass tasks depend on nothing but the broadcast state: that
    state is sent to every worker first, so the tasks spread over the workers. (As one
    key computed on one worker, it drew nearly every task there: 12 of a 2-pass fit's 14
    ran on one of 2 workers, each pass ~35 % slower than with the reads as tasks.)
    Persisted blocks keep their own placement: nothing is sent ahead for them."""
    from dqkm import datasets
    from dqkm.parallel import engine
    from dqkm.parallel.engine import INLINE_BYTES

    rows = INLINE_BYTES // (4 * 4)
    X, _ = datasets.make_blobs(8 * rows, 4, 3, chunks=rows, random_state=0,
                               path=tmp_path / "X.zarr")
    c = broadcast(np.ones(4, dtype=np.float32), "c")
    workers = set(dist_client.scheduler_info()["workers"])
    scattered = []
    real = engine._everywhere
    engine_patch = pytest.MonkeyPatch()
    engine_patch.setattr(engine, "_everywhere",
                         lambda client, b: scattered.append(real(client, b)) or scattered[-1])
    try:
        for _ in range(3):
            (counts,) = compute(map_blocks_reduce(X, _where, _count_workers, args=(c,),
                                                  name="where"))
            assert set(counts) == workers and sum(counts.values()) == 8
            assert min(counts.values()) >= 2, counts
        assert len(scattered) == 3
        assert set(dist_client.who_has(scattered[-1])[scattered[-1].key]) == workers
        Xp = dist_client.persist(X)
        compute(map_blocks_reduce(Xp, _where, _count_workers, args=(c,), name="where"))
        assert len(scattered) == 3
    finally:
        engine_patch.undo()


# ------------------------------------------------------------------ per-block state and tasks
def _count_chunk(block, prev, w, c, index, offset):
    """New state: the passes seen by this block and its first row id; partial: Σ w·x·c."""
    seen = 0 if prev is None else prev[0]
    assert prev is None or prev[1] == offset  # each block got its own state back
    return (seen + 1, offset), (w @ block) * c


def _state_pass(X, states, w, c, **kw):
    return map_blocks_with_state(X, _count_chunk, sum_partials, with_offsets=True,
                                 args=(PerBlock(states), PerBlock(w), broadcast(c, "c")), **kw)


def test_map_blocks_with_state_gives_each_block_its_state_back():
    """Each block's task gets its own previous state (a persisted result or a value)
    and per-block argument; the partials are tree-reduced; one layer of task_spec
    tasks, keys tokenized from the inputs (fresh per call with pure=False)."""
    rng = np.random.default_rng(0)
    x = rng.random((50, 3))
    X = da.from_array(x, chunks=(10, 3))
    w = list(X[:, 0].to_delayed())  # a Dask array's blocks, referred to by key
    c = np.array([1.0, 2.0, 3.0])
    bp = _state_pass(X, [None] * 5, w, c, split_every=2)
    _, _, dsk, deps = _graph_shape(bp.result)
    assert max(len(deps[k]) for k in dsk if "-combine-" in str(k)) == 2  # a tree, fan-in 2
    assert _state_pass(X, [None] * 5, w, c, split_every=2).result.key == bp.result.key
    assert _state_pass(X, [None] * 5, w, c, pure=False).result.key != bp.result.key
    states = list(dask.persist(*bp.states))
    ((res, plain),) = compute(_state_pass(X, states, w, c).together)
    assert plain == [(2, o) for o in range(0, 50, 10)]
    np.testing.assert_allclose(res, (x[:, 0] @ x) * c)
    ((_, again),) = compute(_state_pass(X, plain, w, c).together)  # states as plain values
    assert again == [(3, o) for o in range(0, 50, 10)]


def test_per_block_arguments_must_match_the_blocks_and_not_be_lazy_arrays():
    X = da.ones((20, 2), chunks=(5, 2))
    with pytest.raises(ValueError, match=r"PerBlock argument has 3 elements for 4 row blocks"):
        map_blocks_reduce(X, _chunk, sum_partials, args=(PerBlock([1, 2, 3]),))
    with pytest.raises(TypeError, match=r"broadcast \(Delayed\) state or plain constants"):
        map_blocks_reduce(X, _chunk, sum_partials, args=(PerBlock([da.ones(2)] * 4),))


def _scaled(block, s):
    return block * s


def test_map_tasks_and_arrays_from_tasks_and_blocks():
    """map_tasks runs one task per argument tuple (pure: tokenized keys; pure=False:
    fresh ones); array_from_tasks / array_from_blocks are row-chunked arrays of them."""
    x = np.arange(12.0).reshape(6, 2)
    blocks = [x[:4], x[4:]]
    arr = array_from_blocks(blocks, ((4, 2), (2,)), x.dtype, name="dqkm-test-blocks")
    np.testing.assert_array_equal(arr.compute(), x)
    parts = list(arr.to_delayed().ravel())
    tasks = map_tasks(_scaled, [(p, 2.0) for p in parts], name="scaled")
    assert [t.key for t in map_tasks(_scaled, [(p, 2.0) for p in parts], name="scaled")] == \
        [t.key for t in tasks]
    assert map_tasks(_scaled, [(p, 2.0) for p in parts], name="s", pure=False)[0].key != \
        map_tasks(_scaled, [(p, 2.0) for p in parts], name="s", pure=False)[0].key
    np.testing.assert_array_equal(np.concatenate(compute(*tasks)), 2 * x)
    out = array_from_tasks(_scaled, [(p, 3.0) for p in parts], ((4, 2), (2,)), x.dtype,
                           name="scaled")
    assert out.chunks == ((4, 2), (2,))
    np.testing.assert_array_equal(out.compute(), 3 * x)
    col = array_from_tasks(np.sum, [(p,) for p in parts], ((1, 1),), x.dtype, name="sums")
    np.testing.assert_array_equal(col.compute(), [x[:4].sum(), x[4:].sum()])


def test_broadcast_args_of_separate_graphs_all_reach_the_pass():
    """Several broadcast objects (each its own small graph) and a PerBlock list of a
    Dask array's blocks: every key they bring is in the pass's graph."""
    x = np.arange(30.0).reshape(10, 3)
    X = da.from_array(x, chunks=(2, 3))
    cs = [broadcast(np.full(3, float(i)), "c") for i in range(6)]

    def chunk(block, w, *c):
        return (w @ block) * sum(c)

    d = map_blocks_reduce(X, chunk, sum_partials,
                          args=(PerBlock(X[:, 1].to_delayed()), *cs))
    np.testing.assert_allclose(compute(d)[0], (x[:, 1] @ x) * 15.0)


@pytest.mark.parametrize("scheduler", ["threads", "sync"])
def test_local_compute_of_passes_goes_to_the_configured_scheduler(scheduler, monkeypatch):
    # a pass's Delayed whose blocks are computed by tasks of their own (here X + 0:
    # not values in memory, which dqkm.parallel.local_run runs) goes straight to the
    # configured local scheduler, each block's task once; other collections (here an
    # array) go through dask.compute
    import dqkm.parallel.engine as eng

    calls = []

    def counted(block, c):
        calls.append(block.shape[0])
        return _chunk(block, c)

    X = da.from_array(np.arange(40.0).reshape(20, 2), chunks=(5, 2)) + 0.0
    d = map_blocks_reduce(X, counted, sum_partials, args=(2.0,))
    used = []
    real = eng._LOCAL_GETS[scheduler]
    monkeypatch.setitem(eng._LOCAL_GETS, scheduler,
                        lambda dsk, keys: used.append(keys) or real(dsk, keys))
    with dask.config.set(scheduler=scheduler):
        ((sums, n),) = compute(d)
        (Xc,) = compute(X)
    assert used == [[d.key]]
    np.testing.assert_array_equal(sums, X.compute().sum(axis=0) * 2.0)
    assert n == 20 and sorted(calls) == [5, 5, 5, 5]
    np.testing.assert_array_equal(Xc, np.arange(40.0).reshape(20, 2))


def test_the_row_blocks_of_an_array_are_kept_only_while_it_lives():
    import gc

    import dqkm.parallel.engine as eng

    X = da.from_array(np.ones((30, 2)), chunks=(10, 2)).persist()
    first = eng._row_blocks(X)
    assert eng._row_blocks(X) is not None and eng._row_blocks(X)[0] is first[0]
    key = id(X)
    assert key in eng._BLOCKS
    del X, first
    gc.collect()
    assert key not in eng._BLOCKS  # nothing of X is held once the array is gone
