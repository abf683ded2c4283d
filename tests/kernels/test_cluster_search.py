"""ClusterIndex's in-cluster search: the numba kernel behind ``search_block`` against
brute force, the NumPy implementation it replaced and NumPy's einsum."""

import dask.array as da
import numpy as np
import pytest

import dqkm.parallel.neighbors as nb
from dqkm.kernels.cluster_search import insert_topk, pruning_gammas, sq_distance, tile_topk
from dqkm.parallel.neighbors import (InvertedIndex, _search_block_numpy, _top_probes_block,
                                     build_index, search_block)


def make_index(X, labels, n_clusters):
    """An in-memory index of ``X`` grouped by ``labels`` (empty clusters allowed)."""
    order = np.argsort(labels, kind="stable")
    Xs = np.ascontiguousarray(X[order])
    offsets = np.concatenate([[0], np.cumsum(np.bincount(labels, minlength=n_clusters))])
    return InvertedIndex(offsets, X=Xs, ids=order.astype(np.int64),
                         sq_norms=np.einsum("ij,ij->i", Xs, Xs, dtype=np.float64))


def brute_force(Q, X, k):
    """Exact k-NN: distances as NumPy's einsum sums them, ties by the lower id."""
    diff = Q.astype(np.float64)[:, None, :] - X[None, :, :]
    d2 = np.einsum("ijk,ijk->ij", diff, diff)
    ids = np.broadcast_to(np.arange(X.shape[0]), d2.shape)
    srt = np.lexsort((ids, d2), axis=1)[:, :k]
    return np.hstack([np.sqrt(np.take_along_axis(d2, srt, axis=1)), srt.astype(np.float64)])


def assert_same(got, ref):
    """Same neighbour ids; distances equal to float64 rounding.  (The kernel sums
    in the order of NumPy's baseline einsum on x86-64, where the bits agree too;
    another NumPy build may sum in another order, so the tests do not ask for
    the bits.)"""
    k = got.shape[1] // 2
    assert np.array_equal(got[:, k:], ref[:, k:])
    np.testing.assert_allclose(got[:, :k], ref[:, :k], rtol=1e-13, atol=0)


def all_probes(m, n_clusters):
    return np.tile(np.arange(n_clusters, dtype=np.int64), (m, 1))


def clustered(rng, n, dim, n_clusters, dtype, integer=False):
    """Rows around random centres, labels, queries of the same law; cluster
    sizes uneven: the last three clusters get 0, 1 and 2 rows."""
    C = rng.standard_normal((n_clusters, dim)) * 4
    labels = rng.integers(0, n_clusters - 3, n)
    labels[:3] = [n_clusters - 2, n_clusters - 1, n_clusters - 1]
    X = C[labels] + rng.standard_normal((n, dim))
    Q = C[rng.integers(0, n_clusters, 40)] + rng.standard_normal((40, dim))
    if integer:  # exact float32 GEMM and many exact distance ties
        X, Q = np.round(X), np.round(Q)
    return X.astype(dtype), labels, Q.astype(dtype), C.astype(dtype)


# --------------------------------------------------------------------------- exact distance
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sq_distance_equals_numpys_einsum(dtype):
    rng = np.random.default_rng(0)
    for dim in list(range(1, 34)) + [100, 2000, 2001, 9001]:
        q = (rng.standard_normal(dim) * 3).astype(dtype)
        X = (rng.standard_normal((3, dim)) + 1).astype(dtype)
        diff = q.astype(np.float64)[None, :] - X
        ref = np.einsum("ij,ij->i", diff, diff)
        ref3 = np.einsum("ijk,ijk->ij", diff[None], diff[None])[0]
        got = np.array([sq_distance(q, x) for x in X])
        np.testing.assert_allclose(got, ref, rtol=1e-14, atol=0, err_msg=str(dim))
        np.testing.assert_allclose(got, ref3, rtol=1e-14, atol=0, err_msg=str(dim))


# --------------------------------------------------------------------------- top-k merge
def test_insert_topk_order_ties_and_repeats():
    best_d = np.full((1, 3), np.inf)
    best_i = np.full((1, 3), -1, dtype=np.int64)
    for d, i in [(2.0, 7), (1.0, 9), (2.0, 3), (1.0, 9), (2.0, 5), (0.5, 11), (2.0, 1)]:
        insert_topk(best_d, best_i, 0, d, i)
    assert best_d.tolist() == [[0.5, 1.0, 2.0]]
    assert best_i.tolist() == [[11, 9, 1]]  # (1.0, 9) once; among the 2.0 ties the lowest id


