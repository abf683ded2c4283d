"""FactorNystroem: Nyström features with (Q)K-means, uniform and Hadamard landmarks."""

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_digits
from sklearn.exceptions import NotFittedError
from sklearn.kernel_approximation import Nystroem
from sklearn.metrics.pairwise import rbf_kernel

import dqkm
from dqkm.kernel_approximation import FactorNystroem
from dqkm.kernels import SparseFactors
from dqkm.kernels.hadamard import HadamardLandmarks
from dqkm.metrics import nystroem_error


@pytest.fixture(scope="module")
def digits():
    X = load_digits().data
    return X / 16.0  # features in [0, 1]: gamma = 1/64 is a sensible width


@pytest.fixture(scope="module")
def km64(digits):
    return dqkm.KMeans(64, max_iter=20, random_state=0).fit(digits)


@pytest.fixture(scope="module")
def qk16(digits):
    """One QK-means fit shared by the save/load cases (each used to fit its own, the same)."""
    return dqkm.QKMeans(16, max_iter=3, random_state=0).fit(digits.astype(np.float32))


def _sklearn_features(U, X, gamma):
    """sklearn's Nystroem formula on given landmarks (its fit permutes the rows of U;
    Φ·Φᵀ does not depend on that order)."""
    ny = Nystroem(kernel="rbf", gamma=gamma, n_components=len(U), random_state=0).fit(U)
    return ny.transform(X)


def test_kmeans_landmarks_equal_sklearn_formula(digits, km64):
    X = digits
    km = km64
    fn = FactorNystroem(km, gamma=0.05).fit(X)
    Phi = fn.transform(X[:300])
    ref = _sklearn_features(km.cluster_centers_, X[:300], 0.05)
    np.testing.assert_allclose(Phi @ Phi.T, ref @ ref.T, atol=1e-8)
    # columns too: sklearn's landmark order is a permutation of ours
    perm = [int(np.flatnonzero((km.cluster_centers_ == c).all(1))[0])
            for c in Nystroem(kernel="rbf", gamma=0.05, n_components=64,
                              random_state=0).fit(km.cluster_centers_).components_]
    # N = W^{-1/2} is symmetric, so sklearn's features are ours with permuted columns
    np.testing.assert_allclose(Phi[:, perm], ref, atol=1e-8)
    assert fn.normalization_.shape == (64, 64) and fn.n_components_ == 64
    assert fn.gamma_ == 0.05


def test_factor_landmarks_equal_dense_landmarks(digits):
    X = digits[:400]
    S1 = sp.random(16, 16, density=0.3, random_state=1) + sp.eye(16)
    S2 = sp.random(16, 64, density=0.2, random_state=2)
    V = SparseFactors([S1, S2], lam=3.0)
    dense = V.toarray()
    fn = FactorNystroem(V, gamma=0.1).fit(X)
    np.testing.assert_allclose(fn.transform(X), FactorNystroem(dense, gamma=0.1).fit(
        X).transform(X), atol=1e-9)
    ref = _sklearn_features(dense, X, 0.1)
    Phi = fn.transform(X)
    np.testing.assert_allclose(Phi @ Phi.T, ref @ ref.T, atol=1e-8)


def test_hadamard_landmarks_structure(digits):
    X = digits
    fn = FactorNystroem("hadamard", n_components=80, random_state=0).fit(X)
    op = fn.landmark_operator_
    assert isinstance(op, HadamardLandmarks)
    # D = 64 → N = 64, S = ceil(80/64) = 2 seeds: a full block + 16 rows of the second
    assert op.seeds.shape == (2, 64)
    np.testing.assert_array_equal(op.blocks, [0] * 64 + [1] * 16)
    np.testing.assert_array_equal(op.rows[:64], np.arange(64))
    assert len(set(op.rows[64:])) == 16
    # seeds are rows of X (uniform); the features equal those of the dense landmarks
    assert all((X == s).all(1).any() for s in op.seeds)
    dense = FactorNystroem(fn.components_.astype(np.float64), gamma=fn.gamma_).fit(X)
    np.testing.assert_allclose(fn.transform(X[:100]), dense.transform(X[:100]), atol=1e-8)
    km_seeds = FactorNystroem("hadamard", n_components=64, seeds="k-means",
                              random_state=0).fit(X)
    # one seed from K-means with S = 1 cluster: the mean of the data
    np.testing.assert_allclose(km_seeds.landmark_operator_.seeds[0], X.mean(0), atol=1e-10)


