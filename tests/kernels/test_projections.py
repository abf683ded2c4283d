import numpy as np
import pytest

from dqkm.kernels.projections import Sp, Spcol, Splin, Splincol


def _unit(M):
    M = np.asarray(M, dtype=float)
    return M / np.linalg.norm(M)


# M's magnitudes, with ties in row 0 (3, 3), column 1 (3, 3) and a zero row
M = np.array(
    [
        [3.0, -3.0, 1.0, 0.5],
        [-2.0, 3.0, 4.0, 0.0],
        [0.0, 0.0, 0.0, 0.0],
    ]
)


def test_sp_hand_worked_with_ties():
    # magnitudes sorted: 4 (flat 6), then 3 at flat 0, 1, 5: k=3 keeps flat 6, 0, 1
    want = np.zeros_like(M)
    want.flat[[6, 0, 1]] = M.flat[[6, 0, 1]]
    np.testing.assert_array_equal(Sp(M.shape, 3).support(M), want != 0)
    np.testing.assert_allclose(Sp(M.shape, 3)(M), _unit(want))


def test_splin_hand_worked_with_ties():
    P = Splin(M.shape, 2)
    # row 0: |3| at cols 0 and 1 (tie with nothing else), row 1: 4 then 3,
    # row 2: all zero -> lower columns 0, 1 (selected zeros stay zero)
    want = np.array([[1, 1, 0, 0], [0, 1, 1, 0], [1, 1, 0, 0]], dtype=bool)
    np.testing.assert_array_equal(P.support(M), want)
    np.testing.assert_allclose(P(M), _unit(np.where(want, M, 0)))
    # a tie inside the kept count: s=1 keeps the lower column of the two 3s
    assert Splin(M.shape, 1).support(M)[0].tolist() == [True, False, False, False]


def test_spcol_hand_worked_with_ties():
    P = Spcol(M.shape, 1)
    # col 0: 3 (row 0); col 1: 3 and 3 tie -> row 0; col 2: 4 (row 1); col 3: 0.5 (row 0)
    want = np.array([[1, 1, 0, 1], [0, 0, 1, 0], [0, 0, 0, 0]], dtype=bool)
    np.testing.assert_array_equal(P.support(M), want)
    np.testing.assert_allclose(P(M), _unit(np.where(want, M, 0)))


def test_splincol_is_union_of_rows_and_columns():
    P = Splincol(M.shape, 1)
    rows = np.array([[1, 0, 0, 0], [0, 0, 1, 0], [1, 0, 0, 0]], dtype=bool)
    cols = np.array([[1, 1, 0, 1], [0, 0, 1, 0], [0, 0, 0, 0]], dtype=bool)
    np.testing.assert_array_equal(P.support(M), rows | cols)
    np.testing.assert_allclose(P(M), _unit(np.where(rows | cols, M, 0)))
    assert not P.is_exact and Splin(M.shape, 1).is_exact


def test_docstring_example_and_all_equal_ties():
    P = Splincol((2, 3), s=1)
    assert P.support([[3.0, 1.0, 0.0], [2.0, 2.0, 5.0]]).astype(int).tolist() == [[1, 0, 0], [0, 1, 1]]
    # all magnitudes equal: rows keep their first s columns, columns their first s rows
    H = np.array([[1.0, -1.0, 1.0], [1.0, 1.0, -1.0], [-1.0, 1.0, 1.0]])
    assert Splincol((3, 3), 1).support(H).astype(int).tolist() == [[1, 1, 1], [1, 0, 0], [1, 0, 0]]
    assert Splincol((3, 3), 2).support(H).astype(int).tolist() == [[1, 1, 1], [1, 1, 1], [1, 1, 0]]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("s", [1, 3, 30])
def test_against_brute_force(dtype, s):
    rng = np.random.default_rng(s)
    X = rng.standard_normal((40, 50)).astype(dtype)
    X[3, :10] = X[3, 10]  # ties
    X0 = X.copy()
    A = np.abs(X.astype(np.float64))
    rows = np.zeros(X.shape, bool)
    for i in range(40):
        order = sorted(range(50), key=lambda j: (-A[i, j], j))
        rows[i, order[:s]] = True
    cols = np.zeros(X.shape, bool)
    for j in range(50):
        order = sorted(range(40), key=lambda i: (-A[i, j], i))
        cols[order[:s], j] = True
    flat = np.zeros(X.size, bool)
    flat[sorted(range(X.size), key=lambda t: (-A.flat[t], t))[: 7 * s]] = True
    np.testing.assert_array_equal(Splin(X.shape, s).support(X), rows)
    np.testing.assert_array_equal(Spcol(X.shape, s).support(X), cols)
    np.testing.assert_array_equal(Splincol(X.shape, s).support(X), rows | cols)
    np.testing.assert_array_equal(Sp(X.shape, 7 * s).support(X), flat.reshape(X.shape))
    P = Splincol(X.shape, s)(X)
    assert P.dtype == dtype
    np.testing.assert_allclose(np.linalg.norm(P.astype(np.float64)), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(X, X0)  # input untouched


def test_zero_matrix_and_exact_projection_property():
    assert not np.any(Splincol((3, 4), 2)(np.zeros((3, 4))))
    # exact projections: no unit-norm matrix with the same support rule is closer
    rng = np.random.default_rng(0)
    X = rng.standard_normal((6, 7))
    P = Splin((6, 7), 2)(X)
    for _ in range(200):
        Y = np.where(Splin((6, 7), 2).support(rng.standard_normal((6, 7))), rng.standard_normal((6, 7)), 0)
        Y /= np.linalg.norm(Y)
        assert np.linalg.norm(P - X) <= np.linalg.norm(Y - X) + 1e-12


def test_bad_parameters():
    with pytest.raises(ValueError, match=r"The 's' parameter of Splincol must be an int in the range \[1, 3\].*Got 0"):
        Splincol((3, 5), 0)
    with pytest.raises(ValueError, match=r"The 's' parameter of Splincol .*\[1, 3\].*Got 4"):
        Splincol((3, 5), 4)
    with pytest.raises(ValueError, match=r"'s' parameter of Splin .*\[1, 5\].*Got 6"):
        Splin((3, 5), 6)
    with pytest.raises(ValueError, match=r"'s' parameter of Spcol .*\[1, 3\].*Got 4"):
        Spcol((3, 5), 4)
    with pytest.raises(ValueError, match=r"'k' parameter of Sp .*\[1, 15\].*Got 16"):
        Sp((3, 5), 16)
    with pytest.raises(TypeError, match=r"'s' parameter of Splincol must be an int.*float"):
        Splincol((3, 5), 2.0)
    with pytest.raises(ValueError, match=r"'shape' parameter of Splin must be a pair of positive ints"):
        Splin((0, 5), 1)
    with pytest.raises(ValueError, match=r"applies to matrices of shape \(3, 5\); got an array of shape \(5, 3\)"):
        Splincol((3, 5), 1)(np.zeros((5, 3)))
    with pytest.raises(ValueError, match="NaN or infinite"):
        Splincol((1, 2), 1)([[np.nan, 1.0]])


def test_frozen():
    P = Splincol((3, 5), 2)
    with pytest.raises(AttributeError):
        P.s = 3
    assert P == Splincol((3, 5), 2) and P.shape == (3, 5)