# --------------------------------------------------------------------------- search_block
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [1, 3, 10])
@pytest.mark.parametrize("integer", [False, True])
def test_all_probes_equal_brute_force(dtype, k, integer):
    rng = np.random.default_rng(k)
    X, labels, Q, C = clustered(rng, 600, 13, 12, dtype, integer=integer)
    X[100:110] = X[50]  # duplicated rows: ties broken by the lower id
    Q[:3] = X[50]
    index = make_index(X, labels, 12)
    got = search_block(Q, all_probes(Q.shape[0], 12), index, k, C)
    assert_same(got, brute_force(Q, X, k))
    assert got[0, k:].tolist()[:min(k, 11)] == sorted([50] + list(range(100, 110)))[:k]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_small_tiles_and_short_clusters_equal_brute_force(dtype, monkeypatch):
    monkeypatch.setattr(nb, "_TILE_ROWS", 7)  # clusters span several tiles
    rng = np.random.default_rng(1)
    X, labels, Q, C = clustered(rng, 300, 9, 8, dtype, integer=True)
    index = make_index(X, labels, 8)
    for k in (1, 3, 10):
        got = search_block(Q, all_probes(Q.shape[0], 8), index, k, C)
        assert_same(got, brute_force(Q, X, k))


def test_clusters_smaller_than_k_are_extended():
    rng = np.random.default_rng(2)
    X, labels, Q, C = clustered(rng, 200, 6, 10, np.float64)
    index = make_index(X, labels, 10)
    probes = np.full((Q.shape[0], 1), 9)  # a cluster of 2 rows (cluster 8 is empty)
    for k in (1, 3, 10):
        got = search_block(Q, probes, index, k, C)
        assert_same(got, _search_block_numpy(Q, probes, index, k, C))
        assert (got[:, k:] >= 0).all() and np.isfinite(got[:, :k]).all()
    probes = np.full((Q.shape[0], 1), 8)  # the empty cluster alone
    assert_same(search_block(Q, probes, index, 3, C), _search_block_numpy(Q, probes, index, 3, C))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_equals_numpy_implementation_on_random_data(dtype, monkeypatch):
    rng = np.random.default_rng(3)
    n_clusters = 20
    X, labels, Q, C = clustered(rng, 3000, 37, n_clusters, dtype)
    Q = np.vstack([Q, (rng.standard_normal((200, 37)) * 4).astype(dtype)])
    index = make_index(X, labels, n_clusters)
    dist = (C.astype(np.float64) ** 2).sum(1)[None, :] - 2.0 * (Q @ C.T)
    for tile in (4096, 50):
        monkeypatch.setattr(nb, "_TILE_ROWS", tile)
        for n_probe in (1, 2, 5):
            probes = _top_probes_block(dist, n_probe)
            for k in (1, 5, 10):
                new = search_block(Q, probes, index, k, C)
                assert_same(new, _search_block_numpy(Q, probes, index, k, C))


def test_cluster_probed_twice_counts_once():
    rng = np.random.default_rng(4)
    X, labels, Q, C = clustered(rng, 400, 5, 6, np.float64)
    index = make_index(X, labels, 6)
    once = search_block(Q, np.tile([[0, 1, 2]], (Q.shape[0], 1)), index, 4, C)
    twice = search_block(Q, np.tile([[0, 1, 1, 2, 0]], (Q.shape[0], 1)), index, 4, C)
    assert np.array_equal(once, twice)


def test_zarr_index_equals_in_memory(tmp_path):
    rng = np.random.default_rng(5)
    X, labels, Q, C = clustered(rng, 500, 7, 9, np.float32)
    mem, _ = build_index(da.from_array(X, chunks=120), labels, 9)
    disk, _ = build_index(da.from_array(X, chunks=120), labels, 9, path=tmp_path / "idx")
    probes = _top_probes_block((C ** 2).sum(1)[None, :] - 2.0 * (Q @ C.T), 2)
    for k in (1, 4):
        got = search_block(Q, probes, disk, k, C)
        assert np.array_equal(got, search_block(Q, probes, mem, k, C))
        assert_same(got, _search_block_numpy(Q, probes, disk, k, C))


def test_other_dtypes_take_the_numpy_path():
    rng = np.random.default_rng(6)
    X, labels, Q, C = clustered(rng, 300, 4, 5, np.float16, integer=True)
    index = make_index(X, labels, 5)
    probes = all_probes(Q.shape[0], 5)
    assert_same(search_block(Q, probes, index, 3, C), _search_block_numpy(Q, probes, index, 3, C))


def test_empty_query_block():
    index = make_index(np.zeros((3, 2)), np.array([0, 0, 1]), 2)
    assert search_block(np.zeros((0, 2)), np.zeros((0, 1), np.int64), index, 2,
                        np.zeros((2, 2))).shape == (0, 4)


# --------------------------------------------------------------------------- the pruning
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pruning_skips_pairs_without_changing_the_result(dtype):
    """A tile far from the queries after a near one: the bound skips its
    candidates; the top-k is the one computing them all gives."""
    rng = np.random.default_rng(7)
    near = rng.standard_normal((60, 50))
    far = rng.standard_normal((60, 50)) + 3.0
    Q = (rng.standard_normal((8, 50)) * 0.5).astype(dtype)
    q_rows = np.arange(8, dtype=np.int64)
    q_sq = np.einsum("ij,ij->i", Q, Q, dtype=np.float64)
    results = []
    for gammas in (pruning_gammas(50, dtype, np.float64), (np.inf, np.inf)):
        best_d = np.full((8, 5), np.inf)
        best_i = np.full((8, 5), -1, dtype=np.int64)
        computed = 0
        for off, rows in ((0, near), (60, far)):
            Xt = rows.astype(dtype)
            sq = np.einsum("ij,ij->i", Xt, Xt, dtype=np.float64)
            computed += tile_topk(Q @ Xt.T, sq, Q, q_rows, q_sq, Xt, np.arange(off, off + 60),
                                  5, *gammas, best_d, best_i, 60)
        results.append((best_d, best_i, computed))
    (d1, i1, c1), (d2, i2, c2) = results
    assert np.array_equal(d1, d2) and np.array_equal(i1, i2)
    assert c2 == 8 * 120 and c1 < c2  # without a bound every row is computed
    assert (i1 < 60).all()


