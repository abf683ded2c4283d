import io
import json
import pickle
import subprocess
import sys
import threading

import numpy as np
import pytest
import scipy.sparse as sp

from dqkm.kernels.sparse_factors import SparseFactors


def _random_chain(shapes, density, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    mats = []
    for m, n in shapes:
        M = rng.standard_normal((m, n)) * (rng.random((m, n)) < density)
        M[np.arange(m), rng.integers(0, n, m)] = rng.standard_normal(m)  # no empty rows
        mats.append(sp.csr_matrix(M.astype(dtype)))
    return mats


def _chain_for(K, D, seed, dtype=np.float64):
    A = min(K, D)
    return SparseFactors(_random_chain([(K, A), (A, A), (A, D)], 0.15, seed, dtype), lam=1.3)


def _dense(V):
    out = np.eye(V.shape[0])
    for S in V.factors:
        out = out @ S.toarray().astype(np.float64)
    return V.lam * out


def _tol(dtype):
    return dict(rtol=2e-4, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)


# ------------------------------------------------------------------ apply_rows
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("K,D", [(37, 300), (300, 37), (64, 64)])
@pytest.mark.parametrize("n", [0, 1, 17, 1000])
@pytest.mark.parametrize("method", ["numba", "scipy"])
def test_apply_rows_equals_dense_product(dtype, K, D, n, method):
    V = _chain_for(K, D, seed=K * D, dtype=dtype)
    X = np.random.default_rng(n).standard_normal((n, D)).astype(dtype)
    Y = V.apply_rows(X, method=method)
    assert Y.shape == (n, K) and Y.dtype == dtype
    np.testing.assert_allclose(Y, X.astype(np.float64) @ _dense(V).T, **_tol(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numba_threads_and_scipy_reference_agree(dtype):
    V = _chain_for(90, 130, seed=3, dtype=dtype)
    X = np.random.default_rng(4).standard_normal((2000, 130)).astype(dtype)
    ref = V.apply_rows(X, method="scipy")
    for n_threads in (None, 1, 2, 3):
        np.testing.assert_allclose(V.apply_rows(X, method="numba", n_threads=n_threads), ref,
                                   **_tol(dtype))
    np.testing.assert_allclose(V.apply_rows(X), ref, **_tol(dtype))


def test_results_do_not_depend_on_threads_and_numba_setting_is_restored():
    import numba

    V = _chain_for(70, 50, seed=21, dtype=np.float32)
    X = np.random.default_rng(22).standard_normal((1001, 50)).astype(np.float32)
    before = numba.get_num_threads()
    Y1 = V.apply_rows(X, n_threads=1)
    np.testing.assert_array_equal(V.apply_rows(X, n_threads=2), Y1)
    np.testing.assert_array_equal(V.apply_rows(X[500:]), Y1[500:])
    assert numba.get_num_threads() == before


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_rows_result_does_not_depend_on_the_batch(dtype):
    # dense-ish factors (rows with > 8 stored values) exercise every summation branch
    V = SparseFactors(_random_chain([(40, 30), (30, 60), (60, 30)], 0.4, seed=23, dtype=dtype))
    X = np.random.default_rng(24).standard_normal((150, 30)).astype(dtype)
    Y = V.apply_rows(X)
    for step in (1, 3, 8, 13):  # single vectors, narrow tiles, wide tiles
        parts = [V.apply_rows(X[i:i + step]) for i in range(0, 150, step)]
        np.testing.assert_array_equal(np.vstack(parts), Y)
    np.testing.assert_array_equal(V @ X[7], Y[7])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("K,D", [(37, 300), (300, 37), (64, 64)])
@pytest.mark.parametrize("n", [0, 1, 17, 1000])
def test_nearest_rows_is_the_argmin_over_apply_rows(dtype, K, D, n):
    V = _chain_for(K, D, 3, dtype)
    X = np.random.default_rng(4).standard_normal((n, D)).astype(dtype)
    norms = V.row_norms_sq().astype(dtype)
    expected = (norms[None, :] - 2 * V.apply_rows(X)).argmin(axis=1)
    for threads in (None, 1, 2):
        labels = V.nearest_rows(X, norms, n_threads=threads)
        assert labels.dtype == np.int32 and labels.shape == (n,)
        np.testing.assert_array_equal(labels, expected)
    # against the dense rows of V in float64: the same nearest row unless nearly tied
    if n:
        d2 = ((X.astype(np.float64)[:, None, :] - _dense(V)[None]) ** 2).sum(-1)
        gap = np.take_along_axis(d2, labels[:, None].astype(np.int64), 1)[:, 0] - d2.min(1)
        assert (gap <= 1e-3 * d2.min(1).clip(1)).all()
    np.testing.assert_array_equal(V.nearest_rows(X), expected)  # norms computed inside


def test_nearest_rows_ties_go_to_the_lower_index_and_bad_inputs():
    # two identical rows of V: every point is as near to row 0 as to row 1
    S = sp.csr_matrix(np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]))
    V = SparseFactors([S])
    X = np.array([[2.0, 0.0], [0.0, 3.0], [1.0, 1.0]])
    np.testing.assert_array_equal(V.nearest_rows(X), [0, 2, 0])
    with pytest.raises(ValueError, match="'X' parameter of SparseFactors.nearest_rows must be "
                                         "2-D with 2 columns"):
        V.nearest_rows(np.ones((2, 3)))
    with pytest.raises(ValueError, match="'row_norms_sq' .* shape \\(3,\\)"):
        V.nearest_rows(X, np.ones(2))
    with pytest.raises(ValueError, match="'n_threads'"):
        V.nearest_rows(X, n_threads=0)
    with pytest.raises(TypeError, match="real numbers"):
        V.nearest_rows(X.astype(complex))


def test_empty_rows_and_all_zero_factor():
    S1 = np.array([[1.0, 0.0], [0.0, 0.0], [2.0, 3.0]])  # row 1 empty
    S2 = np.zeros((2, 4))
    S2[1, 3] = 5.0                                      # row 0 of S2 empty
    V = SparseFactors([S1, S2])
    X = np.arange(8.0).reshape(2, 4)
    expected = X @ (S1 @ S2).T
    for method in ("numba", "scipy"):
        np.testing.assert_array_equal(V.apply_rows(X, method=method), expected)
    Z = SparseFactors([S1, np.zeros((2, 4))])
    assert Z.nnz == 3 and Z.flops == 6
    np.testing.assert_array_equal(Z.apply_rows(X), np.zeros((2, 3)))
    assert SparseFactors([np.zeros((2, 2))]).compression == np.inf


def test_apply_rows_from_worker_threads():
    V = _chain_for(50, 80, seed=5, dtype=np.float32)
    X = np.random.default_rng(6).standard_normal((700, 80)).astype(np.float32)
    ref = V.apply_rows(X, method="scipy")
    results = {}

    def work(i, nt):
        results[i] = V.apply_rows(X, n_threads=nt)

    threads = [threading.Thread(target=work, args=(i, [None, 2][i % 2])) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(4):
        np.testing.assert_allclose(results[i], ref, rtol=2e-4, atol=2e-4)


def test_apply_rows_input_dtypes_and_layout():
    V = _chain_for(20, 30, seed=7)
    X = np.random.default_rng(8).integers(-3, 4, (10, 30))
    Y = V.apply_rows(X)
    assert Y.dtype == np.float64
    np.testing.assert_allclose(Y, X @ _dense(V).T, rtol=1e-10, atol=1e-10)
    Xf = np.asfortranarray(np.random.default_rng(9).standard_normal((10, 30)))
    np.testing.assert_allclose(V.apply_rows(Xf), Xf @ _dense(V).T, rtol=1e-10, atol=1e-10)
    # float32 X with float64 factors: computed and returned in float32
    Y32 = V.apply_rows(Xf.astype(np.float32))
    assert Y32.dtype == np.float32
    np.testing.assert_allclose(Y32, Xf @ _dense(V).T, rtol=2e-4, atol=2e-4)


def test_inputs_not_mutated():
    mats = _random_chain([(12, 9), (9, 15)], 0.3, seed=10)
    dense = np.random.default_rng(1).standard_normal((15, 15))
    copies = [M.copy() for M in mats] + [dense.copy()]
    V = SparseFactors(mats + [dense], lam=2.0)
    for M, C in zip(mats, copies):
        assert (M != C).nnz == 0 and M.data.flags.writeable
    np.testing.assert_array_equal(dense, copies[-1])
    X = np.random.default_rng(2).standard_normal((33, 15))
    X0 = X.copy()
    V.apply_rows(X)
    V.apply_rows(X, method="scipy")
    V @ X.T
    X[:, :12] @ V
    np.testing.assert_array_equal(X, X0)


def test_read_only_and_no_setters():
    V = _chain_for(10, 20, seed=11)
    for S in V.factors:
        for a in (S.data, S.indices, S.indptr):
            assert not a.flags.writeable
            with pytest.raises(ValueError, match="read-only"):
                a[0] = 1
    for name in ("lam", "shape", "factors", "dtype", "nnz"):
        with pytest.raises(AttributeError):
            setattr(V, name, 1)
    assert isinstance(V.factors, tuple)
    assert all(isinstance(S, sp.csr_matrix) for S in V.factors)


# ------------------------------------------------------------------ products
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul_both_sides_and_transpose(dtype):
    V = _chain_for(37, 300, seed=12, dtype=dtype)
    Vd = _dense(V)
    rng = np.random.default_rng(13)
    x, Xm = rng.standard_normal(300).astype(dtype), rng.standard_normal((300, 4)).astype(dtype)
    y, Ym = rng.standard_normal(37).astype(dtype), rng.standard_normal((5, 37)).astype(dtype)
    tol = _tol(dtype)
    assert (V @ x).shape == (37,) and (V @ Xm).shape == (37, 4)
    np.testing.assert_allclose(V @ x, Vd @ x, **tol)
    np.testing.assert_allclose(V @ Xm, Vd @ Xm, **tol)
    assert (y @ V).shape == (300,) and (Ym @ V).shape == (5, 300)
    np.testing.assert_allclose(y @ V, y @ Vd, **tol)
    np.testing.assert_allclose(Ym @ V, Ym @ Vd, **tol)
    T = V.T
    assert isinstance(T, SparseFactors) and T.shape == (300, 37) and T.T is V
    assert T.lam == V.lam and T.nnz == V.nnz and T.dtype == V.dtype
    np.testing.assert_allclose(T.toarray(), Vd.T, **tol)
    np.testing.assert_allclose(T @ y, Vd.T @ y, **tol)
    with pytest.raises(ValueError, match="x must have 300 rows"):
        V @ np.ones(37)
    with pytest.raises(ValueError, match="y must have 37 columns"):
        np.ones((2, 300)) @ V


def test_chaining_two_operators():
    U = _chain_for(8, 12, seed=14)
    W = SparseFactors(_random_chain([(12, 6)], 0.5, seed=15), lam=0.5)
    UW = U @ W
    assert UW.n_factors == U.n_factors + 1 and UW.lam == pytest.approx(U.lam * 0.5)
    np.testing.assert_allclose(UW.toarray(), _dense(U) @ _dense(W), rtol=1e-12)


# ------------------------------------------------------------------ hand-worked case
def test_hand_worked_counts_and_values():
    S1 = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 0.0]])            # 3 x 2, nnz 3
    S2 = sp.csr_matrix(np.array([[0.0, 1.0, 0.0, 1.0],
                                 [1.0, 0.0, 0.0, 0.0]]))             # 2 x 4, nnz 3
    V = SparseFactors([S1, S2], lam=2.0)
    assert V.shape == (3, 4) and V.n_factors == 2 and V.dtype == np.float64
    assert V.nnz == 6 and V.flops == 12
    assert V.compression == pytest.approx(12 / 6)
    expected = 2.0 * np.array([[0, 1, 0, 1], [2, 0, 0, 0], [0, 3, 0, 3]], dtype=float)
    np.testing.assert_array_equal(V.toarray(), expected)
    np.testing.assert_allclose(V.row_norms_sq(), [8.0, 16.0, 72.0])
    np.testing.assert_allclose(V.apply_rows(np.array([[1.0, 2.0, 3.0, 4.0]])), [[12, 4, 36]])
    F = V.fold_lam()
    assert F.lam == 1.0 and F.factors[0].toarray()[2, 0] == 6.0 and V.lam == 2.0
    np.testing.assert_array_equal(F.toarray(), expected)
    # explicit zeros are not counted
    Z = sp.csr_matrix((np.array([0.0, 1.0]), np.array([0, 1]), np.array([0, 2])), shape=(1, 2))
    assert SparseFactors([Z]).nnz == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_norms_and_astype(dtype):
    V = _chain_for(300, 37, seed=16, dtype=dtype)
    rn = V.row_norms_sq()
    assert rn.dtype == np.float64 and rn.shape == (300,)
    np.testing.assert_allclose(rn, (_dense(V) ** 2).sum(1), rtol=1e-10)
    other = np.float64 if dtype == np.float32 else np.float32
    W = V.astype(other)
    assert W.dtype == other and V.astype(dtype) is V
    assert W.allclose(V, rtol=1e-5, atol=1e-6)
    assert not W.allclose(SparseFactors(V.factors, lam=2 * V.lam))
    with pytest.raises(ValueError, match="'dtype' parameter .* Got int32"):
        V.astype(np.int32)


