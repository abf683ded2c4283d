"""The fast Walsh–Hadamard transform and the Fast-Nyström landmark operator."""

import numpy as np
import pytest
from scipy.linalg import hadamard

from dqkm.kernels.hadamard import HadamardLandmarks, fwht, fwht_reference, next_pow2


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fwht_equals_scipy_hadamard_all_sizes(dtype):
    rng = np.random.default_rng(0)
    for m in range(1, 13):  # 2 … 4096
        N = 2 ** m
        X = rng.standard_normal((3, N)).astype(dtype)
        expected = X.astype(np.float64) @ hadamard(N)
        got = fwht(X)
        assert got.dtype == dtype and got.shape == (3, N)
        tol = 1e-9 if dtype == np.float64 else 1e-4
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * np.sqrt(N) * 4)
        np.testing.assert_allclose(fwht_reference(X), expected, rtol=tol,
                                   atol=tol * np.sqrt(N) * 4)


def test_fwht_by_hand_and_padding():
    # H_2 = [[1, 1], [1, -1]]
    np.testing.assert_array_equal(fwht(np.array([[3.0, 1.0]])), [[4.0, 2.0]])
    # D = 3 is padded to 4: [1, 2, 3, 0] · H_4
    x = np.array([[1.0, 2.0, 3.0]])
    np.testing.assert_array_equal(fwht(x), [[6.0, 2.0, 0.0, -4.0]])
    rng = np.random.default_rng(1)
    for d in (5, 100, 2000):
        X = rng.standard_normal((2, d))
        N = next_pow2(d)
        Xp = np.zeros((2, N))
        Xp[:, :d] = X
        np.testing.assert_allclose(fwht(X), Xp @ hadamard(N), atol=1e-9)


def test_fwht_does_not_mutate_and_handles_empty():
    X = np.arange(8.0).reshape(2, 4)
    before = X.copy()
    fwht(X)
    np.testing.assert_array_equal(X, before)
    assert fwht(np.empty((0, 6))).shape == (0, 8)
    assert fwht(np.array([[2.0]])).tolist() == [[2.0]]


def test_next_pow2():
    assert [next_pow2(n) for n in (1, 2, 3, 4, 5, 2000, 2048)] == [1, 2, 4, 4, 8, 2048, 2048]
    with pytest.raises(ValueError, match="n >= 1"):
        next_pow2(0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_hadamard_landmarks_apply_equals_dense(dtype):
    rng = np.random.default_rng(2)
    D = 13  # padded to 16
    seeds = rng.standard_normal((3, D))
    blocks = np.array([0, 0, 0, 1, 2, 2])
    rows = np.array([0, 5, 15, 3, 1, 2])
    U = HadamardLandmarks(seeds, blocks, rows).astype(dtype)
    dense = U.toarray()
    H = hadamard(16)[:, :D]
    expected_U = H[rows] * seeds[blocks]
    np.testing.assert_allclose(dense, expected_U, rtol=1e-6)
    X = rng.standard_normal((7, D)).astype(dtype)
    tol = 1e-10 if dtype == np.float64 else 1e-4
    np.testing.assert_allclose(U.apply_rows(X), X.astype(np.float64) @ expected_U.T,
                               rtol=tol, atol=tol * 10)
    np.testing.assert_allclose(U.row_norms_sq(), (expected_U ** 2).sum(1), rtol=1e-6)
    assert U.shape == (6, D)
    assert U.flops == 3 * (D + 16 * 4)


def test_hadamard_landmarks_validation():
    seeds = np.ones((2, 4))
    with pytest.raises(ValueError, match="non-decreasing seed indices"):
        HadamardLandmarks(seeds, [1, 0], [0, 1])
    with pytest.raises(ValueError, match=r"Walsh pattern indices in \[0, 4\)"):
        HadamardLandmarks(seeds, [0, 0], [0, 4])
    with pytest.raises(ValueError, match="X has 3 features"):
        HadamardLandmarks(seeds, [0], [0]).apply_rows(np.ones((1, 3)))