def far_from_the_origin():
    """Rows and queries with ‖x‖ ≈ 1600 and spread ≈ 1 in 3 clusters, all probed."""
    rng = np.random.default_rng(11)
    X = (rng.standard_normal((400, 64)) + 200.0).astype(np.float32)
    Q = (rng.standard_normal((300, 64)) + 200.0).astype(np.float32)
    labels = rng.integers(0, 3, 400)
    C = np.full((3, 64), 200.0, dtype=np.float32)
    return X, Q, labels, make_index(X, labels, 3), C, all_probes(Q.shape[0], 3)


def in_blocks(Q, probes, index, k, C, step):
    """search_block over query blocks of ``step`` rows, stacked."""
    return np.vstack([search_block(Q[a:a + step], probes[a:a + step], index, k, C)
                      for a in range(0, Q.shape[0], step)])


def test_float32_near_ties_the_computed_scores_misorder_are_exact(monkeypatch):
    """Rows far from the origin (‖x‖ ≈ 1600, spread ≈ 1): the float32 GEMM's
    rounding (≈ 0.1 in the score) exceeds many gaps between neighbours, so
    the smallest computed score is often not the nearest row.  The search
    still returns the brute-force k-NN (float64 distances of the stored
    values), whatever the query blocks; the NumPy path, which trusts the
    computed scores, does not — the case is one that tests the bound.
    (The float64 GEMM such clusters now get is turned off here: the float32
    bound is what is tested; the next test takes the float64 path.)"""
    monkeypatch.setattr(nb, "_WIDEN_SLACK", 10 ** 9)
    X, Q, labels, index, C, probes = far_from_the_origin()
    for k in (1, 4):
        ref = brute_force(Q, X, k)
        got = search_block(Q, probes, index, k, C)
        assert_same(got, ref)
        for step in (1, 7, 64):  # other GEMM shapes, same result
            assert np.array_equal(in_blocks(Q, probes, index, k, C, step), got)
        old = _search_block_numpy(Q, probes, index, k, C)
        assert not np.array_equal(old[:, k:], ref[:, k:])


def test_rows_far_from_the_origin_take_a_float64_gemm(monkeypatch):
    """The same rows (‖x‖ ≈ 1600, spread ≈ 1): their float32 rounding bound admits
    many rows as candidates, so such a tile is given up and scored again by a float64
    GEMM — the same exact result, with far fewer exact distances; centred rows stay
    float32."""
    import dqkm.kernels.cluster_search as cs

    X, Q, labels, index, C, probes = far_from_the_origin()
    seen = []
    kernel = cs.tile_topk

    def spy(G, *args):
        n = kernel(G, *args)
        seen.append((G.dtype, n))
        return n

    monkeypatch.setattr(cs, "tile_topk", spy)
    monkeypatch.setattr(nb, "tile_topk", spy)  # the name the search imports
    counts = {}
    for slack in (10 ** 9, nb._WIDEN_SLACK):
        monkeypatch.setattr(nb, "_WIDEN_SLACK", slack)
        seen.clear()
        got = search_block(Q, probes, index, 4, C)
        assert_same(got, brute_force(Q, X, 4))
        counts[slack] = ({str(d) for d, n in seen if n >= 0}, sum(max(n, 0) for _, n in seen))
        for step in (1, 64):  # tiles given up part-way, after some queries merged
            assert np.array_equal(in_blocks(Q, probes, index, 4, C, step), got)
    (dt32, n32), (dt64, n64) = counts[10 ** 9], counts[nb._WIDEN_SLACK]
    assert dt32 == {"float32"} and dt64 == {"float64"}
    assert n64 < n32 / 8  # measured: 27,421 exact distances in float32, 2,253 in float64
    # centred rows: the float32 GEMM as before
    Xc, Qc = X - np.float32(200.0), Q - np.float32(200.0)
    seen.clear()
    assert_same(search_block(Qc, probes, make_index(Xc, labels, 3), 4, C - 200),
                brute_force(Qc, Xc, 4))
    assert {str(d) for d, _ in seen} == {"float32"}


def test_pruning_gammas():
    g32, s64 = pruning_gammas(2000, np.float32, np.float64)
    assert 1.19e-4 < g32 < 1.2e-4 and s64 < 1e-12
    assert pruning_gammas(10 ** 8, np.float32, np.float64)[0] == np.inf