def test_dtype_rules():
    i = np.eye(3, dtype=np.int64)
    assert SparseFactors([i]).dtype == np.float64
    f32 = np.eye(3, dtype=np.float32)
    assert SparseFactors([f32, f32]).dtype == np.float32
    assert SparseFactors([f32, np.eye(3)]).dtype == np.float64
    with pytest.raises(TypeError, match="float32, float64, integer or boolean.*complex"):
        SparseFactors([np.eye(3, dtype=complex)])


# ------------------------------------------------------------------ persistence
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_save_load_round_trip_without_pickle(tmp_path, dtype):
    V = _chain_for(37, 300, seed=17, dtype=dtype)
    path = tmp_path / "v.factors"
    V.save(path)
    assert path.exists()  # the name is used as given
    with np.load(path, allow_pickle=False) as z:
        header = json.loads(bytes(z["header"]).decode())
        assert header["version"] == 1 and header["n_factors"] == 3
        assert all(z[k].dtype != object for k in z.files)
    W = SparseFactors.load(path)
    assert W.dtype == dtype and W.lam == V.lam and W.shape == V.shape
    for A, B in zip(V.factors, W.factors):
        assert (A != B).nnz == 0 and A.dtype == B.dtype
    buf = io.BytesIO()
    V.save(buf)
    buf.seek(0)
    assert SparseFactors.load(buf).allclose(V, rtol=0, atol=0)


