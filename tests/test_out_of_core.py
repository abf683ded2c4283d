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
