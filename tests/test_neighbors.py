"""ClusterIndex: approximate k-NN through a cluster partition."""

import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sklearn.exceptions import NotFittedError
from sklearn.neighbors import NearestNeighbors

import dqkm
from dqkm.neighbors import ClusterIndex


@pytest.fixture(scope="module")
def blobs():
    X, y = make_blobs(1200, 10, centers=8, cluster_std=1.0, center_box=(-20, 20),
                      random_state=3)
    Q, yq = make_blobs(300, 10, centers=8, cluster_std=1.0, center_box=(-20, 20),
                       random_state=3)  # same centers (same seed for the box)
    Q = Q + np.random.default_rng(1).normal(scale=0.05, size=Q.shape)
    return X, y, Q, yq


@pytest.fixture(scope="module")
def fitted_km(blobs):
    X = blobs[0]
    return dqkm.KMeans(8, random_state=0).fit(X)


def test_full_probe_equals_brute_force(blobs, fitted_km):
    X, _, Q, _ = blobs
    idx = ClusterIndex(fitted_km, n_probe=8).fit(X)
    dist, ind = idx.kneighbors(Q, n_neighbors=5)
    ref_d, ref_i = NearestNeighbors(algorithm="brute").fit(X).kneighbors(Q, 5)
    np.testing.assert_array_equal(ind, ref_i)
    np.testing.assert_allclose(dist, ref_d, rtol=1e-10, atol=1e-10)
    assert np.all(np.diff(dist, axis=1) >= 0)
    assert ind.dtype == np.int64 and dist.dtype == np.float64


def test_full_probe_equals_brute_force_float32_and_uneven_clusters():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((700, 6)).astype(np.float32)
    Q = rng.standard_normal((90, 6)).astype(np.float32)
    km = dqkm.KMeans(13, random_state=1).fit(X)
    dist, ind = ClusterIndex(km, n_probe=13).fit(X).kneighbors(Q, 3)
    ref_d, ref_i = NearestNeighbors(algorithm="brute").fit(X.astype(np.float64)).kneighbors(
        Q.astype(np.float64), 3)
    np.testing.assert_array_equal(ind, ref_i)
    np.testing.assert_allclose(dist, ref_d, rtol=1e-6)


def test_recall_one_probe_well_separated(blobs):
    X, y, Q, yq = blobs
    idx = ClusterIndex(dqkm.KMeans(8, random_state=0), n_probe=1).fit(X, y)
    _, ind = idx.kneighbors(Q)
    _, ref = NearestNeighbors().fit(X).kneighbors(Q, 1)
    recall = np.mean(ind[:, 0] == ref[:, 0])
    assert recall >= 0.95
    assert idx.score(Q, yq) >= 0.95
    assert idx.clusterer_ is not idx.clusterer  # unfitted → a fitted clone
    assert idx.cluster_sizes_.sum() == len(X)


def test_more_probes_never_lose_recall():
    X, _ = make_blobs(1500, 8, centers=20, cluster_std=4.0, random_state=0)
    Q = X[:200] + np.random.default_rng(0).normal(scale=1.0, size=(200, 8))
    km = dqkm.KMeans(20, random_state=0).fit(X)
    _, ref = NearestNeighbors().fit(X).kneighbors(Q, 1)
    recalls = [np.mean(ClusterIndex(km, n_probe=p).fit(X).kneighbors(Q)[1][:, 0] == ref[:, 0])
               for p in (1, 3, 20)]
    assert recalls[0] <= recalls[1] <= recalls[2] == 1.0
    assert recalls[0] < 1.0  # overlapping clusters: one probe is approximate here


