import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import load_digits, make_blobs

import dqkm
from dqkm.cluster.qkmeans import factorize_centroids


@pytest.fixture(scope="module")
def digits():
    X = load_digits().data
    return X, X[np.random.default_rng(0).choice(len(X), 10, replace=False)]


@pytest.fixture(scope="module")
def blobs():
    X, y = make_blobs(3000, 40, centers=16, cluster_std=4.0, random_state=0)
    return X, y


def _monotone(history):
    obj = [h["objective"] for h in history]
    return all(b <= a * (1 + 1e-10) for a, b in zip(obj, obj[1:]))


@pytest.mark.parametrize("sparsity", [3, 5])
def test_objective_non_increasing_digits(digits, sparsity):
    X, init = digits
    qk = dqkm.QKMeans(10, sparsity=sparsity, init=init, max_iter=25, tol=0,
                      objective_tol=0).fit(X)
    assert len(qk.history_) == qk.n_iter_ == 25
    assert _monotone(qk.history_)
    for rec in qk.history_:
        assert {"objective", "shift", "seconds", "empty_clusters", "seconds_assign",
                "seconds_palm", "palm_error", "nnz"} <= set(rec)


def test_objective_non_increasing_blobs(blobs):
    X, _ = blobs
    qk = dqkm.QKMeans(16, sparsity=4, random_state=0, max_iter=15, tol=0,
                      palm_iter=20).fit(da.from_array(X, chunks=(700, -1)))
    assert _monotone(qk.history_)
    assert qk.factors_.shape == (16, 40) and qk.compression_ > 1


def test_close_to_kmeans_and_below_posthoc_factorisation():
    """Digits, K = 10, s = 5, one k-means++ seed per run shared by K-means and
    QK-means (3 seeds).

    QK-means stays within 10 % of K-means (the issue's bound), and — refitting
    in every iteration — ends below "K-means + palm4MSA" (the journal's
    Table 3), on average and on each seed.  Measured on 5 seeds (2026-11-24,
    QK-means ÷ K-means): post hoc 1.0100 1.0187 1.0181 1.0124 1.0127 (mean
    1.0144); QK-means hierarchical_refits=max_iter 1.0116 1.0121 1.0096 1.0091
    1.0128 (1.0110); at the defaults 1.0185.  On seed 0 QK-means is 0.16 %
    above the post hoc factorisation, hence the per-seed 0.5 % slack.
    """
    X = load_digits().data
    ratios_km, qk_obj, post_obj = [], [], []
    for seed in range(3):
        km = dqkm.KMeans(10, random_state=seed).fit(X)
        qk = dqkm.QKMeans(10, sparsity=5, random_state=seed, hierarchical_refits=300).fit(X)
        assert _monotone(qk.history_)
        V = factorize_centroids(km, sparsity=5).toarray()
        post = ((X[:, None, :] - V[None]) ** 2).sum(-1).min(1).sum()
        ratios_km.append(qk.inertia_ / km.inertia_)
        qk_obj.append(qk.inertia_)
        post_obj.append(post)
    assert max(ratios_km) <= 1.10
    assert np.mean(qk_obj) < np.mean(post_obj)
    assert all(q <= 1.005 * p for q, p in zip(qk_obj, post_obj))


def test_hierarchical_refits_reach_the_issue_target():
    """Digits, K = 16, s = 3, 10 Lloyd iterations, k-means++ seeds shared with
    K-means (issue #4: objective <= 1.10 × K-means's).  Measured (5 seeds,
    docs/BENCHMARKS.md, palm_iter 50): hierarchical_refits=0 1.159;
    hierarchical_refits=10 1.094 (seeds 0 and 1: 1.085, 1.094)."""
    from sklearn.cluster import kmeans_plusplus

    X = load_digits().data
    ratios = {0: [], 10: []}
    for seed in (0, 1):
        init = kmeans_plusplus(X, 16, random_state=seed)[0]
        km = dqkm.KMeans(16, init=init, max_iter=10, tol=0).fit(X)
        for refits in (0, 10):
            qk = dqkm.QKMeans(16, sparsity=3, init=init, max_iter=10, tol=0, palm_iter=50,
                              hierarchical_refits=refits, objective_tol=0).fit(X)
            assert _monotone(qk.history_)
            ratios[refits].append(qk.inertia_ / km.inertia_)
    assert np.mean(ratios[10]) <= 1.10
    assert np.mean(ratios[10]) < np.mean(ratios[0])