def test_nystroem_error_kmeans_beats_uniform_on_digits(digits, km64):
    X = digits
    sample = X[np.random.default_rng(0).choice(len(X), 500, replace=False)]
    km = km64
    err_km = nystroem_error(sample, FactorNystroem(km).fit(X))
    err_un = np.mean([nystroem_error(sample, FactorNystroem("uniform", n_components=64,
                                                            random_state=s).fit(X))
                      for s in range(3)])
    assert err_km < err_un
    # the error is the one of eq. 15, checked against a direct computation
    fn = FactorNystroem(km).fit(X)
    K = rbf_kernel(sample, gamma=1 / 64)
    C = rbf_kernel(sample, km.cluster_centers_, gamma=1 / 64)
    W = rbf_kernel(km.cluster_centers_, gamma=1 / 64)
    direct = np.linalg.norm(K - C @ np.linalg.pinv(W, hermitian=True) @ C.T) / np.linalg.norm(K)
    assert nystroem_error(sample, fn) == pytest.approx(direct, rel=1e-6)
    # sklearn's own Nystroem is accepted too
    assert 0 < nystroem_error(sample, Nystroem(gamma=1 / 64, n_components=64,
                                               random_state=0).fit(X)) < 1


def test_qkmeans_landmarks(digits, km64):
    X = digits
    sample = X[np.random.default_rng(0).choice(len(X), 500, replace=False)]
    qk = dqkm.QKMeans(64, sparsity=5, random_state=0, max_iter=10, palm_iter=30,
                      palm_iter_init=100).fit(X)
    fn = FactorNystroem(qk).fit(X)
    assert fn.landmark_operator_ is qk.factors_
    ref = _sklearn_features(qk.factors_.toarray(), X[:300], 1 / 64)
    Phi = fn.transform(X[:300])
    np.testing.assert_allclose(Phi @ Phi.T, ref @ ref.T, atol=1e-7)
    assert abs(nystroem_error(sample, fn) - nystroem_error(sample, FactorNystroem(km64).fit(X))) \
        <= 0.05


def test_dask_transform_is_lazy_and_equal(digits):
    X = digits.astype(np.float32)
    km = dqkm.KMeans(16, random_state=0).fit(X)
    fn = FactorNystroem(km).fit(X)
    Xd = da.from_array(X, chunks=(400, -1))
    out = fn.transform(Xd)
    assert isinstance(out, da.Array) and out.chunks[0] == Xd.chunks[0]
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.compute(), fn.transform(X), rtol=1e-5, atol=1e-6)
    lazy_fit = FactorNystroem("uniform", n_components=20, random_state=3).fit(Xd)
    np.testing.assert_allclose(lazy_fit.components_, FactorNystroem(
        "uniform", n_components=20, random_state=3).fit(X).components_)


def test_linear_kernel_is_exact_with_full_rank_landmarks():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((100, 5))
    fn = FactorNystroem("uniform", kernel="linear", n_components=10, random_state=0).fit(X)
    Phi = fn.transform(X)
    # rank(U) = 5 = D: the landmarks span the whole space, so K̃ = K exactly
    np.testing.assert_allclose(Phi @ Phi.T, X @ X.T, atol=1e-8)
    assert nystroem_error(X, fn) < 1e-10