def test_numpy_dask_zarr_identical(blobs, fitted_km, tmp_path):
    X, y, Q, _ = blobs
    ref = ClusterIndex(fitted_km, n_probe=2).fit(X, y)
    d0, i0 = ref.kneighbors(Q, 4)
    Xd = da.from_array(X, chunks=250)
    Qd = da.from_array(Q, chunks=70)
    lazy = ClusterIndex(fitted_km, n_probe=2).fit(Xd, y)
    d1, i1 = lazy.kneighbors(Qd, 4)
    assert isinstance(i1, da.Array) and i1.chunks[0] == Qd.chunks[0]
    store = tmp_path / "index.zarr"
    onzarr = ClusterIndex(fitted_km, n_probe=2, store=store).fit(Xd, y)
    assert (store / "zarr.json").exists() and not onzarr.index_.in_memory
    d2, i2 = onzarr.kneighbors(Qd, 4)
    d3, i3 = onzarr.kneighbors(Q, 4)
    for d, i in ((d1.compute(), i1.compute()), (d2.compute(), i2.compute()), (d3, i3)):
        np.testing.assert_array_equal(i, i0)
        np.testing.assert_array_equal(d, d0)
    np.testing.assert_array_equal(onzarr.predict(Qd).compute(), ref.predict(Q))
    with pytest.raises(FileExistsError, match="overwrite=True"):
        ClusterIndex(fitted_km, store=store).fit(X)

    class Spy(dqkm.KMeans):
        fits = 0

        def fit(self, X, y=None):
            Spy.fits += 1
            return super().fit(X)

    with pytest.raises(FileExistsError, match="overwrite=True"):  # before any pass over X
        ClusterIndex(Spy(8, random_state=0), store=store).fit(X)
    assert Spy.fits == 0
    ClusterIndex(fitted_km, store=store, overwrite=True).fit(X)


def test_zarr_index_on_local_cluster(blobs, fitted_km, tmp_path, dist_client):
    X, _, Q, _ = blobs
    idx = ClusterIndex(fitted_km, store=tmp_path / "i.zarr").fit(da.from_array(X, chunks=400))
    _, ind = idx.kneighbors(da.from_array(Q, chunks=100), 2)
    ref_idx = ClusterIndex(fitted_km).fit(X)
    np.testing.assert_array_equal(ind.compute(), ref_idx.kneighbors(Q, 2)[1])
    np.testing.assert_array_equal(idx.kneighbors(n_neighbors=2)[1],
                                  ref_idx.kneighbors(n_neighbors=2)[1])


def test_short_clusters_are_extended(blobs, fitted_km):
    X, _, Q, _ = blobs
    idx = ClusterIndex(fitted_km, n_probe=1).fit(X)
    k = int(idx.cluster_sizes_.max()) + 10  # more than any one cluster holds
    dist, ind = idx.kneighbors(Q[:5], k)
    assert ind.shape == (5, k) and np.all(ind >= 0)
    assert all(len(set(r)) == k for r in ind)
    assert np.all(np.isfinite(dist))


def test_predict_with_string_labels_and_sklearn_clusterer(blobs):
    from sklearn.cluster import KMeans as SKKMeans

    X, y, Q, yq = blobs
    names = np.array(["a", "b", "c", "d", "e", "f", "g", "h"])
    idx = ClusterIndex(SKKMeans(8, n_init=1, random_state=0), n_probe=2).fit(X, names[y])
    pred = idx.predict(Q)
    assert pred.dtype.kind == "U"
    assert np.mean(pred == names[yq]) >= 0.95
    pred_d = idx.predict(da.from_array(Q, chunks=100))
    np.testing.assert_array_equal(pred_d.compute(), pred)


def test_qkmeans_index(blobs):
    QKMeans = dqkm.QKMeans
    X, _, Q, _ = blobs
    qk = QKMeans(8, sparsity=3, random_state=0, max_iter=5, palm_iter=20,
                 palm_iter_init=50).fit(X)
    _, ind = ClusterIndex(qk, n_probe=8).fit(X).kneighbors(Q, 2)
    _, ref = NearestNeighbors().fit(X).kneighbors(Q, 2)
    np.testing.assert_array_equal(ind, ref)
    _, ind1 = ClusterIndex(qk, n_probe=1).fit(X).kneighbors(Q)
    assert np.mean(ind1[:, 0] == ref[:, 0]) >= 0.95


