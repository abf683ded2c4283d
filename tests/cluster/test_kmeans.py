import dask.array as da
import numpy as np
import pytest
from sklearn.cluster import KMeans as SkKMeans
from sklearn.datasets import load_digits, make_blobs

import dqkm


def _reference(X, init, **kw):
    return SkKMeans(init.shape[0], init=init, n_init=1, algorithm="lloyd", **kw).fit(X)


@pytest.fixture(scope="module")
def digits():
    X = load_digits().data
    return X, X[np.random.default_rng(3).choice(len(X), 10, replace=False)]


@pytest.fixture(scope="module")
def blobs():
    X, _ = make_blobs(5000, 10, centers=6, cluster_std=2.5, random_state=1)
    return X, X[:6].copy()


@pytest.mark.parametrize("data", ["blobs", "digits"])
@pytest.mark.parametrize("chunks", [None, 1000, 777, (1, 1499, 0, 3000, 500)])
def test_same_labels_and_inertia_as_sklearn(request, data, chunks):
    X, init = request.getfixturevalue(data)
    ref = _reference(X, init)
    if chunks is None:
        km = dqkm.KMeans(init.shape[0], init=init).fit(X)
        assert isinstance(km.labels_, np.ndarray)
    else:
        if isinstance(chunks, tuple):
            chunks = tuple(c for c in chunks)
            chunks = chunks[:-1] + (len(X) - sum(chunks[:-1]),)
        Xd = da.from_array(X, chunks=(chunks, -1))
        km = dqkm.KMeans(init.shape[0], init=init).fit(Xd)
        assert isinstance(km.labels_, da.Array)
        assert km.labels_.chunks[0] == Xd.chunks[0]
    np.testing.assert_array_equal(np.asarray(km.labels_), ref.labels_)
    assert km.inertia_ == pytest.approx(ref.inertia_, rel=1e-5)
    # sklearn sums centers in another order; a point at a floating-point tie can
    # flip once more there, costing it one more iteration to the same labels.
    assert abs(km.n_iter_ - ref.n_iter_) <= 1
    np.testing.assert_allclose(km.cluster_centers_, ref.cluster_centers_, rtol=1e-6, atol=1e-8)


def test_same_labels_on_local_cluster(dist_client, digits):
    X, init = digits
    ref = _reference(X, init)
    from distributed import get_task_stream

    with get_task_stream(dist_client) as stream:
        km = dqkm.KMeans(10, init=init).fit(da.from_array(X, chunks=(400, -1)))
    # the Lloyd passes ran on the cluster's workers, not in the driver's threads
    assert any("lloyd" in str(task["key"]) for task in stream.data)
    np.testing.assert_array_equal(km.labels_.compute(), ref.labels_)
    assert km.inertia_ == pytest.approx(ref.inertia_, rel=1e-5)


def test_float32_stays_float32_and_labels_align(blobs):
    X, init = blobs
    Xd = da.from_array(X.astype(np.float32), chunks=(1200, -1))
    km = dqkm.KMeans(6, init=init, random_state=0).fit(Xd)
    assert km.cluster_centers_.dtype == np.float32
    assert km.labels_.chunks == (Xd.chunks[0],)
    ref = _reference(X.astype(np.float32), init.astype(np.float32))
    assert (km.labels_.compute() == ref.labels_).mean() > 0.999


@pytest.mark.parametrize("init", ["k-means++", "k-means||", "random"])
def test_inits_reach_good_solutions(init, blobs):
    X, _ = blobs
    km = dqkm.KMeans(6, init=init, random_state=0).fit(da.from_array(X, chunks=(900, -1)))
    best = min(SkKMeans(6, n_init=5, random_state=s).fit(X).inertia_ for s in range(2))
    assert km.inertia_ <= 1.05 * best
    km2 = dqkm.KMeans(6, init=init, random_state=0).fit(da.from_array(X, chunks=(900, -1)))
    np.testing.assert_array_equal(km.cluster_centers_, km2.cluster_centers_)


def test_history_shape_and_monotone_objective(digits):
    X, init = digits
    km = dqkm.KMeans(10, init=init).fit(X)
    assert len(km.history_) == km.n_iter_
    for rec in km.history_:
        assert {"objective", "shift", "seconds", "empty_clusters"} <= set(rec)
    obj = [r["objective"] for r in km.history_]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(obj, obj[1:]))