def test_hierarchical_refits_only_in_the_first_iterations(digits, monkeypatch):
    import dqkm.kernels as kernels

    calls = []
    real = kernels.hierarchical_palm4msa

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(kernels, "hierarchical_palm4msa", spy)
    X, init = digits
    for refits in (0, 2):
        calls.clear()
        dqkm.QKMeans(10, sparsity=3, init=init, max_iter=5, tol=0, palm_iter=5, palm_iter_init=5,
                     hierarchical_refits=refits).fit(X)
        # the init factorisation, then one per refit (on the cluster means)
        assert len(calls) == 1 + refits
    # a fit resumed after iteration 2 with hierarchical_refits=3 refits
    # hierarchically in iteration 3 only
    from dqkm.cluster.qkmeans import _refit_solver
    from dqkm.kernels import default_constraints

    cons = default_constraints(10, 64, sparsity=3)
    start = real(init, cons, n_iter=5).factors
    solve = _refit_solver(3, start_iter=2)
    calls.clear()
    for _ in range(3):
        solve(init, cons, n_iter=5, init=start, fixed_left=np.ones(10))
    assert len(calls) == 1


def _refit_target(X, start, k):
    """Iteration 1's target from ``start``: ``√n``, ``A = D_√n·U`` and the means ``U``
    as the refit reads them back from ``A`` (``A / √n``, to the bit)."""
    labels = ((X[:, None, :] - start.toarray()[None]) ** 2).sum(-1).argmin(1)
    counts = np.bincount(labels, minlength=k).astype(float)
    V0 = start.toarray()
    U = np.array([X[labels == j].mean(0) if counts[j] else V0[j] for j in range(k)])
    w = np.sqrt(counts)
    A = w[:, None] * U
    nz = w > 0
    U[nz] = A[nz] / w[nz, None]
    return U, w, A


def _qk_runs(A, U, cons, w, *, n_iter, n_iter_unweighted, start):
    """The palm4MSA runs of the hierarchical refit, with QK-means's settings (adaptive
    step, geometric residual rule, the tighter budget): the plain run on U, it polished
    on A, and the run warm-started from ``start``."""
    from dqkm.kernels import default_residual_constraints, hierarchical_palm4msa, palm4msa

    res = default_residual_constraints(cons, rule="geometric")
    plain = hierarchical_palm4msa(U, cons, n_iter=n_iter_unweighted, adaptive_step=True,
                                  residual_constraints=res, split_tol=1e-3, tol=1e-4)
    polished = palm4msa(A, cons, n_iter=n_iter, init=plain.factors, fixed_left=w,
                        adaptive_step=True)
    warm = palm4msa(A, cons, n_iter=n_iter, init=start, fixed_left=w, adaptive_step=True)
    return plain, polished, warm


def test_hierarchical_refit_keeps_the_factorisation_of_the_means(digits):
    """Iteration 1 from the initial factorisation: hierarchical palm4MSA on the means U,
    polished on D_√n·U, ends below the warm-started run, and is kept."""
    from dqkm.cluster.qkmeans import _hierarchical_refit
    from dqkm.kernels import default_constraints, hierarchical_palm4msa

    X, init = digits
    cons = default_constraints(10, 64, sparsity=3)
    start = hierarchical_palm4msa(init, cons, n_iter=30).factors
    U, w, A = _refit_target(X, start, 10)
    got = _hierarchical_refit(A, cons, n_iter=30, init=start, fixed_left=w, n_iter_unweighted=40)
    plain, polished, warm = _qk_runs(A, U, cons, w, n_iter=30, n_iter_unweighted=40, start=start)
    assert polished.errors[-1] < warm.errors[-1]  # the case this test is about
    np.testing.assert_array_equal(got.errors, polished.errors)
    assert got.factors.allclose(polished.factors, rtol=0, atol=0)
    # the polished run starts from the plain factors' weighted error
    np.testing.assert_allclose(polished.errors[0],
                               np.linalg.norm(A - w[:, None] * plain.factors.toarray()),
                               rtol=1e-9)


def test_hierarchical_refit_keeps_the_warm_start_when_it_is_better(digits):
    """When the factorisation from scratch ends above the warm-started run (a start
    already fitted to this very target), the warm-started run is kept: the refit never
    ends above the previous factors' error, so the QK-means objective stays
    non-increasing."""
    from dqkm.cluster.qkmeans import _hierarchical_refit
    from dqkm.kernels import default_constraints, hierarchical_palm4msa, palm4msa

    X, init = digits
    cons = default_constraints(10, 64, sparsity=3)
    first = hierarchical_palm4msa(init, cons, n_iter=30).factors
    U, w, A = _refit_target(X, first, 10)
    start = palm4msa(A, cons, n_iter=300, init=first, fixed_left=w, adaptive_step=True).factors
    start_error = np.linalg.norm(A - w[:, None] * start.toarray())
    got = _hierarchical_refit(A, cons, n_iter=5, init=start, fixed_left=w, n_iter_unweighted=2)
    _, polished, warm = _qk_runs(A, U, cons, w, n_iter=5, n_iter_unweighted=2, start=start)
    assert polished.errors[-1] > warm.errors[-1]  # the case this test is about
    np.testing.assert_array_equal(got.errors, warm.errors)
    assert got.errors[-1] <= start_error * (1 + 1e-12)