def test_load_rejects_other_files(tmp_path):
    p = tmp_path / "x.npz"
    np.savez(p, a=np.ones(3))
    with pytest.raises(ValueError, match="not a SparseFactors file"):
        SparseFactors.load(p)
    V = _chain_for(5, 6, seed=18)
    buf = io.BytesIO()
    V.save(buf)
    buf.seek(0)
    with np.load(buf) as z:
        arrays = dict(z)
    h = json.loads(bytes(arrays["header"]).decode())
    h["version"] = 99
    arrays["header"] = np.array(json.dumps(h))
    np.savez(p, **arrays)
    with pytest.raises(ValueError, match="format version 99"):
        SparseFactors.load(p)


def test_pickle_round_trip_stays_read_only():
    V = _chain_for(20, 30, seed=19)
    W = pickle.loads(pickle.dumps(V))
    assert W.allclose(V, rtol=0, atol=0)
    assert not W.factors[0].data.flags.writeable


# ------------------------------------------------------------------ validation
def test_chain_shape_error_names_the_factors():
    mats = [np.ones((8, 64)), np.ones((64, 32)), np.ones((16, 64))]
    with pytest.raises(ValueError, match=r"factor 2 has shape \(64, 32\) but factor 3 has shape "
                                         r"\(16, 64\): S2 @ S3 is undefined"):
        SparseFactors(mats)