def test_empty_cluster_keeps_previous_center():
    X = np.array([[0.0], [0.1], [10.0], [10.1]])
    init = np.array([[0.0], [10.0], [100.0]])
    km = dqkm.KMeans(3, init=init, max_iter=5).fit(X)
    assert km.cluster_centers_[2, 0] == 100.0
    assert km.history_[0]["empty_clusters"] == [2]
    assert np.isfinite(km.cluster_centers_).all()


def test_predict_transform_score(blobs):
    X, init = blobs
    km = dqkm.KMeans(6, init=init).fit(X)
    np.testing.assert_array_equal(km.predict(X), km.labels_)
    Xd = da.from_array(X, chunks=(700, -1))
    np.testing.assert_array_equal(km.predict(Xd).compute(), km.labels_)
    T = km.transform(X)
    assert T.shape == (len(X), 6)
    np.testing.assert_array_equal(T.argmin(1), km.labels_)
    np.testing.assert_allclose(km.transform(Xd).compute(), T)
    assert km.score(X) == pytest.approx(-km.inertia_, rel=1e-9)
    assert km.score(Xd) == pytest.approx(-km.inertia_, rel=1e-9)
    np.testing.assert_array_equal(km.fit_predict(X), km.labels_)


def test_n_init_keeps_best():
    X, _ = make_blobs(2000, 5, centers=8, random_state=2)
    single = [dqkm.KMeans(8, init="random", n_init=1, random_state=s).fit(X).inertia_
              for s in range(3)]
    multi = dqkm.KMeans(8, init="random", n_init=6, random_state=0).fit(X)
    assert multi.inertia_ <= max(single)


def test_save_load_roundtrip(tmp_path, blobs):
    X, init = blobs
    km = dqkm.KMeans(6, init=init).fit(X)
    for name in ["m.zarr", "m.npz"]:
        dqkm.save(km, tmp_path / name)
        km2 = dqkm.load(tmp_path / name)
        np.testing.assert_array_equal(km2.cluster_centers_, km.cluster_centers_)
        np.testing.assert_array_equal(km2.predict(X), km.labels_)
        assert km2.inertia_ == km.inertia_ and km2.history_ == km.history_
        np.testing.assert_array_equal(km2.init, init)
    np.load(tmp_path / "m.npz", allow_pickle=False)  # no pickled objects inside