def test_bad_input(digits):
    X = digits[:100]
    with pytest.raises(ValueError, match=r"The 'gamma' parameter of FactorNystroem must be a "
                                         r"float in the range \(0, inf\) or None. Got -1 "
                                         r"instead."):
        FactorNystroem("uniform", gamma=-1).fit(X)
    with pytest.raises(ValueError, match="'gamma' parameter .* Got 0.0 instead"):
        FactorNystroem("uniform", gamma=0.0).fit(X)
    with pytest.raises(TypeError, match="'gamma' parameter .* Got 'big' instead"):
        FactorNystroem("uniform", gamma="big").fit(X)
    with pytest.raises(NotFittedError, match="'landmarks' estimator of FactorNystroem "
                                             r"\(KMeans\) is not fitted yet"):
        FactorNystroem(dqkm.KMeans(4)).fit(X)
    with pytest.raises(ValueError, match="'kernel' parameter of FactorNystroem must be one of"):
        FactorNystroem("uniform", kernel="poly").fit(X)
    with pytest.raises(ValueError, match="'landmarks' parameter of FactorNystroem must be one "
                                         "of"):
        FactorNystroem("random").fit(X)
    with pytest.raises(TypeError, match="'landmarks' parameter of FactorNystroem must be"):
        FactorNystroem(3.0).fit(X)
    with pytest.raises(ValueError, match="'seeds' parameter of FactorNystroem must be one of"):
        FactorNystroem("hadamard", seeds="kmeans").fit(X)
    with pytest.raises(ValueError, match="'n_components' parameter of FactorNystroem must be "
                                         "an int in the range"):
        FactorNystroem("uniform", n_components=0).fit(X)
    km = dqkm.KMeans(4, random_state=0).fit(X)
    with pytest.raises(ValueError, match=r"must be None or the number of landmarks \(4\)"):
        FactorNystroem(km, n_components=5).fit(X)
    with pytest.raises(ValueError, match="X has 10 features, but the landmarks of "
                                         "FactorNystroem have 64"):
        FactorNystroem(km).fit(X[:, :10])
    fn = FactorNystroem(km).fit(X)
    with pytest.raises(ValueError, match="X has 10 features, but FactorNystroem is expecting "
                                         "64"):
        fn.transform(X[:, :10])
    with pytest.raises(NotFittedError):
        FactorNystroem(km).transform(X)


def test_passes_sklearn_check_estimator():
    from sklearn.utils.estimator_checks import check_estimator

    failed = [r for r in check_estimator(FactorNystroem(random_state=0), on_fail=None)
              if r["status"] == "failed"]
    assert not failed, [(r["check_name"], str(r["exception"])[:200]) for r in failed]


def test_hadamard_landmarks_padded_dimension():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((300, 30))  # D = 30 is padded to N = 32
    fn = FactorNystroem("hadamard", n_components=40, gamma=0.02, random_state=1).fit(X)
    op = fn.landmark_operator_
    assert op.n_padded == 32 and op.seeds.shape == (2, 30) and fn.n_components_ == 40
    np.testing.assert_allclose(fn.component_sq_norms_, (fn.components_ ** 2).sum(1))
    Xd = da.from_array(X, chunks=(70, -1))
    dense = FactorNystroem(fn.components_, gamma=0.02).fit(X)
    np.testing.assert_allclose(fn.transform(Xd).compute(), dense.transform(X), atol=1e-9)


def test_transform_from_zarr_store(tmp_path, digits, km64):
    import zarr

    from dqkm.io import save_array

    X = digits.astype(np.float32)
    save_array(X, tmp_path / "X.zarr")
    z = zarr.open_array(str(tmp_path / "X.zarr"), mode="r")
    fn = FactorNystroem(km64).fit(X)
    out = fn.transform(z)
    assert isinstance(out, da.Array)
    # computed like the in-memory path (one BLAS thread per task): float32 sums in
    # the same order, so the two agree to float32 rounding
    from dqkm.parallel import compute

    np.testing.assert_allclose(compute(out)[0], fn.transform(X), rtol=1e-5, atol=1e-6)


def test_clone_keeps_fitted_landmarks_for_pipelines(digits, km64):
    from sklearn.base import clone
    from sklearn.model_selection import cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.svm import LinearSVC

    fn = FactorNystroem(km64, gamma=0.05)
    twin = clone(fn)
    assert twin.landmarks is km64 and twin.gamma == 0.05
    np.testing.assert_allclose(twin.fit(digits).transform(digits[:5]),
                               fn.fit(digits).transform(digits[:5]))
    y = load_digits().target
    scores = cross_val_score(make_pipeline(FactorNystroem(km64), LinearSVC(max_iter=200)),
                             digits, y, cv=2)
    assert scores.min() > 0.8
    uni = FactorNystroem("uniform", n_components=7)
    assert clone(uni).get_params() == uni.get_params()