def test_bad_inputs():
    with pytest.raises(ValueError, match="finite values.*factor 2"):
        SparseFactors([np.eye(2), np.array([[1.0, np.nan], [0.0, 1.0]])])
    with pytest.raises(ValueError, match="finite values.*factor 1"):
        SparseFactors([sp.csr_matrix(np.array([[np.inf]]))])
    with pytest.raises(ValueError, match="'lam' parameter .* Got nan"):
        SparseFactors([np.eye(2)], lam=float("nan"))
    with pytest.raises(ValueError, match="'lam' parameter .* Got 'a'"):
        SparseFactors([np.eye(2)], lam="a")
    with pytest.raises(ValueError, match="at least one factor"):
        SparseFactors([])
    with pytest.raises(TypeError, match="must be a sequence .* Got ndarray"):
        SparseFactors(np.eye(2))
    with pytest.raises(TypeError, match="factor 2 of type list"):
        SparseFactors([np.eye(2), [[1.0]]])
    with pytest.raises(ValueError, match="2-D arrays. Got factor 1 with shape \\(3,\\)"):
        SparseFactors([np.ones(3)])
    V = _chain_for(5, 6, seed=20)
    with pytest.raises(ValueError, match="'method' parameter .* Got 'blas'"):
        V.apply_rows(np.ones((2, 6)), method="blas")
    with pytest.raises(ValueError, match="6 columns .* Got shape \\(2, 5\\)"):
        V.apply_rows(np.ones((2, 5)))
    with pytest.raises(ValueError, match="6 columns .* Got shape \\(6,\\)"):
        V.apply_rows(np.ones(6))
    with pytest.raises(TypeError, match="real numbers. Got dtype complex"):
        V.apply_rows(np.ones((2, 6), dtype=complex))
    with pytest.raises(ValueError, match="'n_threads' parameter .* Got 0"):
        V.apply_rows(np.ones((2, 6)), n_threads=0)
    with pytest.raises(ValueError, match="'n_threads' parameter .* Got 1.5"):
        V.apply_rows(np.ones((2, 6)), method="scipy", n_threads=1.5)
    with pytest.raises(TypeError, match="must be a SparseFactors"):
        V.allclose(np.eye(5))


def test_kernels_release_the_gil():
    from dqkm.kernels import _factor_apply as fa

    for kernel in (fa.apply_rows_serial, fa.apply_rows_parallel):
        assert kernel.targetoptions["nogil"] is True


def test_importing_kernels_does_not_import_dask():
    code = ("import dqkm.kernels, dqkm.kernels.sparse_factors, sys; "
            "assert 'dask' not in sys.modules, 'dask imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
