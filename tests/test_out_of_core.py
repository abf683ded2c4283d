"""Bounded per-task memory and out-of-core fits for every estimator (issue item 15).

The unit tests measure, with ``tracemalloc`` (NumPy reports its allocations
to it), the peak memory a chunk task allocates beyond its input; the
distributed tests fit on data larger than the workers' total memory.
"""

import tracemalloc

import dask
import dask.array as da
import numpy as np
import pytest

from dqkm.kernels.embedding import draw_dense_embedding, draw_sparse_embedding, embed_chunk
from dqkm.kernels.lloyd import assign_labels
from dqkm.kernels.lloyd_sparse import label_moments
from dqkm.parallel.embedding import embed_assign, original_space_moments


def _peak_bytes(fn):
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return out, peak


@pytest.mark.parametrize("kind", ["sparse", "dense"])
def test_se_passes_hold_one_tile_not_copies_of_the_chunk(kind):
    """The moments and label passes of SparseEmbeddedKMeans allocate far less than
    their dense chunk (formerly three float64 copies of it: 6x a float32 chunk)."""
    rng = np.random.default_rng(0)
    n, d, k = 300_000, 32, 5
    X = rng.standard_normal((n, d), dtype=np.float32)
    emb = (draw_sparse_embedding(d, 16, 1) if kind == "sparse"
           else draw_dense_embedding(d, 16, 1, dtype=np.float32))
    centers = embed_chunk(X[:k], emb).astype(np.float32)
    Xd = da.from_array(X, chunks=(n, d))  # one chunk: the task sees all of X
    with dask.config.set(scheduler="synchronous"):
        # a few rows first: the first call in a process loads (or compiles) the kernels
        small = da.from_array(X[:1000], chunks=(1000, d))
        original_space_moments(small, emb, centers)
        embed_assign(small, emb, centers).compute()
        (counts, means, m2), peak = _peak_bytes(lambda: original_space_moments(Xd, emb, centers))
        labels, peak_labels = _peak_bytes(lambda: embed_assign(Xd, emb, centers).compute())
    # what a single untiled pass gives
    ref_labels = assign_labels(embed_chunk(X, emb), centers)[0]
    np.testing.assert_array_equal(labels, ref_labels)
    rc, rm, rm2 = label_moments(X, ref_labels, k)
    np.testing.assert_array_equal(counts, rc)
    np.testing.assert_allclose(means, rm, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(m2, rm2, rtol=1e-9)
    # the labels (n int32) and a few tiles; never a copy of the chunk (X.nbytes = 38 MB)
    assert peak < 0.6 * X.nbytes, f"moments pass peak {peak / 2**20:.1f} MiB"
    assert peak_labels < 0.6 * X.nbytes, f"labels pass peak {peak_labels / 2**20:.1f} MiB"


# ----------------------------------------------------------------------------- KMultipleMeans
def _kmm_data(n, d, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    return (rng.standard_normal((n, d)) + 6.0 * (y[:, None] == np.arange(d) % 3)).astype(
        np.float32)


def _kmm(**kw):
    import dqkm

    return dqkm.KMultipleMeans(3, n_prototypes=30, random_state=0, persist=False, **kw)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_kmm_pass_holds_one_tile_not_copies_of_the_chunk():
    """A KMultipleMeans chunk task allocates its kept rows of S and one tile, not
    float64 copies of its chunk (formerly about 8x a float32 chunk). A fit on a few
    rows first: the first fit in a process also loads (or compiles) numba's kernels,
    whose Python objects tracemalloc counts, 2.2x the chunk here, more when compiling."""
    X = _kmm_data(40_000, 256)
    Xd = da.from_array(X, chunks=X.shape)  # one chunk
    with dask.config.set(scheduler="synchronous"):
        _kmm(max_iter=1, max_inner_iter=1).fit(da.from_array(X[:2000], chunks=(2000, 256)))
        km, peak = _peak_bytes(lambda: _kmm(max_iter=1, max_inner_iter=1).fit(Xd))
    assert km.n_iter_ == 1
    assert peak < 3 * X.nbytes, f"peak {peak / 2**20:.0f} MiB for a {X.nbytes / 2**20:.0f} MiB chunk"


def test_kmm_tiles_give_the_result_of_whole_chunks(monkeypatch):
    import dqkm.kernels.tiles as tiles

    X = _kmm_data(3000, 8, seed=1)
    whole = _kmm(max_iter=5).fit(X)
    monkeypatch.setattr(tiles, "TILE_BYTES", 40_000)  # tiles of a few dozen rows
    tiled = _kmm(max_iter=5).fit(X)
    np.testing.assert_array_equal(tiled.labels_, whole.labels_)
    np.testing.assert_allclose(tiled.prototypes_, whole.prototypes_, rtol=1e-5, atol=1e-5)
    assert tiled.n_iter_ == whole.n_iter_


def test_kmm_refuses_a_pass_whose_task_cannot_fit_a_worker():
    """Before any pass over X: the memory a task needs and what to change, not a
    KilledWorker (or a cluster left with no workers)."""
    from distributed import Client, LocalCluster

    from dqkm import datasets
    from dqkm.exceptions import DataError

    X, _ = datasets.make_blobs(600_000, 32, 3, chunks=600_000, random_state=0)
    cfg = {"distributed.worker.memory.pause": False, "distributed.worker.memory.spill": False,
           "distributed.worker.memory.target": False,
           "distributed.worker.memory.terminate": False}
    with dask.config.set(cfg), LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                            memory_limit="200MB", dashboard_address=None) as lc, \
            Client(lc):
        with pytest.raises(DataError, match=r"(?s)KMultipleMeans pass: one task needs about "
                           r"\d+ MiB .*rows of S kept.*can give a task 95 MiB.*rechunk it to "
                           r"fewer rows") as info:
            _kmm(max_iter=1).fit(X)
        assert isinstance(info.value, MemoryError)
        # a smaller chunk fits
        km = _kmm(max_iter=1, max_inner_iter=1).fit(X[:60_000].rechunk(20_000))
        assert km.labels_.shape == (60_000,)


# ----------------------------------------------------------------------------- make_blobs
def _blobs_untiled(i, sizes, centers, std, entropy, dtype):
    """The chunk as one float64 expression (the generator's definition)."""
    rng = np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=(i,)))
    labels = rng.integers(0, centers.shape[0], size=sizes[i])
    noise = rng.standard_normal((sizes[i], centers.shape[1]), dtype=np.float64)
    return (centers[labels] + noise * std[labels, None]).astype(dtype)