def test_feature_names_out_and_pandas_output():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 4))
    fn = FactorNystroem(n_components=7, random_state=0).fit(X)
    names = fn.get_feature_names_out()
    assert list(names) == [f"factornystroem{i}" for i in range(7)]
    pd = pytest.importorskip("pandas", reason="set_output('pandas') needs pandas (in the "
                                              "'test' extra; absent in a bare install)")
    df = fn.set_output(transform="pandas").transform(X)
    assert isinstance(df, pd.DataFrame) and list(df.columns) == list(names)
    np.testing.assert_array_equal(df.to_numpy(), fn.set_output(transform="default").transform(X))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kernel", ["rbf", "linear"])
def test_nystroem_block_in_pieces_equals_the_formula(monkeypatch, dtype, kernel):
    """The block is mapped a few rows at a time with the kernel values written
    over the products: the same features as the formula on the whole block,
    whether a piece is a full one or the remainder, and the input untouched."""
    import dqkm.parallel.neighbors as nb

    rng = np.random.default_rng(5)
    X = rng.standard_normal((53, 12)).astype(dtype)
    U = rng.standard_normal((6, 12))
    A = rng.standard_normal((6, 6))
    N = A @ A.T
    gamma = 0.05
    P = X.astype(np.float64) @ U.T
    C = rbf_kernel(X.astype(np.float64), U, gamma=gamma) if kernel == "rbf" else P
    ref = C @ N.T
    keep = X.copy()
    state = (U.astype(dtype), (U ** 2).sum(1), N, kernel, gamma)
    for rows in (1, 7, 53, 1024):
        monkeypatch.setattr(nb, "_NYSTROEM_ROWS", rows)
        got = nb.nystroem_block(X, state)
        assert got.dtype == dtype and got.shape == (53, 6)
        tol = 1e-4 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max())
        np.testing.assert_array_equal(X, keep)
    assert nb.nystroem_block(X[:0], state).shape == (0, 6)


@pytest.mark.parametrize("kind", ["qkmeans", "kmeans", "uniform", "hadamard", "factors"])
@pytest.mark.parametrize("ext", [".npz", ".zarr"])
def test_save_load_roundtrip(tmp_path, digits, km64, qk16, kind, ext):
    """dqkm.save/load: the reloaded transformer gives the same features bit for bit,
    with the same kind of landmark operator (sparse factors stay factors)."""
    X = digits.astype(np.float32)
    if kind in ("qkmeans", "factors"):
        qk = qk16
        landmarks = qk if kind == "qkmeans" else qk.factors_
    else:
        landmarks = {"kmeans": km64, "uniform": "uniform", "hadamard": "hadamard"}[kind]
    n = 40 if isinstance(landmarks, str) else None
    fn = FactorNystroem(landmarks, gamma=0.05, n_components=n, seeds="k-means",
                        random_state=0).fit(X)
    dqkm.save(fn, tmp_path / f"fn{ext}")
    back = dqkm.load(tmp_path / f"fn{ext}")
    assert type(back.landmark_operator_) is type(fn.landmark_operator_)
    assert back.get_params()["seeds"] == "k-means" and back.gamma_ == fn.gamma_
    np.testing.assert_array_equal(back.transform(X[:300]), fn.transform(X[:300]))
    np.testing.assert_array_equal(back.get_feature_names_out(), fn.get_feature_names_out())
    if kind == "qkmeans":  # the landmark model comes back fitted
        np.testing.assert_array_equal(back.landmarks.predict(X[:50]), qk.predict(X[:50]))


def test_transform_uses_the_kernel_of_fit(digits, km64):
    """Changing ``kernel`` after fit does not mix the new kernel with the old
    normalisation: transform (and nystroem_error) keep fit's kernel until refit."""
    fn = FactorNystroem(km64, gamma=0.05).fit(digits)
    before = fn.transform(digits[:100])
    err = nystroem_error(digits[:300], fn)
    fn.set_params(kernel="linear")
    np.testing.assert_array_equal(fn.transform(digits[:100]), before)
    assert nystroem_error(digits[:300], fn) == err
    assert fn.fit(digits).kernel_ == "linear"
    assert not np.allclose(fn.transform(digits[:100]), before)