def test_model_fitted_on_dask_input_saves_again_after_load(tmp_path, blobs):
    """Lazy labels are not saved; the reloaded model (no labels_) saves again."""
    X, init = blobs
    km = dqkm.KMeans(6, init=init).fit(da.from_array(X, chunks=(len(X) // 3, -1)))
    dqkm.save(km, tmp_path / "a.npz")
    back = dqkm.load(tmp_path / "a.npz")
    assert not hasattr(back, "labels_")
    dqkm.save(back, tmp_path / "b.zarr")
    np.testing.assert_array_equal(dqkm.load(tmp_path / "b.zarr").cluster_centers_,
                                  km.cluster_centers_)


def test_check_estimator():
    from sklearn.utils.estimator_checks import check_estimator

    # Every check of scikit-learn 1.9 passes but the two sample-weight equivalence
    # checks, which scikit-learn's KMeans fails as well (see SAMPLE_WEIGHT_EQUIVALENCE
    # in tests/test_common.py; test_kmeans_weights.py checks it from a fixed init).
    from tests.test_common import SAMPLE_WEIGHT_EQUIVALENCE

    check_estimator(dqkm.KMeans(n_clusters=3, random_state=0, max_iter=30),
                    expected_failed_checks=SAMPLE_WEIGHT_EQUIVALENCE)


# ----------------------------------------------------------------------- bad input
@pytest.mark.parametrize("value,match", [
    (np.nan, "Input X contains NaN"),
    (np.inf, "Input X contains infinity"),
])
def test_non_finite_detected_in_the_pass(value, match):
    X = np.random.default_rng(0).standard_normal((500, 3))
    X[321, 1] = value
    Xd = da.from_array(X, chunks=(100, -1))
    with pytest.raises(ValueError, match=match):
        dqkm.KMeans(3, init=X[:3], random_state=0).fit(Xd)
    with pytest.raises(ValueError, match="NaN|infinity"):
        dqkm.KMeans(3, random_state=0).fit(X)


def test_bad_shapes_and_types():
    with pytest.raises(ValueError, match="Expected a 2-D array"):
        dqkm.KMeans(2).fit(da.ones(10, chunks=5))
    with pytest.raises(ValueError, match="Expected a 2-D array"):
        dqkm.KMeans(2).fit(da.ones((4, 3, 2), chunks=2))
    with pytest.raises(ValueError, match="Expected 2D array"):
        dqkm.KMeans(2).fit(np.ones(10))
    with pytest.raises(TypeError, match="real numbers"):
        dqkm.KMeans(2).fit(da.from_array(np.array([["a", "b"], ["c", "d"]])))
    with pytest.raises(ValueError, match="could not convert|dtype"):
        dqkm.KMeans(2).fit(np.array([["a", "b"], ["c", "d"]]))


@pytest.mark.parametrize("k,match", [
    (0, r"The 'n_clusters' parameter of KMeans must be an int in the range \[1, inf\)\. Got 0"),
    (11, "n_samples=10 should be >= n_clusters=11"),
])
def test_bad_n_clusters(k, match):
    with pytest.raises(ValueError, match=match):
        dqkm.KMeans(k).fit(np.random.default_rng(0).standard_normal((10, 2)))


def test_bad_params():
    X = np.random.default_rng(0).standard_normal((20, 2))
    with pytest.raises(ValueError, match="'init' parameter of KMeans must be one of"):
        dqkm.KMeans(2, init="kmeans").fit(X)
    with pytest.raises(ValueError, match=r"'init' array of KMeans must have shape"):
        dqkm.KMeans(2, init=np.zeros((3, 2))).fit(X)
    with pytest.raises(ValueError, match="'persist' parameter"):
        dqkm.KMeans(2, persist="yes").fit(X)
    with pytest.raises(ValueError, match="'tol' parameter"):
        dqkm.KMeans(2, tol=-1.0).fit(X)
    with pytest.raises(ValueError, match="'split_every' parameter"):
        dqkm.KMeans(2, split_every=1).fit(X)


def test_feature_chunked_input():
    X = np.random.default_rng(0).standard_normal((100, 6))
    km = dqkm.KMeans(2, init=X[:2]).fit(da.from_array(X, chunks=(30, 2)))  # small: rechunked
    assert km.labels_.shape == (100,)
    big = da.zeros((200_000, 400), chunks=(50_000, 100))
    with pytest.raises(ValueError, match=r"X.rechunk\(\{1: -1\}\)"):
        dqkm.KMeans(2).fit(big)


def test_predict_errors():
    X = np.random.default_rng(0).standard_normal((30, 3))
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        dqkm.KMeans(2).predict(X)
    km = dqkm.KMeans(2, random_state=0).fit(X)
    with pytest.raises(ValueError, match="X has 2 features, but KMeans is expecting 3 features"):
        km.predict(X[:, :2])
    with pytest.raises(ValueError, match="X has 2 features, but KMeans is expecting 3 features"):
        km.predict(da.from_array(X[:, :2]))


# ------------------------------------------------ scikit-learn's API: words and warnings
_SMALL = make_blobs(300, 2, centers=3, cluster_std=0.5, random_state=0)[0]


@pytest.mark.parametrize("Estimator", [dqkm.KMeans, dqkm.KMeansL1, dqkm.MiniBatchKMeans])
def test_verbose_prints_scikit_learns_lines_on_stdout_for_every_estimator(Estimator, capsys):
    """verbose=1: the progress reporter prints scikit-learn's lines on stdout (the
    inertia of every iteration is the history's objective) beside dqkm's view."""
    kw = {"max_no_improvement": None} if Estimator is dqkm.MiniBatchKMeans else {}
    km = Estimator(3, random_state=0, max_iter=3, verbose=1, **kw).fit(_SMALL)
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0] == "Initialization complete"
    shown = [ln for ln in lines if ln.startswith("Iteration ")]
    assert shown == [f"Iteration {h['iteration']}, inertia {float(h['objective'])}"
                     for h in km.history_]
    assert f"{Estimator.__name__} iteration 1/3" in err  # dqkm's own view, on stderr


@pytest.mark.parametrize("tol, expected", [
    (0, r"Converged at iteration \d+: strict convergence\."),
    (1e-2, r"Converged at iteration \d+: center shift \S+ within tolerance \S+\."),
])
def test_verbose_says_why_the_fit_converged(tol, expected, capsys):
    import re

    X = np.random.RandomState(0).normal(size=(2000, 10))  # slow to settle: tol stops it
    km = dqkm.KMeans(3, init="random", n_init=1, random_state=0, tol=tol, verbose=1).fit(X)
    out = capsys.readouterr().out
    assert re.search(expected, out)
    assert f"Converged at iteration {km.n_iter_}:" in out


def test_scikit_learn_lines_can_be_turned_off(capsys, monkeypatch):
    from dqkm import progress

    monkeypatch.setitem(progress.SKLEARN_LINES, "enabled", False)
    dqkm.KMeans(3, random_state=0, max_iter=2, verbose=1).fit(_SMALL)
    out, err = capsys.readouterr()
    assert out == "" and "KMeans iteration 1/2" in err


@pytest.mark.parametrize("copy_x", [True, False])
def test_copy_x_is_accepted_and_x_is_never_modified(copy_x):
    X = _SMALL.copy()
    km = dqkm.KMeans(3, random_state=0, copy_x=copy_x).fit(X)
    np.testing.assert_array_equal(X, _SMALL)
    ref = dqkm.KMeans(3, random_state=0).fit(_SMALL)
    np.testing.assert_array_equal(km.cluster_centers_, ref.cluster_centers_)
    assert km.get_params()["copy_x"] is copy_x
    assert "copy_x" not in dqkm.QKMeans().get_params()  # K-means only, as scikit-learn


def test_copy_x_is_validated():
    with pytest.raises(ValueError, match=r"copy_x"):
        dqkm.KMeans(3, copy_x="no").fit(_SMALL)


@pytest.mark.parametrize("Estimator", [dqkm.KMeans, dqkm.MiniBatchKMeans])
def test_explicit_init_with_n_init_warns_and_runs_once(Estimator):
    import warnings

    init = _SMALL[:3]
    with pytest.warns(RuntimeWarning, match=r"Explicit initial center position passed: "
                      rf"performing only one init in {Estimator.__name__} instead of n_init=5"):
        km = Estimator(3, init=init, n_init=5, random_state=0).fit(_SMALL)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for n_init in ("auto", 1):  # the run that is made anyway: no warning
            once = Estimator(3, init=init, n_init=n_init, random_state=0).fit(_SMALL)
    np.testing.assert_array_equal(km.cluster_centers_, once.cluster_centers_)


@pytest.mark.parametrize("Estimator", [dqkm.KMeans, dqkm.MiniBatchKMeans])
@pytest.mark.parametrize("init, what", [
    (lambda X: X[:2], r"the number of clusters 3: .*\(3, 2\)\. Got \(2, 2\)"),
    (lambda X: np.c_[X[:3], X[:3]], r"the number of features of the data 2: .*\(3, 2\)\. Got \(3, 4\)"),
    (lambda X: (lambda X_, k, random_state: X_[:2]), r"the number of clusters 3"),
])
def test_init_shape_error_in_scikit_learns_words_names_expected_and_received(Estimator, init,
                                                                             what):
    with pytest.raises(ValueError, match=r"The shape of the initial centers \(\d, \d\) does "
                       rf"not match {what}"):
        Estimator(3, init=init(_SMALL), n_init=1).fit(_SMALL)
    with pytest.raises(ValueError, match=rf"'init' array of {Estimator.__name__} must have "
                       r"shape \(n_clusters, n_features\) = \(3, 2\).*set n_clusters"):
        Estimator(3, init=init(_SMALL), n_init=1).fit(_SMALL)


def test_fewer_distinct_points_than_clusters_warns_in_scikit_learns_words():
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    X = np.array([[0, 0], [1, 1], [1, 1], [1, 0], [0, 1]], dtype=float)
    for algorithm in ("lloyd", "elkan", "hamerly"):
        with pytest.warns(ConvergenceWarning, match=r"Number of distinct clusters \(4\) found "
                          r"smaller than n_clusters \(5\)\. Possibly due to duplicate points"):
            km = dqkm.KMeans(5, init=X, algorithm=algorithm).fit(X)
        assert km.n_iter_ == 1 and len(set(km.labels_.tolist())) == 4
    with warnings.catch_warnings():  # every cluster holds points: no warning
        warnings.simplefilter("error", ConvergenceWarning)
        dqkm.KMeans(3, random_state=0).fit(_SMALL)


@pytest.mark.parametrize("sparse", [False, True])
def test_transform_of_a_center_is_exactly_zero(sparse):
    """The distance of a row equal to a center is 0, not a cancellation residue
    of ‖x‖² − 2x·c + ‖c‖² (recomputed directly where the expanded form cancels)."""
    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    centers = rng.normal(size=(3, 10)) * 1e3 + 1e4
    km = dqkm.KMeans(3, init=centers, max_iter=1).fit(centers)
    X = sp.csr_matrix(km.cluster_centers_) if sparse else km.cluster_centers_
    Xt = km.transform(X)
    assert np.all(np.diag(Xt) == 0)
    from sklearn.metrics import pairwise_distances

    np.testing.assert_allclose(Xt, pairwise_distances(km.cluster_centers_), rtol=1e-12)


def _chunked_blobs(blobs, weighted):
    """``(init, X as 1000-row Dask chunks, weights or None, weights as Dask or None)``."""
    X, init = blobs
    Xd = da.from_array(X, chunks=(1000, -1))
    w = np.random.default_rng(0).uniform(0.5, 2.0, len(X)) if weighted else None
    wd = None if w is None else da.from_array(w, chunks=(Xd.chunks[0],))
    return init, Xd, w, wd


def _assert_final_labels(km, Xd):
    """labels_ are X's assignment to the final centers, in X's row chunks."""
    from dqkm.parallel.lloyd import assign

    np.testing.assert_array_equal(km.labels_.compute(),
                                  assign(Xd, km.cluster_centers_).compute())
    assert km.labels_.chunks == Xd.chunks[:1]


@pytest.mark.parametrize("weighted", [False, True])
def test_a_fit_that_keeps_its_labels_and_ends_with_no_shift_makes_no_final_pass(
        monkeypatch, blobs, weighted):
    # The last pass already assigned X to the final centers (zero shift): its labels are
    # kept, so no pass over X follows the last iteration, and they are the final ones.
    import dqkm.cluster.kmeans as kmeans_mod
    import dqkm.parallel.lloyd as lloyd_mod

    init, Xd, w, wd = _chunked_blobs(blobs, weighted)
    final = []
    for name in ("labels_and_inertia", "inertia"):
        real = getattr(kmeans_mod, name)
        monkeypatch.setattr(kmeans_mod, name,
                            lambda *a, _real=real, _n=name, **k: final.append(_n) or _real(*a, **k))
    km = dqkm.KMeans(6, init=init, max_iter=100, tol=0, persist=True).fit(Xd, sample_weight=w)
    assert km.history_[-1]["shift"] == 0 and km.n_iter_ < 100
    assert final == []
    assert km.inertia_ == pytest.approx(lloyd_mod.inertia(Xd, km.cluster_centers_,
                                                          sample_weight=wd), rel=1e-12)
    _assert_final_labels(km, Xd)


@pytest.mark.parametrize("weighted", [False, True])
def test_a_fit_that_keeps_its_labels_computes_them_with_the_inertia_in_one_pass(
        monkeypatch, blobs, weighted):
    # X persisted by the fit and released after it: labels_ and inertia_ come from one
    # final pass over X (one assignment per block), equal to the two separate passes
    import dqkm.parallel.lloyd as lloyd_mod

    init, Xd, w, wd = _chunked_blobs(blobs, weighted)
    calls = []
    real = lloyd_mod._assign
    monkeypatch.setattr(lloyd_mod, "_assign",
                        lambda block, centers: calls.append(len(block)) or real(block, centers))
    km = dqkm.KMeans(6, init=init, max_iter=2, tol=0, persist=True).fit(Xd, sample_weight=w)
    assert km.history_[-1]["shift"] > 0  # the final centers differ from the last pass's
    final = calls if not weighted else calls[-Xd.numblocks[0]:]
    assert sorted(final) == sorted(Xd.chunks[0])  # each block assigned once at the end
    if not weighted:
        assert len(calls) == Xd.numblocks[0]
    monkeypatch.setattr(lloyd_mod, "_assign", real)
    assert km.inertia_ == lloyd_mod.inertia(Xd, km.cluster_centers_, sample_weight=wd)
    _assert_final_labels(km, Xd)