def test_bad_input(blobs, fitted_km):
    X, _, Q, _ = blobs
    idx = ClusterIndex(fitted_km).fit(X)
    with pytest.raises(ValueError, match="n_neighbors = 1201, n_samples_fit = 1200"):
        idx.kneighbors(Q, n_neighbors=1201)
    with pytest.raises(ValueError, match="'n_neighbors' parameter"):
        idx.kneighbors(Q, n_neighbors=0)
    with pytest.raises(TypeError, match="'n_neighbors' parameter .* Got 1.5 instead"):
        idx.kneighbors(Q, n_neighbors=1.5)
    with pytest.raises(ValueError, match="X has 3 features, but ClusterIndex is expecting 10"):
        idx.kneighbors(Q[:, :3])
    with pytest.raises(ValueError, match=r"'n_probe' parameter of ClusterIndex must be an int "
                                         r"in the range \[1, n_clusters=8\]. Got 9 instead"):
        ClusterIndex(fitted_km, n_probe=9).fit(X)
    with pytest.raises(ValueError, match="'n_probe' parameter of ClusterIndex must be an int "
                                         "in the range"):
        ClusterIndex(fitted_km, n_probe=0).fit(X)
    with pytest.raises(TypeError, match="'clusterer' parameter of ClusterIndex must be a "
                                        "clustering estimator"):
        ClusterIndex("kmeans").fit(X)
    with pytest.raises(ValueError, match="fitted clusterer of ClusterIndex was fitted on 10"):
        ClusterIndex(fitted_km).fit(X[:, :4])
    with pytest.raises(NotFittedError):
        ClusterIndex(fitted_km).kneighbors(Q)
    with pytest.raises(NotFittedError, match="fitted without targets"):
        idx.predict(Q)
    with pytest.raises(ValueError, match=r"y must have shape \(n_samples,\) = \(1200,\)"):
        ClusterIndex(fitted_km).fit(X, np.zeros(5))


def test_graph_broadcasts_index_once_and_inputs_unchanged(blobs, fitted_km):
    X, y, Q, _ = blobs
    X0, Q0 = X.copy(), Q.copy()
    idx = ClusterIndex(fitted_km, n_probe=2).fit(X, y)
    Qd = da.from_array(Q, chunks=60)  # 5 blocks
    dist, ind = idx.kneighbors(Qd, 3)
    graph = dict(ind.__dask_graph__())
    names = [k if isinstance(k, str) else k[0] for k in graph]
    assert sum(n.startswith("dqkm-cluster-index") for n in names) == 1
    assert sum(n.startswith("dqkm-search") for n in names) == Qd.numblocks[0]
    idx.predict(Q)
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(Q, Q0)


def test_clone_keeps_a_fitted_clusterer(blobs, fitted_km):
    from sklearn.base import clone

    X, y, Q, yq = blobs
    twin = clone(ClusterIndex(fitted_km, n_probe=2))
    assert twin.clusterer is fitted_km and twin.n_probe == 2
    assert twin.fit(X, y).clusterer_ is fitted_km
    unfitted = dqkm.KMeans(8, random_state=0)
    assert clone(ClusterIndex(unfitted)).clusterer is not unfitted