def test_predict_is_argmin_over_dense_factors(digits):
    X, init = digits
    qk = dqkm.QKMeans(10, sparsity=3, init=init, max_iter=10).fit(X)
    V = qk.factors_.toarray()
    brute = ((X[:, None, :] - V[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(qk.predict(X), brute.argmin(1))
    np.testing.assert_array_equal(qk.labels_, brute.argmin(1))
    np.testing.assert_allclose(qk.transform(X), np.sqrt(brute), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(qk.cluster_centers_, V)
    assert qk.inertia_ == pytest.approx(brute.min(1).sum(), rel=1e-9)
    assert qk.score(X) == pytest.approx(-qk.inertia_, rel=1e-9)


@pytest.mark.parametrize("chunks", [500, 333])
def test_dask_and_numpy_paths_agree(digits, chunks):
    X, init = digits
    a = dqkm.QKMeans(10, sparsity=3, init=init, max_iter=8, tol=0).fit(X)
    b = dqkm.QKMeans(10, sparsity=3, init=init, max_iter=8, tol=0).fit(
        da.from_array(X, chunks=(chunks, -1)))
    assert isinstance(b.labels_, da.Array)
    np.testing.assert_array_equal(a.labels_, b.labels_.compute())
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(b.predict(da.from_array(X, chunks=400)).compute(), a.labels_)


def test_local_cluster_agrees(dist_client, digits):
    X, init = digits
    a = dqkm.QKMeans(10, sparsity=3, init=init, max_iter=6, tol=0).fit(X)
    b = dqkm.QKMeans(10, sparsity=3, init=init, max_iter=6, tol=0).fit(
        da.from_array(X, chunks=(450, -1)))
    np.testing.assert_array_equal(a.labels_, b.labels_.compute())


@pytest.mark.parametrize("refits", [1, 6])
def test_save_load_and_checkpoint_resume(tmp_path, digits, refits, monkeypatch):
    """Stopped after iteration 4 and resumed: the same result — with
    hierarchical_refits=6 the resumed iterations 5 and 6 still refit
    hierarchically (the count continues from the checkpoint)."""
    X, _ = digits
    kw = dict(sparsity=3, random_state=0, max_iter=12, tol=0, hierarchical_refits=refits)
    full = dqkm.QKMeans(10, **kw).fit(X)
    dqkm.save(full, tmp_path / "qk.zarr")
    back = dqkm.load(tmp_path / "qk.zarr")
    np.testing.assert_array_equal(back.predict(X), full.labels_)
    assert back.flops_ == full.flops_ and back.factors_.nnz == full.factors_.nnz

    class Stop(Exception):
        pass

    def stop(rec, factors):
        if rec["iteration"] == 4:
            raise Stop

    with pytest.raises(Stop):
        dqkm.QKMeans(10, **kw).fit(X, checkpoint=tmp_path / "ck", callback=stop)
    import dqkm.kernels as kernels

    calls, real = [], kernels.hierarchical_palm4msa
    monkeypatch.setattr(kernels, "hierarchical_palm4msa",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    resumed = dqkm.QKMeans(10, **kw).fit(X, checkpoint=tmp_path / "ck", resume=True)
    # no init; one hierarchical run in each of iterations 5 … refits
    assert len(calls) == max(refits - 4, 0)
    np.testing.assert_array_equal(resumed.labels_, full.labels_)
    np.testing.assert_array_equal(resumed.cluster_centers_, full.cluster_centers_)


@pytest.mark.parametrize("kw,match", [
    ({"sparsity": 0}, r"The 'sparsity' parameter of QKMeans must be an int in the range \[1, 10\]"),
    ({"sparsity": 11}, r"'sparsity' parameter of QKMeans must be an int in the range \[1, 10\]"),
    ({"n_factors": 1}, r"The 'n_factors' parameter of QKMeans must be an int in the range \[2"),
    ({"init_factorization": "svd"}, "'init_factorization' parameter of QKMeans must be one of"),
    ({"palm_iter": 0}, "'palm_iter' parameter"),
    ({"hierarchical_refits": -1},
     r"The 'hierarchical_refits' parameter of QKMeans must be an int in the range \[0, inf\). "
     r"Got -1 instead."),
    ({"n_clusters": 0}, "'n_clusters' parameter"),
])
def test_bad_params(digits, kw, match):
    X, _ = digits
    params = {"n_clusters": 10, **kw}
    with pytest.raises(ValueError, match=match):
        dqkm.QKMeans(**params).fit(X)


def test_non_finite_and_predict_errors(digits):
    X, _ = digits
    bad = X.copy()
    bad[3, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        dqkm.QKMeans(4, sparsity=2, init=X[:4]).fit(da.from_array(bad, chunks=500))
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        dqkm.QKMeans(4).predict(X)
    qk = dqkm.QKMeans(4, sparsity=2, random_state=0, max_iter=3).fit(X)
    with pytest.raises(ValueError, match="X has 63 features, but QKMeans is expecting 64"):
        qk.predict(X[:, :63])
