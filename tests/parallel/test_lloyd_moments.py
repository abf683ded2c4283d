"""The per-chunk moments of a fit's first pass (dqkm.parallel.lloyd._moments) set
scikit-learn's relative tolerance: merged over chunks they give each feature's count,
mean and sum of squared deviations, for float32, float64 and integer chunks, and the
tolerance is scikit-learn's ``tol × mean(var(X, axis=0))``."""

import numpy as np
import pytest

from dqkm.kernels._finish import column_moments
from dqkm.parallel.lloyd import _merge_moments, _moments, tolerance_from_moments


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("d", [1, 3, 17])
def test_chunk_moments_merge_to_the_whole_arrays(dtype, d):
    rng = np.random.default_rng(d)
    X = (rng.standard_normal((1000, d)) * 7 + 1000).astype(dtype)  # far from the origin
    parts = [_moments(X[a:b]) for a, b in [(0, 0), (0, 333), (333, 334), (334, 1000)]]
    out = parts[0]
    for p in parts[1:]:
        out = _merge_moments(out, p)
    X64 = X.astype(np.float64)
    assert out[0] == 1000
    np.testing.assert_allclose(out[1], X64.mean(0), rtol=1e-12)
    np.testing.assert_allclose(out[2], ((X64 - X64.mean(0)) ** 2).sum(0), rtol=1e-7)
    assert tolerance_from_moments(out, 1e-4) == pytest.approx(1e-4 * X64.var(0).mean(),
                                                              rel=1e-7)


def test_column_moments_are_float64_sums_in_row_order_and_keep_non_finite_values():
    X = np.array([[1.0, 2.0], [3.0, np.inf], [5.0, 6.0]], dtype=np.float32)
    s, q = column_moments(X)
    assert s.dtype == q.dtype == np.float64
    np.testing.assert_array_equal(s[:1], [9.0])
    np.testing.assert_array_equal(q[:1], [35.0])
    assert np.isinf(s[1]) and np.isinf(q[1])
    big = np.full((2, 1), 3e38, dtype=np.float32)  # squares beyond float32: float64 sums
    assert np.isfinite(column_moments(big)[1]).all()
    empty = column_moments(np.zeros((0, 4), dtype=np.float32))
    np.testing.assert_array_equal(empty[0], np.zeros(4))