def test_kneighbors_of_the_indexed_rows_excludes_each_row(blobs, fitted_km, tmp_path):
    """X=None: scikit-learn's semantics (every indexed row against the others), in fit's
    row order, for in-memory and Zarr-backed indexes."""
    X = blobs[0]
    ref_d, ref_i = NearestNeighbors(algorithm="brute").fit(X).kneighbors(n_neighbors=4)
    exact = ClusterIndex(fitted_km, n_probe=8).fit(X)
    d, i = exact.kneighbors(n_neighbors=4)
    np.testing.assert_array_equal(i, ref_i)
    np.testing.assert_allclose(d, ref_d, rtol=1e-10, atol=1e-10)
    onzarr = ClusterIndex(fitted_km, n_probe=8, store=tmp_path / "self.zarr").fit(X)
    dz, iz = onzarr.kneighbors(n_neighbors=4)
    np.testing.assert_array_equal(iz, i)
    np.testing.assert_array_equal(dz, d)
    # one probe: each row searches its own cluster; the same as querying X with one more
    # neighbour and removing the row itself
    one = ClusterIndex(fitted_km, n_probe=1).fit(X)
    d1, i1 = one.kneighbors(n_neighbors=3)
    qd, qi = one.kneighbors(X, n_neighbors=4)
    for r in range(len(X)):
        keep = qi[r] != r
        assert not keep.all()  # the row finds itself first (distance 0)
        np.testing.assert_array_equal(i1[r], qi[r][keep])
        np.testing.assert_array_equal(d1[r], qd[r][keep])
    assert not (i1 == np.arange(len(X))[:, None]).any()
    np.testing.assert_array_equal(one.kneighbors(n_neighbors=3, return_distance=False), i1)