def test_make_blobs_generates_a_chunk_in_bounded_memory():
    """A generated chunk allocates little beyond itself (formerly three float64 copies)."""
    from dqkm import datasets

    n, d = 400_000, 32
    X, _, centers = datasets.make_blobs(n, d, 5, chunks=n, random_state=3, return_centers=True)
    with dask.config.set(scheduler="synchronous"):
        (task,) = X.to_delayed().ravel()  # the chunk itself, no concatenation
        block, peak = _peak_bytes(task.compute)
    assert peak < 1.5 * block.nbytes, f"peak {peak / 2**20:.0f} MiB for {block.nbytes / 2**20:.0f}"
    np.testing.assert_array_equal(
        block, _blobs_untiled(0, (n,), centers, np.ones(5), 3, np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_make_blobs_chunks_do_not_depend_on_the_tile_size(monkeypatch, dtype):
    import dqkm.kernels.tiles as tiles
    from dqkm import datasets

    sizes = (700, 700, 300)
    std = np.array([0.5, 1.0, 2.0])
    X, y, centers = datasets.make_blobs(1700, 4, 3, cluster_std=std, chunks=sizes,
                                        random_state=7, dtype=dtype, return_centers=True)
    monkeypatch.setattr(tiles, "TILE_BYTES", 1000)  # a few rows per tile
    got = X.compute(scheduler="synchronous")
    want = np.concatenate([_blobs_untiled(i, sizes, centers, std, 7, dtype) for i in range(3)])
    np.testing.assert_array_equal(got, want)


def test_kmm_refuses_rows_of_s_larger_than_the_workers_memory():
    """KMultipleMeans keeps its rows of S in the workers' memory between passes:
    a fit whose rows cannot fit is refused before its first pass, not left to
    restart workers."""
    from distributed import Client, LocalCluster

    from dqkm import datasets
    from dqkm.exceptions import DataError

    X, _ = datasets.make_blobs(1_000_000, 4, 3, chunks=20_000, random_state=0)
    cfg = {"distributed.worker.memory.pause": False, "distributed.worker.memory.spill": False,
           "distributed.worker.memory.target": False,
           "distributed.worker.memory.terminate": False}
    with dask.config.set(cfg), LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                            memory_limit="400MB", dashboard_address=None) as lc, \
            Client(lc):
        with pytest.raises(DataError, match=r"KMultipleMeans keeps about \d+ MiB in the workers' "
                           r"memory between passes, more than 95 MiB .*bytes per sample.*"
                           r"n_neighbors"):
            _kmm(max_iter=1).fit(X)


@pytest.mark.parametrize("sparse", [False, True])
def test_sample_rows_reads_each_touched_chunk_inside_its_own_task(sparse, monkeypatch):
    """The rows KMeans samples for its init come from one task per chunk holding some of
    them, each reading its chunk itself (a pass of map_blocks_reduce), and only the
    chunks that hold sampled rows are read: dask's X[idx] read chunks as tasks of their
    own that a worker read ahead of their use (three 64 MiB chunks held at once)."""
    import scipy.sparse as sp

    from dqkm.parallel import sampling

    X = np.arange(1000 * 3, dtype=np.float32).reshape(1000, 3)
    Xd = da.from_array(X, chunks=100)
    if sparse:
        Xd = Xd.map_blocks(sp.csr_matrix, meta=sp.csr_matrix((0, 3), dtype=np.float32))
    seen = []
    real = sampling.map_blocks_reduce

    def spy(sub, *a, **k):
        seen.append(sub.numblocks[0])
        return real(sub, *a, **k)

    monkeypatch.setattr(sampling, "map_blocks_reduce", spy)
    idx = np.sort(np.random.default_rng(3).choice(1000, size=4, replace=False))
    rows = sampling.sample_rows(Xd, 4, np.random.default_rng(3), dense=False)
    got = rows.toarray() if sp.issparse(rows) else rows
    np.testing.assert_array_equal(got, X[idx])
    assert seen == [len(np.unique(idx // 100))]
    w = da.from_array(np.arange(1000, dtype=np.float64), chunks=100)
    rows, weights = sampling.sample_rows(Xd, 4, np.random.default_rng(3), sample_weight=w)
    np.testing.assert_array_equal(rows, X[idx])
    np.testing.assert_array_equal(weights, idx.astype(np.float64))


def test_kmm_refuses_before_the_seeding_reads_x(monkeypatch):
    """With n_prototypes given, a KMultipleMeans whose pass cannot fit is refused before
    its seeding samples rows of X (those passes ran first, and at 3x the workers' memory
    one restarted a worker before the refusal)."""
    import dqkm.cluster.kmm as ckmm
    from dqkm.parallel import memory
    from dqkm.parallel.memory import MemoryBudgetError

    Xd = da.from_array(_kmm_data(4000, 16), chunks=1000)
    sampled = []
    real = ckmm.sample_rows
    monkeypatch.setattr(ckmm, "sample_rows", lambda *a, **k: sampled.append(1) or real(*a, **k))
    monkeypatch.setattr(memory, "task_budget", lambda fresh=False: 1000 * 16 * 4)  # a chunk
    with pytest.raises(MemoryBudgetError, match=r"KMultipleMeans pass: one task needs about "):
        _kmm(max_iter=1).fit(Xd)
    assert sampled == []