def test_kneighbors_of_the_indexed_rows_with_duplicates():
    X = np.repeat(np.arange(12, dtype=np.float64).reshape(6, 2), 3, axis=0)  # 3 copies each
    idx = ClusterIndex(dqkm.KMeans(3, random_state=0), n_probe=3).fit(X)
    d, i = idx.kneighbors(n_neighbors=2)
    assert not (i == np.arange(18)[:, None]).any()
    np.testing.assert_array_equal(d, 0.0)  # the two other copies
    np.testing.assert_array_equal(i // 3, np.arange(18)[:, None] // 3 * np.ones((1, 2), int))


def test_kneighbors_graph_matches_sklearn(blobs, fitted_km):
    X, _, Q, _ = blobs
    nn = NearestNeighbors(algorithm="brute").fit(X)
    idx = ClusterIndex(fitted_km, n_probe=8).fit(X)
    for mode in ("connectivity", "distance"):
        for q in (Q, None):
            g = idx.kneighbors_graph(q, n_neighbors=3, mode=mode)
            ref = nn.kneighbors_graph(q, n_neighbors=3, mode=mode)
            assert g.format == "csr" and g.shape == ref.shape
            np.testing.assert_array_equal(g.indices, ref.indices)
            np.testing.assert_allclose(g.toarray(), ref.toarray(), rtol=1e-10, atol=1e-10)
    lazy = idx.kneighbors_graph(da.from_array(Q, chunks=100), n_neighbors=2)
    np.testing.assert_array_equal(lazy.toarray(), idx.kneighbors_graph(Q, 2).toarray())
    with pytest.raises(ValueError, match="'mode' parameter of ClusterIndex.kneighbors_graph "
                                         "must be a str among"):
        idx.kneighbors_graph(Q, mode="weights")
    with pytest.raises(ValueError, match=r"n_neighbors <= n_samples_fit - 1 .*n_neighbors = "
                                         r"1200, n_samples_fit = 1200"):
        idx.kneighbors(n_neighbors=1200)
    # the largest n_neighbors, n_samples_fit - 1, on a 100-row index of the same clusterer
    # (the 1200 x 1199 answer took seconds and checks the same boundary)
    small = ClusterIndex(fitted_km, n_probe=8).fit(X[:100])
    d_all, i_all = small.kneighbors(n_neighbors=99)
    assert i_all.shape == (100, 99)
    ref_d, _ = NearestNeighbors(algorithm="brute").fit(X[:100]).kneighbors(n_neighbors=99)
    np.testing.assert_allclose(d_all, ref_d, rtol=1e-10, atol=1e-10)


def test_zarr_backed_index_pickles_small_and_reopens(blobs, fitted_km, tmp_path):
    """A stored index travels as its path: the pickle holds no rows, and the unpickled
    estimator (e.g. in another process) answers the same from the store."""
    import pickle

    X, y, Q, _ = blobs
    idx = ClusterIndex(fitted_km, n_probe=2, store=tmp_path / "p.zarr").fit(X, y)
    d0, i0 = idx.kneighbors(Q, 3)
    blob = pickle.dumps(idx)
    assert len(blob) < X.nbytes / 2  # the rows are not in it (targets and labels are)
    again = pickle.loads(blob)
    d1, i1 = again.kneighbors(Q, 3)
    np.testing.assert_array_equal(i1, i0)
    np.testing.assert_array_equal(d1, d0)
    np.testing.assert_array_equal(again.predict(Q), idx.predict(Q))


@pytest.mark.parametrize("ext", [".npz", ".zarr"])
@pytest.mark.parametrize("zarr_index", [False, True])
def test_save_load_roundtrip(blobs, tmp_path, ext, zarr_index):
    """dqkm.save/load: the reloaded index answers exactly as the original (neighbours,
    distances, 1-NN labels) — in-memory rows saved in the file, a Zarr-backed index
    by its store; an unfitted clusterer parameter stays unfitted, the fitted one is
    saved beside it."""
    X, y, Q, _ = blobs
    labels = np.array([f"class-{c}" for c in y])          # text targets go in the header
    store = tmp_path / "index.zarr" if zarr_index else None
    idx = ClusterIndex(dqkm.QKMeans(8, random_state=0, max_iter=5), n_probe=2,
                       store=store).fit(X, labels)
    path = tmp_path / f"model{ext}"
    dqkm.save(idx, path)
    back = dqkm.load(path)
    assert isinstance(back, ClusterIndex) and back.n_probe == 2
    assert not hasattr(back.clusterer, "factors_")        # the parameter: unfitted
    np.testing.assert_array_equal(back.clusterer_.predict(Q), idx.clusterer_.predict(Q))
    d0, i0 = idx.kneighbors(Q, 4)
    d1, i1 = back.kneighbors(Q, 4)
    np.testing.assert_array_equal(i1, i0)
    np.testing.assert_array_equal(d1, d0)
    np.testing.assert_array_equal(back.predict(Q), idx.predict(Q))
    assert back.classes_.dtype == idx.classes_.dtype
    np.testing.assert_array_equal(back.cluster_sizes_, idx.cluster_sizes_)
    assert back.index_.in_memory == (not zarr_index)
    np.testing.assert_array_equal(back.kneighbors(None, 2)[1], idx.kneighbors(None, 2)[1])


def test_save_load_fitted_clusterer_parameter_once(blobs, fitted_km, tmp_path):
    X, y, Q, _ = blobs
    idx = ClusterIndex(fitted_km).fit(X, y)
    dqkm.save(idx, tmp_path / "m.npz")
    back = dqkm.load(tmp_path / "m.npz")
    assert back.clusterer_ is back.clusterer               # not stored twice
    with np.load(tmp_path / "m.npz") as f:
        assert not any(k.startswith("fitted_clusterer__") for k in f.files)
    np.testing.assert_array_equal(back.kneighbors(Q, 3)[1], idx.kneighbors(Q, 3)[1])
    np.testing.assert_array_equal(back.predict(Q), idx.predict(Q))


def test_save_load_errors(blobs, fitted_km, tmp_path):
    """A moved or rewritten Zarr index, an unfitted index, a scikit-learn clusterer:
    clear errors, nothing written."""
    from sklearn.cluster import KMeans as SkKMeans

    X = blobs[0]
    store = tmp_path / "index.zarr"
    dqkm.save(ClusterIndex(fitted_km, store=store).fit(X), tmp_path / "m.npz")
    # the same partition written again is another index (its uid changes)
    ClusterIndex(fitted_km, store=store, overwrite=True).fit(X)
    with pytest.raises(ValueError, match="holds another index.*rewritten"):
        dqkm.load(tmp_path / "m.npz")
    import shutil
    shutil.rmtree(store)
    with pytest.raises(FileNotFoundError, match="not there any more"):
        dqkm.load(tmp_path / "m.npz")
    with pytest.raises(NotFittedError):
        dqkm.save(ClusterIndex(dqkm.KMeans(3)), tmp_path / "u.npz")
    sk = ClusterIndex(SkKMeans(8, n_init=1, random_state=0)).fit(X)
    with pytest.raises(TypeError, match="'clusterer'.*cannot be saved without pickle"):
        dqkm.save(sk, tmp_path / "sk.zarr")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz"]


def test_n_probe_changed_after_fit(blobs, fitted_km):
    """n_probe is a query-time setting: set_params after fit needs no refit (n_probe = K is
    then exact) and is checked again by every query."""
    X, _, Q, _ = blobs
    idx = ClusterIndex(fitted_km, n_probe=1).fit(X)
    idx.set_params(n_probe=8)
    _, ind = idx.kneighbors(Q, 4)
    np.testing.assert_array_equal(ind, NearestNeighbors().fit(X).kneighbors(Q, 4)[1])
    for bad in (9, 0):
        idx.set_params(n_probe=bad)
        with pytest.raises(ValueError, match="'n_probe' parameter of ClusterIndex"):
            idx.kneighbors(Q)
        with pytest.raises(ValueError, match="'n_probe'"):
            idx.kneighbors(None, 2)


def test_passes_sklearn_check_estimator():
    from sklearn.utils.estimator_checks import check_estimator

    results = check_estimator(ClusterIndex(dqkm.KMeans(3, random_state=0)), on_fail=None)
    failed = [r for r in results if r["status"] == "failed"]
    assert len(results) > 30 and not failed, [(r["check_name"], str(r["exception"])[:200])
                                              for r in failed]


def test_in_memory_index_larger_than_the_driver_is_refused(blobs, fitted_km, tmp_path,
                                                            monkeypatch):
    """Without store the index is X on the driver: refused before any pass when it would
    take more than half the free memory, with the remedy (store=) in the message."""
    import dqkm.neighbors as nb

    X = blobs[0]
    monkeypatch.setattr(nb, "driver_memory_bytes", lambda: 1.5 * X.nbytes)
    Xd = da.from_array(X, chunks=300)
    with pytest.raises(MemoryError, match="store='index.zarr'"):
        ClusterIndex(fitted_km).fit(Xd)
    idx = ClusterIndex(fitted_km, store=tmp_path / "i.zarr").fit(Xd)  # on disk: fine
    assert not idx.index_.in_memory
    assert ClusterIndex(fitted_km).fit(X).index_.in_memory  # NumPy in: memory was chosen
    monkeypatch.setattr(nb, "driver_memory_bytes", lambda: 3.0 * X.nbytes)
    assert ClusterIndex(fitted_km).fit(Xd).index_.in_memory


def test_the_shuffle_reads_each_block_of_x_inside_its_spill_task(tmp_path):
    """Phase 1 of the out-of-core shuffle (the ClusterIndex build) reads every large
    block of X from Zarr inside the task that spills it: no read is a task of its own
    whose chunk a worker holds while its spill task waits (with 64 MiB chunks, those
    held reads paused both workers of a 2 × 600 MiB cluster); the rows come back
    permuted exactly."""
    import dask

    from dqkm import datasets
    from dqkm.parallel.engine import INLINE_BYTES
    from dqkm.data.spill import save_destinations
    from dqkm.parallel.shuffle import _spill_tasks, permute_rows, spill_directory

    rows = INLINE_BYTES // (4 * 4)
    X, _ = datasets.make_blobs(3 * rows, 4, 3, chunks=rows, random_state=0,
                               path=tmp_path / "X.zarr")
    order = np.random.default_rng(0).permutation(X.shape[0])
    spill = spill_directory(tmp_path / "out")
    save_destinations(spill, np.argsort(order))
    (opt,) = dask.optimize(_spill_tasks(X, spill, False))
    assert all(str(k).startswith("dqkm-shuffle-spill-") for k in dict(opt.__dask_graph__()))
    Xs = permute_rows(X, order, spill, out_rows=rows // 2)
    np.testing.assert_array_equal(Xs.compute(), X.compute()[order])
